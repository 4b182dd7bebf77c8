"""Where a flow keeps things, and the ops that write them.

``<path>/flows/<id>`` is the record of every flow job (running or finished; its existence while RUNNING is what
makes ids distinct); ``<path>/steps/<step>`` is the job queue of each step (:mod:`zkqueue.jobs.store` layout),
whose jobs carry the flow job's id and run number; ``<path>/limits/<step>`` the semaphore of a step with a
``max_concurrency``. A step's job record lives only while the step is queued or running: the flow record keeps
what came of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from kazoo.exceptions import NoNodeError

from zkqueue.engine import api
from zkqueue.engine.api import create_op, delete_op, held_items, removal_ops
from zkqueue.errors import CorruptItemError
from zkqueue.flows.model import FlowRecord, now_ms
from zkqueue.formats import naming
from zkqueue.jobs import names
from zkqueue.jobs import store as job_store
from zkqueue.jobs.model import JobState, Record
from zkqueue.jobs.reaper import Keep


@dataclass(frozen=True)
class Paths:
    root: str

    @property
    def flows(self) -> str:
        return naming.join(self.root, "flows")

    @property
    def steps(self) -> str:
        return naming.join(self.root, "steps")

    @property
    def limits(self) -> str:
        return naming.join(self.root, "limits")

    def flow(self, job_id: str) -> str:
        return naming.join(self.flows, names.node_id(job_id))

    def step(self, name: str) -> str:
        return naming.join(self.steps, name)

    def limit(self, name: str) -> str:
        return naming.join(self.limits, name)


def run_of(record: Record) -> int:
    """The flow run a step's job belongs to (0 if its params do not say)."""
    try:
        return run_in(json.loads(record.params))
    except Exception:
        return 0


def run_in(params: Any) -> int:
    """The flow run named by a step job's params as its job queue decodes them (0 if they do not say)."""
    try:
        return int(params["run"])
    except Exception:
        return 0


def read(client: Any, paths: Paths, job_id: str) -> tuple[FlowRecord, int] | None:
    """The flow record of ``job_id`` and its version, or None."""
    try:
        data, stat = client.get(paths.flow(job_id))
    except NoNodeError:
        return None
    return FlowRecord.decode(data), stat.version


def write_op(paths: Paths, rec: FlowRecord, version: int | None, acl: Any) -> Any:
    """Create the flow record (``version`` None) or replace it, version-checked."""
    if version is None:
        return create_op(paths.flow(rec.id), rec.encode(), acl=acl)
    return api.SetDataOp(paths.flow(rec.id), rec.encode(), version)


def queue_ops(client: Any, step_paths: list[job_store.Paths], job_id: str, run: int, acl: Any, *,
              stale: bool = True, headers: dict[str, Any] | None = None, priority: int = 0, due_ms: int = 0,
              place: Callable[[Record], str] | None = None) -> list[Any]:
    """Ops that queue a step job for ``job_id``'s run ``run`` in each of ``step_paths``; with ``stale``, a job
    record left there by an earlier run is looked for and deleted first (version-checked). ``headers``: the step
    jobs' headers (``Job.headers``: what :meth:`Flow.add <zkqueue.flows.Flow.add>` was given, then the finishing
    step's, carried by each hand-off; OpenTelemetry's trace context travels there). ``priority`` and ``due_ms``
    (epoch ms, 0: at once) as a job add's; ``place(record)`` is where its item goes (the step queue's
    :meth:`~zkqueue.jobs.JobQueue.new_item_prefix`: a time bucket when it is due far ahead)."""
    paths = [p.record(job_id) for p in step_paths]
    found: list[Any] = api.multi_read(client, paths) if paths and stale else [NoNodeError()] * len(paths)
    ops: list[Any] = []
    params = json.dumps({"run": run}).encode()
    for sp, path, res in zip(step_paths, paths, found):
        if not isinstance(res, BaseException):
            ops.append(delete_op(path, res[1].version))
        record = Record(id=job_id, state=JobState.QUEUED, params=params, headers=headers, priority=priority,
                        due_ms=due_ms)
        ops.extend(job_store.add_ops(sp, record, [], acl, place(record) if place is not None else None))
    return ops


def cancel_ops(client: Any, step_paths: list[job_store.Paths], job_id: str, acl: Any = None) -> list[Any]:
    """Ops that drop ``job_id``'s queued (not running) step jobs in ``step_paths``: the items, each by a guarded
    delete (the engine's :func:`~zkqueue.engine.leases.removal_ops`: the multi fails if a consumer claims it
    meanwhile, and the hand-off builds again), and their records (version-checked, so a claim that got there
    first wins). A step whose job record is gone has nothing queued and is not listed."""
    ops: list[Any] = []
    for sp in step_paths:
        try:
            _data, stat = client.get(sp.record(job_id))
        except NoNodeError:
            continue
        items = [n for n in client.get_children(sp.queue) if (p := names.parse_item(n)) and p.job_id == job_id]
        if not items:
            continue
        held = held_items(items, client.get_children(sp.locks), sp.queue)
        free = [n for n in items if n not in held]
        if not free:
            continue
        for name in free:
            ops.extend(removal_ops(sp.queue, sp.locks, name, curator_names=False, acl=acl))
        ops.append(delete_op(sp.record(job_id), stat.version))
    return ops


def reap(client: Any, paths: Paths, keep: Keep) -> int:
    """Delete the finished (COMPLETED, FAILED or CANCELLED) flow records beyond ``keep`` (the oldest first, by their last
    update; version-checked, so a record added again meanwhile stays); running ones are never touched. Lists and
    reads the records only when their number is over ``keep.count`` or an age bound is set. Returns how many."""
    stat = client.exists(paths.flows)
    if stat is None or stat.numChildren == 0:
        return 0
    if keep.age is None and (keep.count is None or stat.numChildren <= keep.count):
        return 0
    children = client.get_children(paths.flows)
    found = [naming.join(paths.flows, n) for n in children]
    finished: list[tuple[int, str, int]] = []
    for path, res in zip(found, api.multi_read(client, found)):
        if isinstance(res, BaseException):
            continue
        try:
            rec = FlowRecord.decode(res[0])
        except CorruptItemError:
            continue  # left for an operator to look at
        if rec.state.finished:
            finished.append((rec.updated_ms, path, res[1].version))
    finished.sort()
    doomed: list[tuple[str, int]] = []
    if keep.age is not None:
        cutoff = now_ms() - int(keep.age * 1000)
        doomed = [(path, version) for updated, path, version in finished if updated < cutoff]
    if keep.count is not None and len(finished) - len(doomed) > keep.count:
        kept = [(path, version) for _updated, path, version in finished[len(doomed):]]
        doomed += kept[: len(kept) - keep.count]
    replies = [api.send_multi(client, [delete_op(path, version)]) for path, version in doomed]
    return sum(1 for r in replies if r.result().ok)
