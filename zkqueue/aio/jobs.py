"""AsyncJobQueue: the job queue of :mod:`zkqueue.jobs` for asyncio services, on the same engine seams.

It wraps a :class:`~zkqueue.jobs.JobQueue` (:attr:`AsyncJobQueue.sync`) on the same client and path, so ids,
attempts, retries, dead letters, fenced completions and records are the sync layer's own, and sync and async
queues on one path work together. How each call reaches ZooKeeper without blocking the loop:

- ``get``, ``wait_result``: kazoo's async requests (``multi_read_async``, ``exists_async``, ``get_async``,
  watches), bridged to the loop by :mod:`zkqueue.aio.bridge`.
- ``add`` / ``add_all``: the exactly-once add (a multiRead of earlier runs' records, then multis through the
  producer's marker) has no async form, so it runs in the queue's ONE small thread pool (``executor_threads``,
  default 4), and concurrent ``add`` calls are coalesced on the loop into ``add_all`` batches (up to
  ``add_batch`` jobs): ten thousand adds are tens of round trips, not ten thousand threads or calls.
- ``take``, ``work`` (claims wait for due jobs; completions are fenced multis), ``counts``, ``queued``,
  ``in_progress``, ``cancel``, ``pause``, ``resume``, ``dead_letters``, ``completed``, ``retry_dead``,
  ``purge_dead``, ``reap``, ``start`` and ``close``: the sync call in that pool. ``paused``: the sync queue's
  watched state (no I/O).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from datetime import datetime
from typing import Any, Iterable, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zkqueue.engine.api import Completion, multi_read_async
from zkqueue.aio.bridge import Offloader, from_kazoo, to_loop
from zkqueue.aio.held import claim_held, end_held
from zkqueue.aio.lifecycle import Opened
from zkqueue.aio.worker import AsyncHandler, AsyncWorker
from zkqueue.errors import (  # JobDeadError: defined in zkqueue.errors, importable from here as before
    ConfigurationError,
    JobCancelledError,
    JobDeadError,
    JobNotFoundError,
    QueueClosedError,
    UndecodableParamsError,
    WaitTimeoutError,
)
from zkqueue.formats import naming
from zkqueue.jobs import names, store
from zkqueue.jobs.claims import Claimed
from zkqueue.jobs.model import Job, JobState, check_timeout
from zkqueue.jobs.queue import DEFAULT_STOP_TIMEOUT, JobQueue
from zkqueue.jobs.scope import ClaimedJob, HeldJob, scope_completion

log = logging.getLogger("zkqueue.aio.jobs")

#: Most jobs in one coalesced add_all.
DEFAULT_ADD_BATCH = 500


class _Add:
    __slots__ = ("fut", "job_id", "params")

    def __init__(self, job_id: str, params: Any, fut: asyncio.Future[str | None]) -> None:
        self.job_id = job_id
        self.params = params
        self.fut = fut


class _Adder:
    """Coalesces concurrent ``add`` calls of one loop into ``add_all`` batches run in the offloader: the calls
    that arrive while a batch is being committed go together in the next one (per set of options; an id twice
    waits for the next batch, so each call gets its own answer)."""

    def __init__(self, jq: AsyncJobQueue, batch: int) -> None:
        self._jq = jq
        self._batch = batch
        self._waiting: dict[tuple[Any, ...], list[_Add]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._sending: set[str] = set()  # ids in batches being sent
        self._slots = jq._add_slots

    def add(self, key: tuple[Any, ...], job_id: str, params: Any) -> asyncio.Future[str | None]:
        fut: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(_Add(job_id, params, fut))
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._pump(), name="zkqueue-aio-adder")
        return fut

    async def _pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                await self._slots.acquire()
                key, adds = self._next()
                if not adds:  # every waiting add has an id being sent: the end of that batch wakes us
                    self._slots.release()
                    break
                self._sending.update(a.job_id for a in adds)
                task = asyncio.get_running_loop().create_task(self._commit(key, adds))
                self._in_flight.add(task)
                task.add_done_callback(self._in_flight.discard)

    def _next(self) -> tuple[tuple[Any, ...], list[_Add]]:
        """The next batch: adds of one set of options, distinct ids, none of them in a batch being sent (so the
        first of two adds of one id gets the id)."""
        for key in list(self._waiting):
            waiting = self._waiting.pop(key)
            batch: list[_Add] = []
            later: list[_Add] = []
            ids: set[str] = set()
            for add in waiting:
                if add.fut.done():  # its caller was cancelled before it was sent
                    continue
                if len(batch) >= self._batch or add.job_id in ids or add.job_id in self._sending:
                    later.append(add)
                    continue
                ids.add(add.job_id)
                batch.append(add)
            if later:
                self._waiting[key] = later
            if batch:
                return key, batch
        return (), []

    async def _commit(self, key: tuple[Any, ...], adds: list[_Add]) -> None:
        delay, run_at, priority, timeout = key
        try:
            jobs = [(a.job_id, a.params) for a in adds]
            try:  # shielded: the batch is not given up for one cancelled caller
                rejected = await asyncio.shield(self._jq.offloader.submit(
                    self._jq.sync.add_all, jobs, delay=delay, run_at=run_at, priority=priority, timeout=timeout))
            except Exception as exc:
                for a in adds:
                    if not a.fut.done():
                        a.fut.set_exception(exc)
                return
            refused = set(rejected)
            for a in adds:
                if not a.fut.done():
                    a.fut.set_result(None if a.job_id in refused else a.job_id)
        finally:
            self._sending.difference_update(a.job_id for a in adds)
            self._slots.release()
            self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._in_flight:
            await asyncio.gather(*list(self._in_flight), return_exceptions=True)
        error = QueueClosedError(f"job queue {self._jq.path} is closed")
        for adds in self._waiting.values():
            for a in adds:
                if not a.fut.done():
                    a.fut.set_exception(error)
        self._waiting.clear()


class AsyncTakeScope:
    """``async with jq.take(max_jobs=10, timeout=5.0) as jobs:`` the scoped take, awaited: a clean exit completes
    every job (result None), an exception fails them all (retried or dead, each an attempt);
    ``job.complete(result)`` / ``job.fail(exc)`` decide one job. A cancellation (or another BaseException such as
    KeyboardInterrupt) gives the undecided jobs back with their attempt uncounted, to run again at once; decided ones
    are committed. A claimed job whose params cannot be read ends in the dead letters at once and is not returned."""

    def __init__(self, jq: AsyncJobQueue, max_jobs: int, timeout: float | None) -> None:
        if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1:
            raise ConfigurationError(f"max_jobs must be an int >= 1, got {max_jobs!r}")
        self._jq = jq
        self._max_jobs = max_jobs
        self._timeout = timeout
        self._held: list[tuple[HeldJob, ClaimedJob]] = []
        self._entered = False

    async def __aenter__(self) -> list[ClaimedJob]:
        if self._entered:
            raise ConfigurationError("a take scope can be entered once")
        self._entered = True
        self._jq._check_open()
        outcomes = self._jq.sync.outcomes
        unreadable: list[tuple[HeldJob, Completion]] = []
        for held in await claim_held(self._jq, self._max_jobs, self._timeout):
            try:
                job = outcomes.job(held.record)
            except UndecodableParamsError as exc:  # it cannot run: dead now, not handed to the caller
                unreadable.append((held, outcomes.failure(Claimed(held.record, held.version), exc)))
                continue
            held_job = ClaimedJob.of(job)
            held_job._asked = functools.partial(self._jq.sync.cancel_requested, job.id)  # the watch's view: no I/O
            self._held.append((held, held_job))
        if unreadable:
            await asyncio.shield(asyncio.ensure_future(end_held(self._jq, unreadable, [])))
        return [job for _h, job in self._held]

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        held, self._held = self._held, []
        if not held:
            return
        outcomes = self._jq.sync.outcomes
        ends: list[tuple[HeldJob, Completion]] = []
        for h, job in held:
            claimed = Claimed(h.record, h.version)
            if not job.decided and exc is not None and not isinstance(exc, Exception):
                # cancelled (or interrupted): not this job's failure; given back, its attempt uncounted
                ends.append((h, outcomes.unstarted(claimed)))
            elif job.cancel_requested and await self._jq.offloader.run(self._jq.sync.cancel_requested, job.id,
                                                                         confirm=True):
                ends.append((h, outcomes.cancelled(claimed)))  # asked to stop while held: whatever was decided
            else:
                ends.append((h, scope_completion(job, claimed, outcomes, exc)))
        work = asyncio.ensure_future(end_held(self._jq, ends, []))
        await asyncio.shield(work)  # a cancelled exit still ends every job (in the background)


class AsyncJobQueue(Opened):
    """A job queue at ``path`` for asyncio code: ``async with AsyncJobQueue(client, "/jobs/mail") as jq:``.

    Every keyword of :class:`~zkqueue.jobs.JobQueue` (``retry``, ``serializer``, ``keep_completed``,
    ``rate_limit``, ...) is passed on. ``executor_threads`` sizes the one thread pool that runs the sync seams
    (see the module docs); ``add_batch`` is the most jobs one coalesced add sends.
    """

    kind = "job queue"

    def __init__(self, client: KazooClient, path: str, *, executor_threads: int = 4,
                 add_batch: int = DEFAULT_ADD_BATCH, **job_queue_options: Any) -> None:
        if isinstance(add_batch, bool) or not isinstance(add_batch, int) or add_batch < 1:
            raise ConfigurationError(f"add_batch must be an int >= 1, got {add_batch!r}")
        #: The sync job queue this one wraps (same client, path and options).
        self.sync = JobQueue(client, path, **job_queue_options)
        self.offloader = Offloader(executor_threads, f"zkqueue-aio-{self.sync.paths.root}")
        self._add_batch = add_batch
        self._adder: _Adder | None = None
        #: Adds (coalesced or add_all) in the pool at once: they are CPU work (records, multis) that competes with
        #: the loop for the GIL, so at most half the pool, leaving threads for claims and completions.
        self._add_slots = asyncio.Semaphore(max(1, executor_threads // 2))
        self._workers: list[AsyncWorker] = []
        self._state = "new"

    @property
    def path(self) -> str:
        return self.sync.paths.root

    @property
    def client(self) -> KazooClient:
        return self.sync.client

    # ------------------------------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Create the queue's nodes and start it (in the thread pool)."""
        if self._state != "new":
            raise ConfigurationError(f"async job queue {self.path} was already started")
        self._state = "started"
        self._adder = _Adder(self, self._add_batch)
        await self.offloader.run(self.sync.start)

    async def close(self, timeout: float | None = DEFAULT_STOP_TIMEOUT) -> None:
        """Stop every worker (running handlers get ``timeout`` seconds to finish, then are given back), fail adds not
        sent yet, close the sync queue. Idempotent."""
        if self._state == "closed":
            return
        self._state = "closed"
        for worker in list(self._workers):
            await worker.stop(timeout)
        if self._adder is not None:
            await self._adder.close()
        try:
            await self.offloader.run(self.sync.close)
        finally:
            self.offloader.shutdown()


    def _forget_worker(self, worker: AsyncWorker) -> None:
        if worker in self._workers:
            self._workers.remove(worker)

    # ------------------------------------------------------------------------------------------ adding
    async def add(self, params: Any, job_id: str | None = None, *, delay: float | None = None,
                  run_at: datetime | None = None, priority: int = 0, timeout: float | None = None) -> str | None:
        """:meth:`JobQueue.add`: the id, or None while a job with that id is unfinished. Arguments are checked
        here; the add is sent with the other adds of this loop (see the module docs). ``delay`` counts from when
        the batch is sent (milliseconds after the call)."""
        self._check_open()
        job_id = uuid.uuid4().hex if job_id is None else job_id
        key = self._check_options(delay, run_at, priority, timeout)
        names.node_id(job_id)
        assert self._adder is not None
        return await self._adder.add(key, job_id, params)

    async def add_all(self, jobs: Iterable[tuple[str, Any]], *, delay: float | None = None,
                      run_at: datetime | None = None, priority: int = 0, timeout: float | None = None) -> list[str]:
        """:meth:`JobQueue.add_all` in the thread pool: the ids rejected as duplicates."""
        self._check_open()
        self._check_options(delay, run_at, priority, timeout)
        jobs = list(jobs)
        async with self._add_slots:
            return await self.offloader.run(self.sync.add_all, jobs, delay=delay, run_at=run_at,
                                            priority=priority, timeout=timeout)

    @staticmethod
    def _check_options(delay: float | None, run_at: datetime | None, priority: int,
                       timeout: float | None) -> tuple[Any, ...]:
        store.due_at(delay, run_at)
        naming.encode_priority(priority)
        return (delay, run_at, priority, check_timeout(timeout))

    # ------------------------------------------------------------------------------------------ consuming
    def take(self, max_jobs: int = 1, timeout: float | None = None) -> AsyncTakeScope:
        """``async with jq.take(max_jobs, timeout) as jobs:`` (see :class:`AsyncTakeScope`); [] after ``timeout``."""
        self._check_open()
        return AsyncTakeScope(self, max_jobs, timeout)

    def work(self, handler: AsyncHandler, concurrency: int = 1, *, timeout: float | None = None,
             slow_after: float | None = 0.1, prefetch: int | None = None,
             block_leases: bool | None = None) -> AsyncWorker:
        """Run ``await handler(job)`` for jobs on this loop, up to ``concurrency`` at once, until ``await
        worker.stop()`` or close(): its return value is stored as the result; an exception (or running past the
        job's ``timeout``, else this ``timeout``) retries the job or sends it to the dead letters. A handler step
        that blocks the loop longer than ``slow_after`` seconds is reported once per job. ``prefetch`` jobs (default:
        ``max(concurrency, 32)``; 0: none) are claimed ahead of free slots, their attempt counted only when they start. ``block_leases``: hold claimed jobs under block
        leases (True), item leases (False), or block leases while handlers take 0.25 s or less on average (None);
        see :mod:`zkqueue.aio.worker`. Call it from a coroutine (it starts a task on the running loop)."""
        self._check_open()
        worker = AsyncWorker(self, handler, concurrency, timeout, slow_after, on_stopped=self._forget_worker,
                             prefetch=prefetch, block_leases=block_leases)
        self._workers.append(worker)
        return worker

    # ------------------------------------------------------------------------------------------ looking
    async def get(self, job_id: str) -> Job | None:
        """:meth:`JobQueue.get` through one async multiRead: the job in any state, or None if unknown."""
        return self.sync.job_of(await from_kazoo(multi_read_async(self.client, self.sync.job_paths(job_id))))

    async def wait_result(self, job_id: str, timeout: float | None = None) -> Any:
        """The result of job ``job_id`` once it completes: waits on ZooKeeper watches of its finished records
        (no polling). Raises :class:`~zkqueue.errors.JobDeadError` if it ends in the dead letters,
        :class:`~zkqueue.errors.JobCancelledError` if it was cancelled, ``JobNotFoundError`` if there is no such
        job, :class:`~zkqueue.errors.WaitTimeoutError` (a ``TimeoutError``) after ``timeout`` seconds."""
        try:
            async with asyncio.timeout(timeout):
                return await self._wait_result(job_id)
        except TimeoutError as exc:
            if isinstance(exc, WaitTimeoutError):
                raise
            raise WaitTimeoutError(f"job {job_id!r} of {self.path} did not finish within {timeout}s") from exc

    async def _wait_result(self, job_id: str) -> Any:
        record, *finished = self.sync.job_paths(job_id)  # unfinished; completed, dead, cancelled
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()
        wake = to_loop(loop, lambda *_a: changed.set())
        self.client.add_listener(wake)  # a reconnect (a lost session drops watches): look again
        try:
            unseen = 0
            while True:
                changed.clear()
                stats = await asyncio.gather(*(from_kazoo(self.client.exists_async(path, watch=wake))
                                               for path in finished))
                for path, stat in zip(finished, stats):
                    if stat is None:
                        continue
                    try:
                        read = await from_kazoo(self.client.get_async(path))
                    except NoNodeError:  # reaped or re-added meanwhile
                        break
                    job = self.sync.job_of([read])
                    if job.state is JobState.DEAD:
                        raise JobDeadError(job)
                    if job.state is JobState.CANCELLED:
                        raise JobCancelledError(job)
                    return job.result
                else:
                    if await from_kazoo(self.client.exists_async(record)) is None:
                        unseen += 1  # gone from records/ and not finished: look once more (it may just have moved)
                        if unseen >= 2:
                            raise JobNotFoundError(f"no job {job_id!r} in {self.path}")
                        continue
                    unseen = 0
                    await changed.wait()
        finally:
            self.client.remove_listener(wake)

    async def counts(self) -> dict[str, int]:
        """:meth:`JobQueue.counts` (in the thread pool)."""
        return await self.offloader.run(self.sync.counts)

    async def queued(self, limit: int = 100) -> list[Job]:
        """:meth:`JobQueue.queued` (in the thread pool): the jobs waiting to run, in run order."""
        return await self.offloader.run(self.sync.queued, limit)

    async def in_progress(self) -> list[Job]:
        """:meth:`JobQueue.in_progress` (in the thread pool): the jobs held by workers now."""
        return await self.offloader.run(self.sync.in_progress)

    # ------------------------------------------------------------------------------------------ control
    async def cancel(self, job_id: str) -> bool:
        """:meth:`JobQueue.cancel` (in the thread pool): a waiting job becomes CANCELLED at once, a running one gets
        a cancel request (an async handler is cancelled); False for an unknown or finished job."""
        self._check_open()
        return await self.offloader.run(self.sync.cancel, job_id)

    async def pause(self) -> None:
        """:meth:`JobQueue.pause` (in the thread pool): no worker of any process starts a job until :meth:`resume`;
        adds go on, running jobs finish."""
        self._check_open()
        await self.offloader.run(self.sync.pause)

    async def resume(self) -> None:
        """:meth:`JobQueue.resume` (in the thread pool)."""
        self._check_open()
        await self.offloader.run(self.sync.resume)

    @property
    def paused(self) -> bool:
        """:attr:`JobQueue.paused`: whether the queue is paused, as this process last saw it (kept current by a
        watch; no I/O)."""
        return self.sync.paused

    def stats(self) -> dict[str, int]:
        """:meth:`JobQueue.stats` (counters in memory: no I/O)."""
        return self.sync.stats()

    async def dead_letters(self, limit: int | None = None) -> list[Job]:
        return await self.offloader.run(self.sync.dead_letters, limit)

    async def completed(self, limit: int | None = None) -> list[Job]:
        return await self.offloader.run(self.sync.completed, limit)

    async def retry_dead(self, job_ids: Sequence[str] | None = None) -> int:
        return await self.offloader.run(self.sync.retry_dead, job_ids)

    async def purge_dead(self, job_ids: Sequence[str] | None = None) -> int:
        return await self.offloader.run(self.sync.purge_dead, job_ids)

    async def reap(self) -> int:
        return await self.offloader.run(self.sync.reap)

    def __repr__(self) -> str:
        return f"AsyncJobQueue(path={self.path!r}, retry={self.sync.retry!r})"
