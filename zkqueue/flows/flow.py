"""Flow: named steps on job queues, one shared record per flow job, atomic hand-offs (see :mod:`zkqueue.flows`)."""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from datetime import datetime
from typing import Any, Callable, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError
from kazoo.recipe.watchers import DataWatch

from zkqueue.engine import api
from zkqueue.engine.api import (
    CONNECTION_ERRORS,
    DEFAULT_READ_WAIT,
    ClientConnection,
    ClientServices,
    read_retrying,
    wait_connected,
)
from zkqueue.errors import (
    ConfigurationError,
    CorruptItemError,
    QueueClosedError,
    QueueNotStartedError,
    QueueStateError,
    WaitTimeoutError,
)
from zkqueue.flows import model, store
from zkqueue.flows.adds import AddCommits
from zkqueue.flows.definition import Definition, Step, check_name, make_step
from zkqueue.flows.handoff import RECONNECT_WAIT, Handoff
from zkqueue.flows.model import FlowJob, FlowRecord, FlowState
from zkqueue.flows.worker import FlowWorker
from zkqueue.formats import naming
from zkqueue.jobs import JobQueue, Keep, RetryPolicy, hooks, names
from zkqueue.jobs import store as job_store
from zkqueue.jobs.model import check_headers, check_timeout
from zkqueue.jobs.queue import DEFAULT_STOP_TIMEOUT

log = logging.getLogger("zkqueue.flows.flow")


def commit(client: KazooClient, ops: list[Any]) -> Any:
    """Send one multi of :meth:`Flow.add` (a seam: tests make its reply get lost)."""
    return api.run_multi(client, ops)


