"""Async workers: ``jq.work(handler, concurrency=200)`` runs coroutine handlers on the event loop, up to
``concurrency`` in flight, on the job layer's pull seams.

One claim loop per worker (a task on the loop) asks :meth:`JobQueue.claim_many` for as many jobs as there is room
for: free slots plus ``prefetch`` (default: ``concurrency``) jobs claimed ahead, so that a slot that frees starts
the next job at once instead of waiting for a claim. A claim costs a few ZooKeeper round trips whatever its size
(two of them writes: the leases, then the attempts), so claiming ahead in large batches is what lets short I/O
handlers keep ``concurrency`` slots busy. The claim (it waits for due jobs, and counts each attempt in a fenced
multi) runs in the queue's :class:`~zkqueue.aio.bridge.Offloader`, because the engine's pull mode has no async
form. Each job runs as a task:
``await handler(job)``; its end is built by the job layer's own outcomes (completed with the result, retried after
a backoff, or dead) and committed by a finisher task that batches the ends of all jobs done meanwhile into one
engine call (``complete_nodes``, fenced by each job's lease), also in the offloader.

- **Timeouts.** A job added with ``timeout=`` (or the worker's default ``timeout``) whose handler is still running
  after that many seconds is cancelled (``asyncio.timeout``); the attempt fails with :class:`JobTimeoutError`,
  retried or dead-lettered by the queue's :class:`~zkqueue.jobs.RetryPolicy`.
- **Cancellation.** Cancelling the worker's task (:attr:`AsyncWorker.task`) cancels every running handler and gives
  their jobs back untouched (``release``): they run again at once elsewhere, their claimed attempt counted. Ends
  already decided are committed first.
- **stop()** stops claiming, gives back the jobs claimed ahead (their attempt uncounted: they never ran), lets
  running handlers finish and commits their ends. A cancellation gives back the claimed-ahead jobs the same way.
- **Prefetch.** ``prefetch=0`` claims only for free slots (a worker then never holds a job it has not started);
  jobs claimed ahead are held under their lease, so other workers do not get them meanwhile.
- **Blocking handlers** are reported once per job id (:mod:`zkqueue.aio.watchdog`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from typing import Any, Awaitable, Callable

from zkqueue.aio.held import Finisher, JobSource, claim_held
from zkqueue.aio.lifecycle import WorkerTask
from zkqueue.aio.watchdog import SlowSteps
from zkqueue.errors import ConfigurationError, JobTimeoutError, QueueClosedError  # JobTimeoutError: importable here
from zkqueue.jobs.claims import Claimed
from zkqueue.jobs.model import Job, check_timeout
from zkqueue.jobs.scope import HeldJob

log = logging.getLogger("zkqueue.aio.worker")

#: Seconds one claim waits for a due job before the claim loop looks at stop() again.
CLAIM_WAIT = 0.5
#: Handlers whose mean run is at most this many seconds get their jobs claimed under block leases (a claim of
#: hundreds of jobs then writes a lock per 64 of them, not a lock and a fence per job); a job that runs long holds
#: back the other jobs of its block (those not claimed with it) until it ends. Well under the engine's downgrade
#: of block leases held a second (zkqueue.engine.leases.DOWNGRADE_AFTER): a claimed-ahead job waits about one
#: handler run for its slot, then runs one.
BLOCK_LEASE_HANDLER_SECONDS = 0.25
#: Seconds to wait after a claim failed (e.g. the connection is lost) before the next one.
CLAIM_ERROR_PAUSE = 1.0

AsyncHandler = Callable[[Job], Awaitable[Any]]


class AsyncWorker(WorkerTask["AsyncWorker"]):
    """Coroutine handlers of one job queue on the running loop (see the module docs). Made by
    :meth:`AsyncJobQueue.work <zkqueue.aio.AsyncJobQueue.work>`; ``await worker.stop()`` drains it. ``jq`` is the
    queue it claims from; ``on_stopped`` is called with the worker once :meth:`stop` has drained it (the queue
    forgets it)."""

    def __init__(self, jq: JobSource, handler: AsyncHandler, concurrency: int, timeout: float | None,
                 slow_after: float | None, on_stopped: Callable[[AsyncWorker], None] | None = None,
                 prefetch: int | None = None, block_leases: bool | None = None) -> None:
        if not callable(handler):
            raise ConfigurationError(f"handler must be an async callable, got {handler!r}")
        if not (inspect.iscoroutinefunction(handler)
                or inspect.iscoroutinefunction(getattr(handler, "__call__", None))):
            raise ConfigurationError(f"handler must be a coroutine function (async def), got {handler!r}; "
                                     "thread handlers go to JobQueue.work")
        super().__init__(on_stopped, concurrency, slow_after)
        if prefetch is None:
            prefetch = concurrency
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ConfigurationError(f"prefetch must be an int >= 0 or None, got {prefetch!r}")
        self._jq = jq
        self._handler = handler
        self._outcomes = jq.sync.outcomes  # the job layer's own ends: same records, tallies and logs
        #: Jobs claimed ahead of free slots (see the module docs).
        self.prefetch = prefetch
        self._timeout = check_timeout(timeout)
        self._slow = SlowSteps(slow_after, jq.path)
        self._finisher = Finisher(jq)
        self._ready: deque[HeldJob] = deque()  # claimed ahead, not started
        self._running: dict[asyncio.Task[None], HeldJob] = {}  # each running task and its job
        self._begun: set[int] = set()  # ids of the held jobs whose task has started
        self._freed = asyncio.Event()
        self._counts = {"completed": 0, "failed": 0, "timed_out": 0, "released": 0, "returned": 0}
        self.peak_in_flight = 0
        self._block_leases = block_leases
        self._mean_run: float | None = None  # seconds per handler run (see _short_jobs)
        self._begin(self._run(), f"zkqueue-aio-worker-{jq.path}")

    @property
    def in_flight(self) -> int:
        """Handlers running now."""
        return len(self._running)

    def stats(self) -> dict[str, int]:
        """This worker's jobs so far: ``completed``, ``failed`` (attempts that raised or timed out),
        ``timed_out``, ``released`` (running handlers given back by a cancellation), ``returned`` (claimed ahead
        and given back unstarted by stop() or a cancellation), ``in_flight``, ``prefetched`` (claimed, waiting
        for a slot), ``peak_in_flight`` and ``slow_reports`` (handlers reported for blocking the loop)."""
        return {**self._counts, "in_flight": self.in_flight, "prefetched": len(self._ready),
                "peak_in_flight": self.peak_in_flight, "slow_reports": self._slow.reports}

    async def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                room = self.concurrency + self.prefetch - len(self._running) - len(self._ready)
                if room <= 0:
                    self._freed.clear()
                    await self._wait_for(self._freed)
                    continue
                try:
                    held = await claim_held(self._jq, room, CLAIM_WAIT, block_leases=self._short_jobs())
                except QueueClosedError:
                    log.info("job queue %s closed: worker ends", self._jq.path)
                    break
                except Exception:
                    log.warning("claiming jobs of %s failed; again in %.1fs", self._jq.path, CLAIM_ERROR_PAUSE,
                                exc_info=True)
                    await self._wait_for(self._stopping, CLAIM_ERROR_PAUSE)
                    continue
                self._ready.extend(held)
                self._start_ready()
            self._give_back_ready()  # stop(): what was claimed ahead and not started goes back at once
            if self._running:  # stop(): drain
                await asyncio.gather(*list(self._running), return_exceptions=True)
        except asyncio.CancelledError:
            self._give_back_ready()
            running = list(self._running)
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            raise
        finally:
            await self._finisher.close()

    def _short_jobs(self) -> bool:
        """Whether jobs end soon enough here to hold them under block leases (see :meth:`JobQueue.claim_many`):
        the mean handler time so far (an exponential average) is at most :data:`BLOCK_LEASE_HANDLER_SECONDS`, unless
        the worker was told (``block_leases=True`` / ``False``)."""
        if self._block_leases is not None:
            return self._block_leases
        return self._mean_run is not None and self._mean_run <= BLOCK_LEASE_HANDLER_SECONDS

    def _note_run(self, seconds: float) -> None:
        self._mean_run = seconds if self._mean_run is None else 0.95 * self._mean_run + 0.05 * seconds

    def _start_ready(self) -> None:
        """Start claimed jobs while there are free slots (not once stop() was called)."""
        loop = asyncio.get_running_loop()
        while self._ready and len(self._running) < self.concurrency and not self._stopping.is_set():
            h = self._ready.popleft()
            task = loop.create_task(self._one(h), name=f"zkqueue-aio-job-{h.record.id}")
            self._running[task] = h
            task.add_done_callback(self._done)
        self.peak_in_flight = max(self.peak_in_flight, len(self._running))

    def _give_back_ready(self) -> None:
        """Jobs claimed ahead and not started go back with their attempt uncounted."""
        while self._ready:
            h = self._ready.popleft()
            self._counts["returned"] += 1
            self._finisher.finish(h, self._outcomes.unstarted(Claimed(h.record, h.version)))

    def _done(self, task: asyncio.Task[None]) -> None:
        h = self._running.pop(task, None)
        if h is not None and id(h) not in self._begun:  # cancelled before its first step: it never ran
            self._counts["returned"] += 1
            self._finisher.finish(h, self._outcomes.unstarted(Claimed(h.record, h.version)))
        elif h is not None:
            self._begun.discard(id(h))
        self._start_ready()
        self._freed.set()

    async def _one(self, held: HeldJob) -> None:
        self._begun.add(id(held))  # before any await: a task cancelled before this line is given back by _done
        record = held.record
        claimed = Claimed(record, held.version)
        timeout = record.timeout if record.timeout is not None else self._timeout
        limit = asyncio.timeout(timeout)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            job = self._outcomes.job(record)
            async with limit:
                call = self._handler(job)
                if not inspect.isawaitable(call):
                    raise TypeError(f"the handler returned {type(call).__name__}, not an awaitable")
                result = await (self._slow.timed(call, record.id) if inspect.iscoroutine(call) else call)
        except asyncio.CancelledError:  # the worker was cancelled (not the job's timeout): give the job back
            self._counts["released"] += 1
            self._finisher.release(held)
            raise
        except Exception as exc:
            self._note_run(loop.time() - started)
            if isinstance(exc, TimeoutError) and limit.expired():
                self._counts["timed_out"] += 1
                error: Exception = JobTimeoutError(f"job {record.id} ran past its timeout of {timeout:g} s")
                error.__cause__ = exc
            else:
                error = exc
            self._counts["failed"] += 1
            self._finisher.finish(held, self._outcomes.failure(claimed, error))
            return
        self._note_run(loop.time() - started)
        self._counts["completed"] += 1
        self._finisher.finish(held, self._outcomes.success(claimed, result))
