"""Flow: named steps on job queues, one shared record per flow job, atomic hand-offs (see :mod:`zkqueue.flows`)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Callable, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError

from zkqueue.engine.commit import CONNECTION_ERRORS
from zkqueue.errors import ConfigurationError, CorruptItemError, QueueClosedError, QueueNotStartedError, QueueStateError
from zkqueue.flows import model, store
from zkqueue.flows.definition import Definition, Step, check_name, make_step
from zkqueue.flows.handoff import Handoff, wait_connected
from zkqueue.flows.model import FlowJob, FlowRecord, FlowState
from zkqueue.flows.worker import FlowWorker
from zkqueue.formats import naming
from zkqueue.jobs import JobQueue, RetryPolicy, names
from zkqueue.transport import protocol

log = logging.getLogger("zkqueue.flows.flow")


class Flow:
    """A flow at ``path``: define steps with :meth:`step`, then ``with flow:`` add flow jobs and run workers.

    ``retry`` is the default :class:`~zkqueue.jobs.RetryPolicy` of every step; ``acl`` the ACL of every node the
    flow creates. Params, results and the shared ``data`` are stored as JSON in the flow record (one node, so
    under ZooKeeper's 1 MiB packet limit).
    """

    def __init__(self, client: KazooClient, path: str, *, retry: RetryPolicy | None = None,
                 acl: Sequence[Any] | None = None) -> None:
        if client is None:
            raise ConfigurationError("client is required")
        self.client = client
        self.paths = store.Paths(naming.validate_queue_path(path))
        if self.paths.root == "/":
            raise ConfigurationError("the flow path cannot be the root '/'")
        self.retry = retry or RetryPolicy()
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigurationError(f"retry must be a RetryPolicy, got {self.retry!r}")
        self._acl = list(acl) if acl is not None else None
        self.definition = Definition()
        self.handoff = Handoff(client, self.paths, self.definition, lambda name: self.queue(name).paths, self._acl)
        self._queues: dict[str, JobQueue] = {}
        self._workers: list[FlowWorker] = []
        self._lock = threading.Lock()
        self._state = "new"
        self.unreadable = 0  # flow records the last jobs() could not read

    # ------------------------------------------------------------------------------------------ definition
    def step(self, name: str, handler: Callable[[Any], Any], *, next: str | Sequence[str] | None = None,  # noqa: A002
             after: Sequence[str] | None = None, on_failure: str | None = None, retry: RetryPolicy | None = None,
             max_concurrency: int | None = None) -> Flow:
        """Define step ``name``: ``handler(job)`` gets a :class:`~zkqueue.flows.model.StepJob` and returns the
        step's result (or ``Next(step, result)``). ``next``: the step(s) to queue when it is done (several: a
        fan-out); ``after``: make it a join that runs once when all these steps ended; ``on_failure``: "fail"
        (a dead step ends the flow job FAILED and drops its queued steps) or "continue" (the flow job goes on; a
        join runs with the failure recorded); unset, a step follows the join waiting for it, else "fail".
        ``retry``: this step's policy (default: the flow's); ``max_concurrency``: runs of this step at once
        across every worker of the flow. Returns the flow."""
        if self._state != "new":
            raise QueueStateError("define steps before the flow starts")
        self.definition.add(make_step(name, handler, next=next, after=after, on_failure=on_failure, retry=retry,
                                      max_concurrency=max_concurrency))
        return self

    def retry_of(self, step: Step) -> RetryPolicy:
        return step.retry or self.retry

    def queue(self, name: str) -> JobQueue:
        """The job queue of step ``name`` (for its ``counts()``)."""
        with self._lock:
            jq = self._queues.get(name)
            if jq is None:
                check_name(name)
                step = self.definition.steps.get(name)
                retry = self.retry_of(step) if step is not None else self.retry
                jq = JobQueue(self.client, self.paths.step(name), retry=retry, acl=self._acl, reap_interval=3600.0,
                              on_exhausted=self.handoff.exhausted(name))
                self._queues[name] = jq
                if self._state == "started":
                    jq.start()
            return jq

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Check the steps and create the flow's nodes (a flow without steps can still be looked at)."""
        if self._state != "new":
            raise QueueStateError(f"flow {self.paths.root} was started already")
        self.definition.check()
        for path in (self.paths.flows, self.paths.steps, self.paths.limits):
            self.client.ensure_path(path, acl=self._acl)
        with self._lock:
            self._state = "started"
            queues = list(self._queues.values())
        for jq in queues:  # made before the start (e.g. by queue()); the others start when made
            jq.start()
        for name in self.definition.steps:
            self.queue(name)

    def close(self) -> None:
        """Stop every worker (running steps end first), then the step queues. Idempotent."""
        with self._lock:
            workers, self._workers = self._workers, []
            self._state = "closed"
            queues = list(self._queues.values())
        for worker in workers:
            worker.stop()
        for jq in queues:
            jq.close()

    def __enter__(self) -> Flow:
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _check_started(self) -> None:
        if self._state != "started":
            if self._state == "closed":
                raise QueueClosedError(f"flow {self.paths.root} is closed")
            raise QueueNotStartedError(f"flow {self.paths.root} is not started; use `with flow:` or start()")

    # ------------------------------------------------------------------------------------------ adding
    def add(self, params: Any, job_id: str | None = None, *, step: str | None = None) -> str | None:
        """Start a flow job at ``step`` (default: the first step defined) with ``params`` (JSON); return its id, or
        None while a flow job with that id is running (it is left as it is). A finished id runs again."""
        self._check_started()
        job_id = uuid.uuid4().hex if job_id is None else job_id
        names.node_id(job_id)  # checks the id
        if not self.definition.steps:
            raise ConfigurationError("the flow has no steps")
        first = self.definition.step(step) if step is not None else next(iter(self.definition.steps.values()))
        created = model.now_ms()
        for attempt in range(20):
            # The first try expects a new id (one round trip); after a failure it looks at what is there.
            read = store.read(self.client, self.paths, job_id) if attempt > 0 else None
            if read is not None and read[0].state is FlowState.RUNNING:
                if read[0].created_ms == created:
                    return job_id  # our own add, whose reply was lost
                return None
            run = read[0].run + 1 if read is not None else 1
            rec = FlowRecord(job_id, FlowState.RUNNING, params, run, steps={first.name: model.QUEUED},
                             created_ms=created, updated_ms=created)
            ops = [store.write_op(self.paths, rec, read[1] if read is not None else None, self._acl)]
            ops += store.queue_ops(self.client, [self.queue(first.name).paths], job_id, run, self._acl,
                                   stale=attempt > 0)
            try:
                result = protocol.run_multi(self.client, ops)
            except CONNECTION_ERRORS:
                wait_connected(self.client)
                continue
            if result.ok:
                return job_id
            if result.failed_index == 0 and isinstance(result.failure, (NodeExistsError, BadVersionError)):
                continue  # another add (or the end of the earlier run) got there first: look again
            if result.failed_index is not None and result.failed_index > 0:
                continue  # a leftover step record changed meanwhile
            raise QueueStateError(f"adding flow job {job_id!r} to {self.paths.root} failed: {result.failure!r}")
        raise QueueStateError(f"adding flow job {job_id!r} to {self.paths.root} kept racing")

    # ------------------------------------------------------------------------------------------ working
    def work(self, concurrency: int = 1, steps: Sequence[str] | None = None) -> FlowWorker:
        """Run ``concurrency`` worker threads for each step (or only ``steps``) until :meth:`FlowWorker.stop`, the
        end of its ``with`` block, or close()."""
        self._check_started()
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if isinstance(steps, str):
            steps = [steps]
        chosen = [self.definition.step(s) for s in steps] if steps is not None else list(
            self.definition.steps.values())
        if not chosen:
            raise ConfigurationError("no steps to work on")
        worker = FlowWorker(self, chosen, concurrency)
        with self._lock:
            self._workers.append(worker)
        return worker

    # ------------------------------------------------------------------------------------------ looking
    def get(self, job_id: str) -> FlowJob | None:
        """The flow job ``job_id`` (running or finished), or None if unknown."""
        read = store.read(self.client, self.paths, job_id)
        return FlowJob.of(read[0]) if read is not None else None

    def wait(self, job_id: str, timeout: float | None = None) -> FlowJob:
        """The flow job ``job_id`` once it finished (COMPLETED or FAILED). Raises ``TimeoutError`` after
        ``timeout`` seconds, :class:`~zkqueue.errors.QueueStateError` for an unknown id."""
        deadline = None if timeout is None else time.monotonic() + timeout
        path = self.paths.flow(job_id)
        while True:
            changed = threading.Event()
            stat = self.client.exists(path, watch=lambda _event: changed.set())
            if stat is None:
                raise QueueStateError(f"no flow job {job_id!r} in {self.paths.root}")
            job = self.get(job_id)
            if job is not None and job.state.finished:
                return job
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"flow job {job_id!r} still running after {timeout}s (pending: {job.pending})")
            changed.wait(1.0 if left is None else min(left, 1.0))

    def jobs(self) -> list[FlowJob]:
        """Every flow job kept (running and finished), the most recently updated first; unreadable records are
        skipped (logged, counted in ``unreadable``)."""
        children = self.client.get_children(self.paths.flows)
        reads = protocol.multi_read(self.client, [naming.join(self.paths.flows, n) for n in children])
        recs = []
        self.unreadable = 0
        for name, r in zip(children, reads):
            if isinstance(r, BaseException):
                continue  # deleted meanwhile
            try:
                recs.append(FlowRecord.decode(r[0]))
            except CorruptItemError as exc:
                self.unreadable += 1
                log.warning("flow record %s is unreadable (%s): skipped", name, exc)
        recs.sort(key=lambda r: r.updated_ms, reverse=True)
        return [FlowJob.of(r) for r in recs]

    def counts(self) -> dict[str, Any]:
        """Flow jobs by state (running, completed, failed; every record is read; ``unreadable`` ones) and, per step,
        its job queue's counts (queued, active, retrying)."""
        out: dict[str, Any] = {"running": 0, "completed": 0, "failed": 0}
        for job in self.jobs():
            out[job.state.value.lower()] += 1
        out["unreadable"] = self.unreadable
        step_names = list(self.definition.steps) or sorted(self.client.get_children(self.paths.steps))
        steps = {}
        for name in step_names:
            counts = self.queue(name).counts()
            steps[name] = {k: counts[k] for k in ("queued", "active", "retrying")}
        out["steps"] = steps
        return out

    def __repr__(self) -> str:
        return f"Flow(path={self.paths.root!r}, steps={list(self.definition.steps)!r})"