class Flow:
    """A flow at ``path``: define steps with :meth:`step`, then ``with flow:`` add flow jobs and run workers.

    ``retry`` is the default :class:`~zkqueue.jobs.RetryPolicy` of every step; ``acl`` the ACL of every node the
    flow creates. Params, results and the shared ``data`` are stored as JSON in the flow record (one node, so
    under ZooKeeper's 1 MiB packet limit; its history keeps the last ``model.MAX_HISTORY`` entries). ``keep``
    bounds the finished (COMPLETED or FAILED) flow records kept, by count and age (default: the job layer's
    ``Keep()``; None keeps them all); while workers run, :meth:`reap` runs every ``reap_interval`` seconds.
    """

    def __init__(self, client: KazooClient, path: str, *, retry: RetryPolicy | None = None,
                 acl: Sequence[Any] | None = None, keep: Keep | None = Keep(), reap_interval: float = 60.0) -> None:
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
        if keep is not None and not isinstance(keep, Keep):
            raise ConfigurationError(f"keep must be a Keep or None, got {keep!r}")
        if isinstance(reap_interval, bool) or not isinstance(reap_interval, (int, float)) or reap_interval <= 0:
            raise ConfigurationError(f"reap_interval must be seconds > 0, got {reap_interval!r}")
        self.keep = keep
        self._reap_interval = float(reap_interval)
        self._reaper: Callable[[], None] | None = None  # cancels the reaping on the client's shared thread
        self.reaped = 0  # finished flow records deleted by reap()
        self.definition = Definition()
        self.handoff = Handoff(client, self.paths, self.definition, lambda name: self.queue(name).paths, self._acl)
        self._queues: dict[str, JobQueue] = {}
        self._workers: list[FlowWorker] = []
        self._lock = threading.Lock()  # no ZooKeeper I/O while it is held
        self._start_lock = threading.Lock()  # starts step queues made after the flow started, one at a time
        self._state = "new"
        self._create = True  # False: opened read-only by start(create=False)
        self.unreadable = 0  # flow records the last jobs() could not read
        #: Adds made at the same time (from many threads) commit together, many per multi.
        self._adds = AddCommits(lambda ops: commit(self.client, ops))

    # ------------------------------------------------------------------------------------------ definition
    def step(self, name: str, handler: Callable[[Any], Any], *, next: str | Sequence[str] | None = None,  # noqa: A002
             after: Sequence[str] | None = None, on_failure: str | None = None, retry: RetryPolicy | None = None,
             max_concurrency: int | None = None, max_per_second: int | None = None) -> Flow:
        """Define step ``name``: ``handler(job)`` gets a :class:`~zkqueue.flows.model.StepJob` and returns the
        step's result (or ``Next(step, result)``). ``next``: the step(s) to queue when it is done (several: a
        fan-out); ``after``: make it a join that runs once when all these steps ended; ``on_failure``: "fail"
        (a dead step ends the flow job FAILED and drops its queued steps) or "continue" (the flow job goes on; a
        join runs with the failure recorded); unset, a step follows the join waiting for it, else "fail".
        ``retry``: this step's policy (default: the flow's); ``max_concurrency``: runs of this step at once
        across every worker of the flow; ``max_per_second``: runs of this step started per second across every
        worker of the flow (the step queue's :class:`~zkqueue.jobs.RateLimit`). Returns the flow."""
        if self._state != "new":
            raise QueueStateError("define steps before the flow starts")
        self.definition.add(make_step(name, handler, next=next, after=after, on_failure=on_failure, retry=retry,
                                      max_concurrency=max_concurrency, max_per_second=max_per_second))
        return self

    def retry_of(self, step: Step) -> RetryPolicy:
        return step.retry or self.retry

    def queue(self, name: str) -> JobQueue:
        """The job queue of step ``name`` (for its ``counts()``). Made after the flow started (and not read-only),
        it is started too."""
        with self._lock:
            jq = self._queues.get(name)
            if jq is not None:
                return jq
            check_name(name)
            step = self.definition.steps.get(name)
            retry = self.retry_of(step) if step is not None else self.retry
            jq = JobQueue(self.client, self.paths.step(name), retry=retry, acl=self._acl, reap_interval=3600.0,
                          on_exhausted=self.handoff.exhausted(name),
                          rate_limit=step.rate_limit if step is not None else None,
                          scheduler=False)  # steps have no repeats: no scheduler thread per step
            self._queues[name] = jq
            start = self._state == "started" and self._create
        if start:
            with self._start_lock:  # I/O outside Flow._lock
                jq.start()
        return jq

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self, *, create: bool = True) -> None:
        """Check the steps and create the flow's nodes (a flow without steps can still be looked at). With
        ``create=False`` the flow is opened read-only: nothing is created (``QueueStateError`` if there is no flow
        at its path), and only :meth:`get`, :meth:`wait`, :meth:`jobs`, :meth:`counts` and :meth:`stats` work."""
        if self._state != "new":
            raise QueueStateError(f"flow {self.paths.root} was started already")
        self.definition.check()
        if create:
            for path in (self.paths.flows, self.paths.steps, self.paths.limits):
                self.client.ensure_path(path, acl=self._acl)
        elif self.client.exists(self.paths.flows) is None:
            raise QueueStateError(f"no flow at {self.paths.root}")
        with self._lock:
            self._state = "started"
            self._create = create
            queues = list(self._queues.values())
        if not create:
            return
        for jq in queues:  # made before the start (e.g. by queue()); the others start when made
            jq.start()
        for name in self.definition.steps:
            self.queue(name)

    @classmethod
    def open_existing(cls, client: KazooClient, path: str) -> Flow:
        """The flow at ``path``, opened read-only (``start(create=False)``): nothing is created; close() it."""
        flow = cls(client, path)
        flow.start(create=False)
        return flow

    def close(self, timeout: float | None = DEFAULT_STOP_TIMEOUT) -> None:
        """Stop every worker (running steps get ``timeout`` seconds to end, then are given back), then the step
        queues. Idempotent."""
        with self._lock:
            workers, self._workers = self._workers, []
            self._state = "closed"
            queues = list(self._queues.values())
            reaper, self._reaper = self._reaper, None
        if reaper is not None:
            reaper()
        for worker in workers:
            worker.stop(timeout)
        for jq in queues:
            jq.close(timeout)

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

    def _check_writable(self) -> None:
        self._check_started()
        if not self._create:
            raise QueueStateError(f"flow {self.paths.root} was opened read-only")

    # ------------------------------------------------------------------------------------------ adding
    def add(self, params: Any, job_id: str | None = None, *, step: str | None = None,
            headers: dict[str, Any] | None = None, delay: float | None = None, run_at: datetime | None = None,
            priority: int = 0) -> str | None:
        """Start a flow job at ``step`` (default: the first step defined) with ``params`` (JSON); return its id, or
        None while a flow job with that id is running (it is left as it is). A finished id runs again. Each add
        stores its own token in the flow record: after a lost reply, it reads the record again (synced) and
        knows its own write whatever state the job reached meanwhile, so the job does not run twice.

        ``headers``: metadata of the flow job's step jobs (their ``Job.headers``, carried from step to step by the
        hand-offs): a dict of JSON, at most 4 KiB (``zkqueue.otel`` puts the trace context there, so a flow job's
        steps are one trace).

        ``delay`` (seconds) or ``run_at`` (a timezone-aware datetime), and ``priority`` (lower first among due jobs),
        as :meth:`JobQueue.add <zkqueue.jobs.JobQueue.add>` takes them: they apply to the flow job's first step
        (a step job due far ahead is parked as a job is); the steps after it are queued as their hand-offs come."""
        self._check_writable()
        job_id = uuid.uuid4().hex if job_id is None else job_id
        names.node_id(job_id)  # checks the id
        due = job_store.due_at(delay, run_at)
        naming.encode_priority(priority)  # checks the priority
        if not self.definition.steps:
            raise ConfigurationError("the flow has no steps")
        first = self.definition.step(step) if step is not None else next(iter(self.definition.steps.values()))
        step_paths = self.queue(first.name).paths
        if hooks.installed is not None:  # a job hook (zkqueue.otel): the headers to store, around the add
            return hooks.installed.adding(  # type: ignore[no-any-return]
                step_paths.root, [job_id], headers,
                lambda stored: self._add(params, job_id, first, step_paths, stored, due, priority))
        return self._add(params, job_id, first, step_paths, headers, due, priority)

    def _add(self, params: Any, job_id: str, first: Step, step_paths: Any,
             headers: dict[str, Any] | None, due: int = 0, priority: int = 0) -> str | None:
        headers = check_headers(headers)
        created = model.now_ms()
        token = uuid.uuid4().hex
        lost = False  # a multi of ours may have committed without our hearing of it
        for attempt in range(20):
            try:
                # The first try expects a new id (one round trip); after a failure it looks at what is there.
                read = None
                if attempt > 0:
                    if lost:
                        self.client.sync(self.paths.flow(job_id))  # see every write that committed before
                    read = store.read(self.client, self.paths, job_id)
                if read is not None and read[0].add_token == token:
                    log.info("flow job %s: the add's reply was lost but it had committed", job_id)
                    self.handoff.counts.count(first.name, "added")
                    return job_id  # our own add, whatever state the job reached since
                if read is not None and read[0].state is FlowState.RUNNING:
                    return None
                run = read[0].run + 1 if read is not None else 1
                rec = FlowRecord(job_id, FlowState.RUNNING, params, run, steps={first.name: model.QUEUED},
                                 created_ms=created, updated_ms=created, add_token=token)
                ops = [store.write_op(self.paths, rec, read[1] if read is not None else None, self._acl)]
                step_queue = self.queue(first.name)
                ops += store.queue_ops(self.client, [step_paths], job_id, run, self._acl, stale=attempt > 0,
                                       headers=headers, priority=priority, due_ms=due,
                                       place=lambda record: step_queue.new_item_prefix(record, fresh=attempt > 0))
                result = self._adds.commit(ops)  # with the adds of other threads, many per multi
            except CONNECTION_ERRORS as exc:
                log.warning("adding flow job %s lost its connection (%r); checking", job_id, exc)
                lost = True
                wait_connected(self.client, RECONNECT_WAIT)
                continue
            if result.ok:
                self.handoff.counts.count(first.name, "added")
                return job_id
            if result.failed_index == 0 and isinstance(result.failure, (NodeExistsError, BadVersionError)):
                continue  # another add (or the end of the earlier run) got there first: look again
            if result.failed_index is not None and result.failed_index > 0:
                continue  # a leftover step record changed meanwhile
            raise QueueStateError(f"adding flow job {job_id!r} to {self.paths.root} failed: {result.failure!r}")
        raise QueueStateError(f"adding flow job {job_id!r} to {self.paths.root} kept racing")

    # ------------------------------------------------------------------------------------------ cancelling
    def cancel(self, job_id: str) -> bool:
        """Cancel the running flow job ``job_id``: it ends ``CANCELLED`` at once, in one multi (version-checked)
        with the removal of its step jobs that wait in their queues. A step running now finishes (its result is
        recorded) but starts nothing after it; a step job claimed or parked meanwhile is dropped unrun when it comes
        up. True if it was running; False for an unknown or finished id. A lost connection is waited out. Works on
        a flow opened with :meth:`open_existing` too (it changes nodes that exist, creates none)."""
        self._check_started()
        names.node_id(job_id)  # checks the id
        what = f"cancelling flow job {job_id} of {self.paths.root}"
        lost = False  # a multi of ours may have committed without our hearing of it
        for _attempt in range(20):
            read = self._look(functools.partial(self._read_synced, job_id, lost), what)
            if read is not None and lost and read[0].state is FlowState.CANCELLED:
                return True  # cancelled (by the multi whose reply was lost, or by another cancel meanwhile)
            if read is None or read[0].state.finished:
                return False
            rec, version = read
            steps = {name: model.CANCELLED if status == model.QUEUED else status for name, status in rec.steps.items()}
            ops = [store.write_op(self.paths, rec.changed(state=FlowState.CANCELLED, steps=steps), version, self._acl)]
            waiting = [self.queue(name).paths for name, status in rec.steps.items() if status == model.QUEUED]
            try:
                ops += store.cancel_ops(self.client, waiting, job_id, self._acl)
                result = commit(self.client, ops)
            except CONNECTION_ERRORS as exc:  # committed or not: the next read says
                log.warning("%s lost its connection (%r); checking", what, exc)
                lost = True
                wait_connected(self.client, RECONNECT_WAIT)
                continue
            if result.ok:
                log.info("flow job %s of %s cancelled (%d waiting step job(s) removed)", job_id, self.paths.root,
                         len(waiting))
                return True
            # a hand-off changed the record first, or a waiting step job was claimed meanwhile: look again
        raise QueueStateError(f"{what} kept racing")

    def _read_synced(self, job_id: str, synced: bool) -> tuple[FlowRecord, int] | None:
        """The flow record of ``job_id``; with ``synced``, after a sync (it sees every write committed before)."""
        if synced:
            self.client.sync(self.paths.flow(job_id))
        return store.read(self.client, self.paths, job_id)

    # ------------------------------------------------------------------------------------------ working
    def work(self, concurrency: int = 1, steps: Sequence[str] | None = None, *, timeout: float | None = None,
             prefetch: int | None = None) -> FlowWorker:
        """Run the handlers of every step (or only ``steps``) on the worker runtime, ``concurrency`` at once across
        those steps, until :meth:`FlowWorker.stop`, the end of its ``with`` block, or close(). ``timeout``: seconds
        one attempt of a step may run (None: no limit); past it the attempt fails with
        :class:`~zkqueue.errors.JobTimeoutError` and is retried by the step's policy (or is dead, and the flow job
        learns of it), and the hung handler's late result is refused. ``prefetch``: step jobs held ahead of free
        slots (None: :data:`~zkqueue.flows.worker.FLOW_PREFETCH`, at least ``8 * concurrency``); while the handlers
        are short, the attempts of up to :data:`~zkqueue.flows.worker.START_AHEAD` of them (those with an attempt to
        spare) are counted with the ones starting. See :mod:`zkqueue.flows.worker`."""
        self._check_writable()
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")
        timeout = check_timeout(timeout)
        if isinstance(steps, str):
            steps = [steps]
        chosen = [self.definition.step(s) for s in steps] if steps is not None else list(
            self.definition.steps.values())
        if not chosen:
            raise ConfigurationError("no steps to work on")
        worker = FlowWorker(self, chosen, concurrency, timeout=timeout, prefetch=prefetch)
        with self._lock:
            self._workers.append(worker)
            if self.keep is not None and self._reaper is None:  # a chore on the client's shared thread
                self._reaper = ClientServices.of(self.client).every(self._reap_interval, self._reap_once)
        return worker

    # ------------------------------------------------------------------------------------------ control
    def pause(self, steps: Sequence[str] | None = None) -> None:
        """Pause every step (or ``steps``): flow jobs are still added and hand-offs still queue the next steps'
        jobs, but no job of a paused step starts, in any process, until :meth:`resume` (running ones finish).
        See :meth:`JobQueue.pause <zkqueue.jobs.JobQueue.pause>`."""
        for name in self._control_steps(steps):
            self.queue(name).pause()

    def resume(self, steps: Sequence[str] | None = None) -> None:
        """Resume every step (or ``steps``) after :meth:`pause`."""
        for name in self._control_steps(steps):
            self.queue(name).resume()

    @property
    def paused(self) -> dict[str, bool]:
        """Per step: whether it is paused (as this process last saw it)."""
        return {name: self.queue(name).paused for name in self.definition.steps}

    def _control_steps(self, steps: Sequence[str] | None) -> list[str]:
        self._check_writable()
        if isinstance(steps, str):
            steps = [steps]
        return [self.definition.step(s).name for s in steps] if steps is not None else list(self.definition.steps)

    # ------------------------------------------------------------------------------------------ keeping
    def reap(self) -> int:
        """Delete the finished flow records beyond ``keep`` now (the oldest first; running ones never); return
        how many. Workers run it every ``reap_interval`` seconds."""
        self._check_writable()
        if self.keep is None:
            return 0
        deleted = store.reap(self.client, self.paths, self.keep)
        if deleted:
            self.reaped += deleted
            log.info("reaped %d finished flow record(s) of %s", deleted, self.paths.root)
        return deleted

    def _reap_once(self) -> None:
        try:
            self.reap()
        except Exception:
            log.warning("reaping the flow records of %s failed; again in %.0fs", self.paths.root,
                        self._reap_interval, exc_info=True)

    def stats(self) -> dict[str, dict[str, int]]:
        """What this instance did so far, per step: ``added`` (step jobs queued by its :meth:`add` and by its
        hand-offs), ``completed``, ``retried`` (a failed attempt with another to come) and ``dead_lettered`` (the
        step is dead), decided and committed by its workers. Counters for :mod:`zkqueue.metrics`, like
        :meth:`JobQueue.stats() <zkqueue.jobs.JobQueue.stats>`; no I/O."""
        return self.handoff.counts.snapshot(self.definition.steps)

    # ------------------------------------------------------------------------------------------ looking
    #: Seconds a look (:meth:`get`, :meth:`wait`, :meth:`jobs`, :meth:`counts`) waits out a lost connection (a
    #: leader election) before it raises :class:`~zkqueue.errors.ConnectionLostError`; the default is a queue's
    #: ``put_outcome_wait``. Set it on the instance to change it.
    read_wait: float = DEFAULT_READ_WAIT

    def _look(self, call: Callable[[], Any], what: str) -> Any:
        """``call()``, a read, waiting out a lost connection for up to :attr:`read_wait` seconds (the engine's
        :func:`~zkqueue.engine.put_markers.read_retrying`, on the flow's client)."""
        return read_retrying(call, ClientConnection(self.client), self.read_wait, what)

    def get(self, job_id: str) -> FlowJob | None:
        """The flow job ``job_id`` (running or finished), or None if unknown. A lost connection (a leader election)
        is waited out for up to :attr:`read_wait` seconds, then :class:`~zkqueue.errors.ConnectionLostError`."""
        read = self._look(lambda: store.read(self.client, self.paths, job_id),
                          f"reading flow job {job_id} of {self.paths.root}")
        return FlowJob.of(read[0]) if read is not None else None

    def wait(self, job_id: str, timeout: float | None = None) -> FlowJob:
        """The flow job ``job_id`` once it finished (COMPLETED, FAILED or CANCELLED), on a watch of its record. Raises
        :class:`~zkqueue.errors.WaitTimeoutError` (a ``TimeoutError``) after ``timeout`` seconds,
        :class:`~zkqueue.errors.QueueStateError` for an unknown id."""
        deadline = None if timeout is None else time.monotonic() + timeout
        path = self.paths.flow(job_id)
        changed = threading.Event()
        stopped = threading.Event()

        def on_change(_data: Any, _stat: Any) -> bool:
            changed.set()
            return not stopped.is_set()  # False ends the watch

        DataWatch(self.client, path, on_change)  # one watch for the whole wait (re-armed by kazoo on each change)
        try:
            while True:
                changed.clear()
                job = self.get(job_id)
                if job is None:
                    raise QueueStateError(f"no flow job {job_id!r} in {self.paths.root}")
                if job.state.finished:
                    return job
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise WaitTimeoutError(f"flow job {job_id!r} still running after {timeout}s (pending: "
                                           f"{job.pending})")
                changed.wait(1.0 if left is None else min(left, 1.0))
        finally:
            stopped.set()

    def jobs(self) -> list[FlowJob]:
        """Every flow job kept (running and finished), the most recently updated first; unreadable records are
        skipped (logged, counted in ``unreadable``). A lost connection is waited out (see :meth:`get`)."""
        return self._look(self._jobs, f"listing the flow jobs of {self.paths.root}")  # type: ignore[no-any-return]

    def _jobs(self) -> list[FlowJob]:
        children = self.client.get_children(self.paths.flows)
        reads = api.multi_read(self.client, [naming.join(self.paths.flows, n) for n in children])
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
        """Flow jobs by state (running, completed, failed, cancelled; every record is read; ``unreadable`` ones) and,
        per step, its job queue's counts (queued, active, retrying). A lost connection is waited out (see
        :meth:`get`)."""
        return self._look(self._counts, f"counting the flow jobs of {self.paths.root}")  # type: ignore[no-any-return]

    def _counts(self) -> dict[str, Any]:
        out: dict[str, Any] = {"running": 0, "completed": 0, "failed": 0, "cancelled": 0}
        for job in self._jobs():
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
