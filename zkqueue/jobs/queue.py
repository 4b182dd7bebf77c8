"""JobQueue: distinct jobs with records, attempts counted at claim, retries with backoff, dead letters, results,
scoped takes and workers, on the queue engine's seams (see :mod:`zkqueue.jobs`)."""

from __future__ import annotations

import heapq
import logging
import threading
import uuid
from concurrent.futures import Executor
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError, NotEmptyError

from zkqueue.engine import api
from zkqueue.engine.api import (
    CONNECTION_ERRORS,
    DEFAULT_READ_WAIT,
    ClientConnection,
    DistributedQueue,
    held_items,
    parked_count,
    read_retrying,
)
from zkqueue.errors import (
    ConfigurationError,
    CorruptItemError,
    JobCancelledError,
    JobDeadError,
    QueueClosedError,
    QueueNotStartedError,
    QueueStateError,
)
from zkqueue.formats import naming
from zkqueue.formats.serializers import BytesSerializer, JsonSerializer
from zkqueue.jobs import hooks, names, store
from zkqueue.jobs.claims import JobClaims, OnExhausted
from zkqueue.jobs.control import CancelListener, QueueControl, paused_data, reap_requests
from zkqueue.jobs.model import (
    Job,
    JobState,
    Record,
    check_headers,
    check_max_attempts,
    check_task,
    check_timeout,
    now_ms,
)
from zkqueue.jobs.waiting import wait_finished
from zkqueue.jobs.outcomes import JobOutcomes
from zkqueue.jobs.rate import RateLimit, limiter_for
from zkqueue.jobs.reaper import Keep, Reaper, reap
from zkqueue.jobs import repeats as repeat_store
from zkqueue.jobs.repeats import Repeat, Schedule
from zkqueue.jobs.scheduler import Scheduler
from zkqueue.jobs.retry import RetryPolicy
from zkqueue.jobs.scope import (
    HeldJob,
    TakeScope,
    claim_held,
    give_back_unstarted,
    release_many,
    start_many,
    write_held,
)

if TYPE_CHECKING:  # pragma: no cover
    from zkqueue.runtime.worker import Worker

log = logging.getLogger("zkqueue.jobs.queue")

#: Seconds close() and every worker's stop() give running jobs before they are given back (a cold stop).
DEFAULT_STOP_TIMEOUT = 30.0
#: Reads and multis a cancel tries before it gives up on a job that keeps changing under it.
_CANCEL_TRIES = 8


class JobQueue:
    """A job queue at ``path``. ``with JobQueue(client, "/jobs/mail") as jq: jq.add(...)``.

    ``serializer`` turns params and results into bytes (JSON by default). ``retry`` decides attempts and
    backoff. ``keep_completed`` / ``keep_dead`` bound the finished records (:class:`~zkqueue.jobs.reaper.Keep`),
    checked every ``reap_interval`` seconds. ``acl`` is the ACL of every node the queue creates. ``on_exhausted``
    (a seam for the layers above) decides how a job out of attempts at claim time ends (see
    :class:`~zkqueue.jobs.claims.JobClaims`). ``rate_limit`` (a :class:`~zkqueue.jobs.rate.RateLimit`) bounds the
    jobs started per time window across every worker, take and claim of the queue, in every process.
    ``scheduler=False``: this instance runs no scheduler of repeats (no thread, no election: the repeats of the
    queue fire only where another instance runs one); a flow's step queues, which have no repeats, run none.
    """

    def __init__(
        self,
        client: KazooClient,
        path: str,
        *,
        retry: RetryPolicy | None = None,
        serializer: Any = None,
        keep_completed: Keep | None = None,
        keep_dead: Keep | None = None,
        reap_interval: float = 60.0,
        acl: Sequence[Any] | None = None,
        batch_size: int | None = None,
        on_exhausted: OnExhausted | None = None,
        rate_limit: RateLimit | None = None,
        park_after: float | None = 60.0,
        schedule_layout: Any = None,
        scheduler: bool = True,
    ) -> None:
        if client is None:
            raise ConfigurationError("client is required")
        self._client = client
        self.paths = store.Paths(naming.validate_queue_path(path))
        if self.paths.root == "/":
            raise ConfigurationError("the job queue path cannot be the root '/'")
        self.retry = retry or RetryPolicy()
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigurationError(f"retry must be a RetryPolicy, got {self.retry!r}")
        self._serializer = serializer or JsonSerializer()
        self._acl = list(acl) if acl is not None else None
        self._keep_completed = keep_completed or Keep()
        self._keep_dead = keep_dead or Keep(count=10_000, age=None)
        self._reap_interval = float(reap_interval)
        self._batch_size = batch_size
        self._control = QueueControl(client, self.paths.control, self.paths.cancels)
        self._claims = JobClaims(client, self.paths, self.retry, self._acl, on_exhausted,
                                 limiter_for(client, self.paths.root, rate_limit, self._acl),
                                 control=self._control)
        self._park_after = park_after
        self._run_scheduler = bool(scheduler)
        self._schedule_layout = schedule_layout
        self._outcomes = JobOutcomes(self.paths, self._serializer, self.retry, self._acl,
                                     place=lambda name, due: self._engine.place_due(name, due))
        self._engine: DistributedQueue[Any] = self._engine_queue(None, None)  # adds, pulls, commits
        self._workers: list[Worker] = []
        self._reaper: Reaper | None = None
        self._lock = threading.Lock()

    @property
    def client(self) -> KazooClient:
        """The client this job queue works through."""
        return self._client

    @property
    def rate_limit(self) -> RateLimit | None:
        """The queue's ``rate_limit`` (its jobs are admitted as they are claimed, or, claimed ahead by a worker, as
        they start), or None."""
        return self._claims.rate.limit if self._claims.rate is not None else None

    @property
    def rate_limited(self) -> bool:
        """Whether the queue has a ``rate_limit``."""
        return self._claims.rate is not None

    @property
    def outcomes(self) -> JobOutcomes:
        """How this queue turns records into :class:`~zkqueue.jobs.Job` objects (``outcomes.job(record)``) and a
        claimed job's result or error into the completion that records it (``success`` / ``failure``, counted in
        :meth:`stats`): a read-only seam for the layers above that hold jobs themselves (:mod:`zkqueue.aio`)."""
        return self._outcomes

    def _engine_queue(self, consumer: Any, executor: Executor | None) -> DistributedQueue[Any]:
        options: dict[str, Any] = {}
        if self._batch_size is not None:
            options["batch_size"] = self._batch_size
        queue = _JobItems(
            self._client, consumer, BytesSerializer(), self.paths.queue, lock_path=self.paths.locks,
            executor=executor, put_in_background=False, final_flush_time=0.0, acl=self._acl,
            claim_hook=self._claims, park_after=self._park_after, schedule_layout=self._schedule_layout,
            run_mover=consumer is None,  # the job queue's own engine queue takes part in the mover's election
            **options,
        )
        return queue

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        for path in self.paths.all():
            self._client.ensure_path(path, acl=self._acl)
        self._control.start()
        self._engine.start()
        self._reaper = Reaper(self._client, [(self.paths.completed, self._keep_completed),
                                             (self.paths.cancelled, self._keep_completed),
                                             (self.paths.dead, self._keep_dead)],
                              self._reap_interval, f"zkqueue-reaper-{self.paths.root}",
                              chores=[self._reap_requests])
        self._reaper.start()
        if self._run_scheduler:
            self._scheduler = Scheduler(self._client, self.paths, self._engine, self._acl,
                                        on_added=lambda n: self._outcomes.count("added", n))
            self._scheduler.start()  # fires the repeats while elected (see zkqueue.jobs.scheduler)

    def close(self, timeout: float | None = DEFAULT_STOP_TIMEOUT) -> None:
        """Stop the scheduler of repeats, every worker (running jobs get ``timeout`` seconds to finish, then are
        given back), then the queue. Idempotent."""
        if self._scheduler is not None:
            self._scheduler.stop()
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop(timeout)
        if self._reaper is not None:
            self._reaper.stop()
        self._control.close()
        self._engine.close()

    def __enter__(self) -> JobQueue:
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _check_started(self) -> None:
        if not self._engine.is_started:
            if self._engine.is_closed:
                raise QueueClosedError(f"job queue {self.paths.root} is closed")
            raise QueueNotStartedError(f"job queue {self.paths.root} is not started; call start() first")

    # ------------------------------------------------------------------------------------------ adding
    def add(self, params: Any, job_id: str | None = None, *, delay: float | None = None,
            run_at: datetime | None = None, priority: int = 0, timeout: float | None = None,
            task: str | None = None, max_attempts: int | None = None,
            headers: dict[str, Any] | None = None) -> str | None:
        """Queue a job; return its id, or None if a job with that id is queued, active or retrying (that job is
        left as it is). ``delay``: seconds before it may run, or ``run_at``: a timezone-aware datetime before which
        it does not run (a job due more than ``park_after`` seconds ahead is parked in time buckets until shortly
        before; see :mod:`zkqueue.engine.parking`); ``priority``: lower runs first among due jobs. ``timeout``:
        seconds one attempt may run, stored in the record; the asyncio workers (:mod:`zkqueue.aio`) cancel a handler
        past it (a failed attempt); the thread workers of :meth:`work` do not enforce it yet. ``task``: the name
        of the task that runs the job, kept in its record (``Job.task``; see :class:`zkqueue.App`);
        ``max_attempts``: the job's own most attempts (its task's retry policy), instead of the queue's.
        ``headers``: metadata that travels with the job (``Job.headers``, through retries and flow hand-offs): a
        dict of JSON, at most 4 KiB (``zkqueue.otel`` puts the trace context there)."""
        job_id = uuid.uuid4().hex if job_id is None else job_id
        rejected = self._add([(job_id, params)], delay=delay, run_at=run_at, priority=priority, timeout=timeout,
                             task=task, max_attempts=max_attempts, headers=headers)
        return None if rejected else job_id

    def new_item_prefix(self, record: Record, *, fresh: bool = False) -> str:
        """Where the queue item of ``record``, a job's first run, goes when a layer above adds it with ops of its
        own (a flow's first step): the sequential prefix in the queue node, or, due more than ``park_after``
        seconds ahead, in the time bucket that parks it (the bucket's nodes are sent first on this client, so a
        multi sent after this call sees them; ``fresh`` sends them again after a multi found them gone)."""
        self._check_started()
        if record.due_ms <= 0:
            return self.paths.item_prefix(record, names.NEW)
        return self._engine.place_due(store.item_name(record, names.NEW), record.due_ms, fresh=fresh)

    def add_all(self, jobs: Iterable[tuple[str, Any]], *, delay: float | None = None,
                run_at: datetime | None = None, priority: int = 0, timeout: float | None = None,
                task: str | None = None, max_attempts: int | None = None,
                headers: dict[str, Any] | None = None) -> list[str]:
        """Queue ``(job_id, params)`` pairs in as few multis as possible; return the ids rejected as duplicates
        (of an unfinished job, or given twice here). ``timeout``, ``task``, ``max_attempts``, ``headers``: as
        :meth:`add`, for each of them."""
        return self._add(list(jobs), delay=delay, run_at=run_at, priority=priority, timeout=timeout, task=task,
                         max_attempts=max_attempts, headers=headers)

    def _add(self, jobs: list[tuple[str, Any]], *, headers: dict[str, Any] | None = None,
             **options: Any) -> list[str]:
        if hooks.installed is None:
            return self._add_now(jobs, headers=headers, **options)
        self._check_started()  # a job hook (zkqueue.otel): it gives the headers to store and wraps the add
        return hooks.installed.adding(self.paths.root, [job_id for job_id, _params in jobs], headers,
                                      lambda stored: self._add_now(jobs, headers=stored, **options))

    def _add_now(self, jobs: list[tuple[str, Any]], *, delay: float | None, run_at: datetime | None,
                 priority: int, timeout: float | None = None, task: str | None = None,
                 max_attempts: int | None = None, headers: dict[str, Any] | None = None) -> list[str]:
        self._check_started()
        headers = check_headers(headers)
        timeout = check_timeout(timeout)
        task = check_task(task)
        max_attempts = check_max_attempts(max_attempts)
        due = store.due_at(delay, run_at)
        records: list[Record] = []
        rejected: list[str] = []
        seen: set[str] = set()
        for job_id, params in jobs:
            names.node_id(job_id)  # checks the id
            if job_id in seen:
                rejected.append(job_id)
                continue
            seen.add(job_id)
            data = self._serializer.serialize(params)
            records.append(Record(id=job_id, state=JobState.QUEUED, params=bytes(data), priority=priority,
                                  due_ms=due, timeout=timeout, task=task, max_attempts=max_attempts,
                                  headers=headers))
        naming.encode_priority(priority)  # checks the priority
        for attempt in range(2):
            if not records:
                break
            ids = [r.id for r in records]
            stale = self._engine.read_retrying(lambda: self._finished_records(ids), f"adding to {self.paths.root}")
            # parked when due far ahead (the buckets are created first: fresh on the second attempt)
            at = {r.id: self._engine.place_due(store.item_name(r, names.NEW), due, fresh=attempt > 0)
                  for r in records} if due else {}
            groups = [store.add_ops(self.paths, r, stale.get(r.id, []), self._acl, at.get(r.id)) for r in records]
            again: list[Record] = []
            for record, group, res in zip(records, groups, self._engine.commit_puts(groups)):
                if res.ok:
                    continue
                if isinstance(res.error, NodeExistsError) and res.op == 0:
                    rejected.append(record.id)  # an unfinished job holds the id
                elif attempt == 0 and res.op is not None and 0 < res.op < len(group) - 1 and isinstance(
                        res.error, (NoNodeError, BadVersionError)):
                    again.append(record)  # an earlier run's finished record changed meanwhile: look again
                elif attempt == 0 and res.op == len(group) - 1 and isinstance(res.error, NoNodeError) and due:
                    again.append(record)  # its time bucket was removed meanwhile (clock skew): create it again
                else:
                    raise QueueStateError(f"adding job {record.id!r} to {self.paths.root} failed: {res.error!r}")
            records = again
        rejected.extend(r.id for r in records)
        self._outcomes.count("added", len(jobs) - len(rejected))
        return rejected

    def _finished_records(self, job_ids: list[str]) -> dict[str, list[tuple[str, int]]]:
        """The finished records of earlier runs of ``job_ids`` (and a cancel request such a run left behind), with
        their versions: an add deletes them."""
        paths = [(job_id, path) for job_id in job_ids
                 for path in (*self.paths.ended(job_id), self.paths.cancel_request(job_id))]
        out: dict[str, list[tuple[str, int]]] = {}
        for (job_id, path), res in zip(paths, api.multi_read(self._client, [p for _j, p in paths])):
            if not isinstance(res, BaseException):
                out.setdefault(job_id, []).append((path, res[1].version))
        return out

    # ------------------------------------------------------------------------------------------ consuming
    def take(self, max_jobs: int = 1, timeout: float | None = None) -> TakeScope:
        """A scope holding up to ``max_jobs`` jobs (blocks until at least one, or [] after ``timeout``): a clean
        exit completes them all, an exception fails them all; ``job.complete(result)`` / ``job.fail(exc)``
        decide one job. A job whose cancel is requested while held (``job.cancel_requested``) ends CANCELLED."""
        self._check_started()
        return TakeScope(self._engine, self._claims, self._outcomes, max_jobs, timeout, self.cancel_requested)

    def claim(self, timeout: float | None = None) -> HeldJob | None:
        """Claim one due job and hold it (blocks up to ``timeout`` seconds; None if none was due): a seam for the
        layers above that commit a job's end in their own multis (flows). See :class:`~zkqueue.jobs.scope.HeldJob`."""
        held = self.claim_many(1, timeout)
        return held[0] if held else None

    def claim_many(self, max_jobs: int, timeout: float | None = None, *, block_leases: bool = False,
                   count: bool = True) -> list[HeldJob]:
        """Like :meth:`claim`, up to ``max_jobs`` jobs at once (their leases and attempts in as few multis as
        possible); [] if none was due within ``timeout`` seconds. ``block_leases``: for a caller that ends its
        jobs within moments (see :meth:`DistributedQueue.claim_nodes <zkqueue.DistributedQueue.claim_nodes>`).
        ``count=False``: the jobs are leased without counting an attempt (claimed ahead of free slots); call
        :meth:`start_many` when they start, or give them back with :meth:`give_back`."""
        self._check_started()
        return claim_held(self._engine, self._claims, timeout, max_jobs, block_leases=block_leases, count=count)

    def admit_starts(self, count: int, stopping: threading.Event) -> int:
        """With a ``rate_limit``: how many of ``count`` jobs claimed ahead (``count=False``) may start now (0..count;
        all of them without one). It does not wait for budget, only for the rate node's answer (through an outage
        too, until ``stopping`` is set: then 0). A worker starts that many with :meth:`start_many`, reports the
        admitted ones that did not start to :meth:`unused_starts`, and holds the rest until :meth:`rate_free_in`
        has passed. So the limit counts a worker's jobs as they start, however long they were held ahead."""
        return self._claims.admit_starts(count, stopping)

    def unused_starts(self, count: int) -> None:
        """Admitted jobs (the last :meth:`admit_starts` of this thread) that did not start: their budget is kept for
        this process's next admissions while it lasts."""
        self._claims.unused_starts(count)

    def rate_free_in(self) -> float:
        """Seconds until the ``rate_limit``'s budget may free (0: now, or no rate limit)."""
        return self._claims.rate_free_in()

    def start_many(self, helds: Sequence[HeldJob]) -> list[HeldJob]:
        """Count the attempt of each held job claimed with ``count=False`` as it starts (fenced by its lease, one
        engine call); return the jobs that may run now. See :func:`zkqueue.jobs.scope.start_many`."""
        fence = self._control.fence_ops()
        if fence is None:  # paused: the jobs claimed ahead go back uncounted, nothing starts
            release_many([h for h in helds if not h.counted])
            return [h for h in helds if h.counted and not h._done]
        return start_many(self.paths, helds, self._recount, fence)

    def _recount(self, helds: Sequence[HeldJob]) -> list[tuple[Record, int] | None]:
        """The records of ``helds`` as they are now (read again once connected), for a count whose reply was lost."""
        paths = [self.paths.record(h.record.id) for h in helds]
        reads = self._engine.read_retrying(lambda: api.multi_read(self._client, paths),
                                           f"checking the starts of {len(paths)} job(s) of {self.paths.root}")
        return [None if isinstance(r, BaseException) else (Record.decode(r[0]), r[1].version) for r in reads]

    def give_back(self, helds: Sequence[HeldJob]) -> None:
        """Give back held jobs that never started, their attempt uncounted (claimed ahead, then not run)."""
        give_back_unstarted(helds, self._outcomes)

    def work(self, handler: Callable[[Job], Any], concurrency: int = 1, *, pool: str = "thread",
             timeout: float | None = None, prefetch: int | None = None, block_leases: bool | None = None,
             max_jobs: int | None = None) -> Worker:
        """Run ``handler(job)`` for this queue's jobs on the worker runtime (:mod:`zkqueue.runtime`) until
        :meth:`Worker.stop <zkqueue.runtime.Worker.stop>` or close(): its return value is stored as the result;
        what it raises retries the job or sends it to the dead letters.

        ``concurrency`` jobs run at once: on threads (``pool="thread"``), in child processes (``pool="process"``,
        for CPU-bound handlers; ``handler`` must pickle), or on an event loop when ``handler`` is a coroutine
        function. ``timeout``: seconds an attempt may run when the job was added without one (a job's own
        ``timeout`` wins); past it the attempt fails with :class:`~zkqueue.errors.JobTimeoutError` and is retried
        by the policy (a thread is let go and replaced, a child killed, a coroutine cancelled). ``prefetch``: jobs
        held ahead of free slots (default ``max(concurrency, 32)``), their attempt counted only when they start.
        ``max_jobs``: stop after that many. ``block_leases``: see :class:`~zkqueue.runtime.Worker`."""
        from zkqueue.runtime import for_handler  # noqa: PLC0415 - the runtime is the layer above this one

        self._check_started()
        return for_handler([self], handler, pool=pool, concurrency=concurrency, timeout=timeout,
                           prefetch=prefetch, block_leases=block_leases, max_jobs=max_jobs,
                           name=f"zkqueue-jobs-{self.paths.root}").start()  # it attaches itself (see attach)

    def attach(self, worker: Worker) -> None:
        """A runtime worker that serves this queue has started (it calls this itself): :meth:`close` stops it
        first, whoever made it (``work()``, ``zkqueue worker``, a flow, the asyncio layer)."""
        with self._lock:
            if worker not in self._workers:
                self._workers.append(worker)

    def detach(self, worker: Worker) -> None:
        """A worker attached by :meth:`attach` has stopped."""
        with self._lock:
            if worker in self._workers:
                self._workers.remove(worker)

    # ------------------------------------------------------------------------------------------ control
    def pause(self) -> None:
        """Pause the queue everywhere: adds go on, but no worker, take or claim of any process starts a job until
        :meth:`resume` (running jobs finish). Once it returns, no job starts: every start checks the pause node's
        version in its own multi (see :mod:`zkqueue.jobs.control`). Idempotent."""
        self._set_paused(True)

    def resume(self) -> None:
        """Undo :meth:`pause`: workers start jobs again. Idempotent."""
        self._set_paused(False)

    @property
    def paused(self) -> bool:
        """Whether the queue is paused (as this process last saw it, kept current by a watch)."""
        return self._control.paused

    def _set_paused(self, paused: bool) -> None:
        self._check_started()
        stat = self._look(lambda: self._client.set(self.paths.control, paused_data(paused)),
                          f"{'pausing' if paused else 'resuming'} {self.paths.root}")
        self._control.saw(stat.version, paused)
        log.info("job queue %s %s", self.paths.root, "paused" if paused else "resumed")

    def cancel(self, job_id: str) -> bool:
        """Cancel job ``job_id``. A job waiting to run (queued, parked for later, or waiting for a retry) becomes
        CANCELLED at once, in one multi: its item and record go, the record is kept in ``cancelled/`` and the id
        is free again. A running job gets a cancel request: its handler sees ``job.cancel_requested`` (an async
        handler is cancelled) and the attempt ends CANCELLED when the handler ends, whatever it returns. A waiting
        job that a worker holds claimed ahead of its free slots is CANCELLED in its record at once, and ends when
        that worker would start it (its start fails; it never runs). True if it was cancelled or the request made (or made before); False for an unknown or
        finished job. Take scopes and flows do not look at requests: a job they hold ends as they decide."""
        self._check_started()
        path = self.paths.record(job_id)
        for _try in range(_CANCEL_TRIES):
            try:
                data, stat = self._look(lambda: self._client.get(path), f"reading job {job_id}")
            except NoNodeError:
                return False
            record = Record.decode(data)
            if record.state is JobState.ACTIVE:
                ops = store.cancel_request_ops(self.paths, record, stat.version, self._acl)
            else:
                item = self._look(lambda: self._item_of(record), f"finding job {job_id}'s item")
                if item is None:  # claimed (or moved) between the reads: look again
                    continue
                ops = store.cancel_ops(self.paths, record, stat.version, item, self._acl)
            res = self._engine.commit_groups([ops])[0]
            requested = record.state is JobState.ACTIVE
            if not res.ok and not requested and res.op == 0 and isinstance(res.error, NotEmptyError):
                # its item is held under a lease by a worker that claimed it ahead: the record says CANCELLED now,
                # so that worker's start (version-checked) fails and gives it back, and the claim that meets it
                # next ends it (JobClaims), without running it
                res = self._engine.commit_groups([store.cancel_held_ops(self.paths, record, stat.version)])[0]
            if res.ok:
                if not requested:
                    self._outcomes.count("cancelled")
                log.info("job %s of %s %s", job_id, self.paths.root,
                         "has a cancel request" if requested else "was cancelled")
                return True
            if requested and isinstance(res.error, NodeExistsError) and res.op == 1:
                return True  # requested before
            if not isinstance(res.error, (NoNodeError, BadVersionError, NodeExistsError, NotEmptyError)):
                raise QueueStateError(f"cancelling job {job_id!r} of {self.paths.root} failed: {res.error!r}")
        raise QueueStateError(f"cancelling job {job_id!r} of {self.paths.root}: it kept changing ({_CANCEL_TRIES} "
                              "tries); try again")

    def _item_of(self, record: Record) -> str | None:
        """The path of ``record``'s queue item: in its time bucket when parked (looked at first: the mover only
        moves items from buckets into the queue node), else in the queue node; None if in neither."""
        for parent in self._engine.item_parents(record.due_ms):
            try:
                children = self._client.get_children(parent)
            except NoNodeError:
                continue
            for name in children:
                item = names.parse_item(name)
                if item is not None and item.job_id == record.id:
                    return naming.join(parent, name)
        return None

    def cancel_requested(self, job_id: str, *, confirm: bool = False) -> bool:
        """Whether a cancel of the running job ``job_id`` is requested (a seam for the workers): as the watch last
        saw the requests, and with ``confirm`` also read again now (only when the watch says so), for a worker
        about to end the job CANCELLED: a request the watch still shows may have been deleted since (an add of
        the id deletes a request its earlier run left), and the end deletes it in its multi."""
        if not self._control.cancel_requested(job_id):
            return False
        if not confirm:
            return True
        stat = self._look(lambda: self._client.exists(self.paths.cancel_request(job_id)),
                          f"reading job {job_id}'s cancel request")
        return stat is not None

    def on_cancel_requests(self, listener: CancelListener) -> Callable[[], None]:
        """Call ``listener(ids)`` (on kazoo's event thread; it must not block) with the ids of running jobs whose
        cancel is newly requested; returns the call that stops it (a seam for the workers)."""
        return self._control.listen(listener)

    def write_progress(self, held: HeldJob, progress: Any) -> bool:
        """Write ``progress`` into the record of the running job ``held``, fenced by its lease and version-checked
        (a seam for the workers, which throttle it: :mod:`zkqueue.jobs.running`); False when the lease or the
        record moved on."""
        updated, ops = store.progress_ops(self.paths, replace(held.record, progress=progress), held.version)
        try:
            return write_held(held, ops, updated)
        except CONNECTION_ERRORS:  # the reply was lost: the record says whether it committed
            path = self.paths.record(held.record.id)
            data, stat = self._look(lambda: self._client.get(path), f"reading job {held.record.id}")
            stored = Record.decode(data)
            if stat.version == held.version + 1 and stored.progress == progress:
                held.record, held.version = stored, stat.version  # it did: the end builds on it
                return True
            return stat.version == held.version  # it did not (written again, or folded into the end)

    # ------------------------------------------------------------------------------------------ looking
    #: Seconds a look at a queue that is not started (opened only to look) waits out a lost connection; a started
    #: queue waits for the engine's put outcome wait.
    read_wait: float = DEFAULT_READ_WAIT

    def _look(self, call: Callable[[], Any], what: str) -> Any:
        """``call()``, a read for a caller who looks at the queue (get, counts): on a started queue a lost
        connection (a leader election) is waited out as the puts wait it out, for up to the engine's put outcome
        wait, instead of raising ConnectionLoss mid-failover; past it, :class:`~zkqueue.errors.ConnectionLostError`.
        A queue not started (opened only to look) waits on its client for :attr:`read_wait` seconds."""
        if self._engine.is_started:
            return self._engine.read_retrying(call, what)
        return read_retrying(call, ClientConnection(self._client), self.read_wait, what)

    def get(self, job_id: str) -> Job | None:
        """The job with ``job_id`` (queued, active, retrying, completed, dead or cancelled), or None if unknown. On
        a started queue a lost connection is waited out (see :meth:`counts`)."""
        paths = self.job_paths(job_id)
        return self.job_of(self._look(lambda: api.multi_read(self._client, paths), f"reading job {job_id}"))

    def job_paths(self, job_id: str) -> list[str]:
        """Where job ``job_id``'s record may be, in the order :meth:`job_of` reads them: unfinished, then
        completed, dead and cancelled (a seam for readers that do their own I/O, such as :mod:`zkqueue.aio`: they
        need not know the layout)."""
        return [self.paths.record(job_id), *self.paths.ended(job_id)]

    def job_of(self, reads: Sequence[Any]) -> Job | None:
        """The job in ``reads`` (a multi-read of :meth:`job_paths`, or of its finished part: ``(data, stat)`` or an
        exception per path), as :meth:`get` shows it; None if no path held it."""
        for res in reads:
            if not isinstance(res, BaseException):
                return self._outcomes.view(Record.decode(res[0]))
        return None

    def wait(self, job_id: str, timeout: float | None = None) -> Job:
        """Job ``job_id`` once it is finished (COMPLETED, DEAD or CANCELLED): waits on ZooKeeper watches of its finished
        records, not polling. Raises :class:`~zkqueue.errors.JobNotFoundError` if there is no such job,
        :class:`~zkqueue.errors.WaitTimeoutError` (a ``TimeoutError``) after ``timeout`` seconds (None: no
        limit). No start() needed. See :func:`zkqueue.jobs.waiting.wait_finished`."""
        return wait_finished(self._client, self.paths, self._outcomes.view, job_id, timeout)

    def wait_result(self, job_id: str, timeout: float | None = None) -> Any:
        """The result of job ``job_id`` once it completes (:meth:`wait`); raises
        :class:`~zkqueue.errors.JobDeadError` (a :class:`~zkqueue.errors.JobFailedError`, with the job and its last
        error) if it ends in the dead letters, :class:`~zkqueue.errors.JobCancelledError` if it was cancelled,
        :class:`~zkqueue.errors.WaitTimeoutError` after ``timeout``
        seconds, :class:`~zkqueue.errors.JobNotFoundError` for an unknown id."""
        job = self.wait(job_id, timeout)
        if job.state is JobState.DEAD:
            raise JobDeadError(job)
        if job.state is JobState.CANCELLED:
            raise JobCancelledError(job)
        return job.result

    def counts(self) -> dict[str, int]:
        """Jobs by state: queued (waiting in the queue node, incl. delayed first runs due soon), active (held by a
        worker), retrying (waiting in the queue node for a next attempt), scheduled (parked: first runs and retries
        due more than ``park_after`` seconds ahead), dead and completed. Listings and stats; no record is read.
        With parking, scheduled costs one read per time bucket (see :func:`zkqueue.engine.parking.parked_count`).
        On a started queue a lost connection (a leader election) is waited out, as puts wait it out."""
        return self._look(self._counts, f"counting the jobs of {self.paths.root}")  # type: ignore[no-any-return]

    def _counts(self) -> dict[str, int]:
        items = [n for n in self._client.get_children(self.paths.queue) if names.parse_item(n) is not None]
        held = held_items(items, self._client.get_children(self.paths.locks), self.paths.queue)
        queued, retrying = names.count_waiting(items, held)
        counts = {"queued": queued, "active": len(held), "retrying": retrying}
        counts["scheduled"] = parked_count(self._client, self.paths.queue) if self._park_after is not None else 0
        for key, parent in (("dead", self.paths.dead), ("completed", self.paths.completed),
                            ("cancelled", self.paths.cancelled)):
            stat = self._client.exists(parent)
            counts[key] = stat.numChildren if stat else 0
        return counts

    def queued(self, limit: int = 100) -> list[Job]:
        """The first ``limit`` jobs waiting in the queue node to run (QUEUED or RETRYING, due or not, none held by
        a worker: ``counts()["queued"]`` and ``["retrying"]``), in run order: the due ones in the order a worker
        claims them (priority, lower first, then the time each became runnable, then the add order), then the ones
        not due yet by due time. Jobs parked in time buckets (due more than ``park_after`` seconds ahead) are not
        listed: they show in ``counts()["scheduled"]``. Costs the listings of the queue node and of the locks, and
        one multiRead of the records returned; a job that finished meanwhile is left out. On a started queue a lost
        connection is waited out (see :meth:`counts`)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigurationError(f"limit must be an int >= 1, got {limit!r}")
        return self._look(lambda: self._listed(False, limit),  # type: ignore[no-any-return]
                          f"listing the queued jobs of {self.paths.root}")

    def in_progress(self) -> list[Job]:
        """The jobs held by workers now (``counts()["active"]``), in run order: running (ACTIVE), or claimed
        ahead by a worker's prefetch and about to start (their records still QUEUED or RETRYING). Costs the
        listings of the queue node and of the locks, and one multiRead of the records returned; a job that
        finished meanwhile is left out. On a started queue a lost connection is waited out (see :meth:`counts`)."""
        return self._look(lambda: self._listed(True, None),  # type: ignore[no-any-return]
                          f"listing the jobs in progress of {self.paths.root}")

    def _listed(self, held_ones: bool, limit: int | None) -> list[Job]:
        """The jobs of the held items (``held_ones``) or of the free ones, in run order (see :meth:`queued`)."""
        parsed = {n: p for n in self._client.get_children(self.paths.queue) if (p := names.parse_item(n)) is not None}
        held = held_items(parsed, self._client.get_children(self.paths.locks), self.paths.queue)
        now = now_ms()

        def run_order(name: str) -> tuple[Any, ...]:
            item = parsed[name]
            if item.kind == names.IMMEDIATE or item.due_ms <= now:
                return (0, 0, names.sort_key(name))
            return (1, item.due_ms, names.sort_key(name))

        chosen = [n for n in parsed if (n in held) == held_ones]
        ordered = sorted(chosen, key=run_order) if limit is None else heapq.nsmallest(limit, chosen, key=run_order)
        ids = list(dict.fromkeys(parsed[n].job_id for n in ordered))  # one job, one entry (even if listed twice)
        reads = api.multi_read(self._client, [self.paths.record(i) for i in ids]) if ids else []
        return [self._outcomes.view(Record.decode(res[0])) for res in reads if not isinstance(res, BaseException)]

    def outstanding(self) -> int:
        """Jobs that are still to run: queued and due now, running, or waiting for a retry (first runs the caller
        delayed past now are not counted). What a burst worker waits for (``zkqueue worker --burst``). Reads the
        records of every unfinished job: meant for a queue that is nearly drained."""
        try:
            ids = self._client.get_children(self.paths.records)
        except NoNodeError:
            return 0
        now = now_ms()
        count = 0
        for res in api.multi_read(self._client, [naming.join(self.paths.records, n) for n in ids]):
            if isinstance(res, BaseException):
                continue  # finished meanwhile
            try:
                record = Record.decode(res[0])
            except CorruptItemError:  # an unreadable record still stands for a job to deal with
                count += 1
                continue
            if record.state is not JobState.QUEUED or record.due_ms <= now:
                count += 1
        return count

    def stats(self) -> dict[str, int]:
        """What this instance did so far: jobs ``added``, and job ends its workers and scopes decided:
        ``completed``, ``retried`` (a failed attempt with another to come) and ``dead_lettered``. Counters for
        :mod:`zkqueue.metrics`; :meth:`counts` is the queue's state across every instance. With a ``rate_limit``
        also ``rate_slices``, ``rate_waits``, ``rate_waited_ms``, ... (:meth:`~zkqueue.jobs.rate.RateLimiter.stats`)."""
        tally = self._outcomes.tallied()
        return {**{key: tally.get(key, 0) for key in ("added", "completed", "retried", "dead_lettered",
                                                       "cancelled")},
                **self._claims.rate_stats()}

    def dead_letters(self, limit: int | None = None) -> list[Job]:
        """The dead jobs, the most recently dead first."""
        return self._finished_jobs(self.paths.dead, limit)

    def completed(self, limit: int | None = None) -> list[Job]:
        """The completed jobs still kept, the most recent first."""
        return self._finished_jobs(self.paths.completed, limit)

    def _finished_jobs(self, parent: str, limit: int | None) -> list[Job]:
        children = self._client.get_children(parent)
        reads = api.multi_read(self._client, [naming.join(parent, n) for n in children])
        records = [Record.decode(r[0]) for r in reads if not isinstance(r, BaseException)]
        records.sort(key=lambda r: r.updated_ms, reverse=True)
        return [self._outcomes.view(r) for r in records[:limit]]

    # ------------------------------------------------------------------------------------------ dead letters
    def retry_dead(self, job_ids: Sequence[str] | None = None) -> int:
        """Queue dead jobs again (all, or ``job_ids``) as fresh runs; return how many were."""
        self._check_started()
        ids = self._dead_ids(job_ids)
        paths = [self.paths.finished(i, JobState.DEAD) for i in ids]
        groups = []
        for res in api.multi_read(self._client, paths):
            if not isinstance(res, BaseException):
                groups.append(store.redrive_ops(self.paths, Record.decode(res[0]), res[1].version, self._acl))
        return sum(1 for res in self._engine.commit_groups(groups) if res.ok) if groups else 0

    def purge_dead(self, job_ids: Sequence[str] | None = None) -> int:
        """Delete dead jobs (all, or ``job_ids``); return how many were."""
        self._check_started()
        groups = [[api.DeleteOp(self.paths.finished(i, JobState.DEAD))] for i in self._dead_ids(job_ids)]
        return sum(1 for res in self._engine.commit_groups(groups) if res.ok) if groups else 0

    def _dead_ids(self, job_ids: Sequence[str] | None) -> list[str]:
        if job_ids is not None:
            return list(job_ids)
        return [names.job_id_of(n) for n in self._client.get_children(self.paths.dead)]

    def reap(self) -> int:
        """Apply ``keep_completed`` and ``keep_dead`` now (the reaper also does every ``reap_interval``)."""
        return (reap(self._client, self.paths.completed, self._keep_completed)
                + reap(self._client, self.paths.cancelled, self._keep_completed)
                + reap(self._client, self.paths.dead, self._keep_dead) + self._reap_requests())

    def _reap_requests(self) -> int:
        """Delete cancel requests left by jobs that ended first (see :func:`zkqueue.jobs.control.reap_requests`)."""
        return reap_requests(self._client, self.paths.cancels, self.paths.record)

    def __repr__(self) -> str:
        return f"JobQueue(path={self.paths.root!r}, retry={self.retry!r})"

    # ------------------------------------------------------------------------------------------ repeating jobs
    _scheduler: Scheduler | None = None  # set by start()

    def repeat(self, name: str, params: Any, cron: str | None = None, *, every: timedelta | float | None = None,
               tz: str = "UTC", catch_up: str = "last") -> Repeat:
        """Add a job ``<name>@<fire time>`` (``nightly@2026-11-24T03:00:00Z``) at every fire time of ``cron``
        (in ``tz``) or ``every`` (whole seconds since the epoch); ``catch_up`` ("last", "all", "none") decides what
        fires for times missed while no job queue ran. The same ``name`` again replaces the definition and keeps its
        last fired time (nothing fires twice). See :mod:`zkqueue.jobs.scheduler`."""
        self._check_started()
        repeat_store.check_name(name)
        schedule = Schedule.of(cron, every, tz)
        repeat_store.check_catch_up(catch_up)
        data = bytes(self._serializer.serialize(params))
        definition = repeat_store.save(self._client, self.paths, name, schedule, catch_up, data, self._acl)
        return definition.public(self._serializer)

    def repeats(self) -> list[Repeat]:
        """The repeat definitions, by name, with their last and next fire times (no start() needed)."""
        return [d.public(self._serializer) for d, _version in repeat_store.load_all(self._client, self.paths)]

    def cancel_repeat(self, name: str) -> bool:
        """Stop repeating ``name``; False if there was no such repeat. Jobs it already added stay."""
        self._check_started()
        return repeat_store.delete(self._client, self.paths, repeat_store.check_name(name))


class _JobItems(DistributedQueue):  # type: ignore[type-arg]
    """The engine queue of a job queue: job item names (:mod:`zkqueue.jobs.names`), ordered by priority, then the
    time each job became runnable, then sequence. Items not due yet sort among the due ones: the pull claims a job
    queue uses skip them (:class:`~zkqueue.engine.ordering.KeptOrder`); the engine's push loop, which waits for a
    head not due yet as Curator does, is never run on these names."""

    def get_delay(self, item_node: str) -> float:
        """Seconds until the item is due: 0 for a first run due at once (kind ``i``: its ms field is its add time,
        so a producer's clock ahead of this host's does not delay it), else its due time minus now."""
        item = names.parse_item(item_node)
        if item is None or item.kind == names.IMMEDIATE:
            return 0.0
        return (item.due_ms - now_ms()) / 1000.0

    def sort_children(self, names_: list[str]) -> list[str]:
        return sorted(names_, key=names.sort_key)

    order_key = staticmethod(names.sort_key)
