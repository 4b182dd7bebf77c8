"""Async workers: ``jq.work(handler, concurrency=200)`` runs coroutine handlers on the event loop, up to
``concurrency`` in flight, on the job layer's pull seams.

One claim loop per worker (a task on the loop) asks :meth:`JobQueue.claim_many` for as many jobs as there are free
slots; the claim (it waits for due jobs, and counts each attempt in a fenced multi) runs in the queue's
:class:`~zkqueue.aio.bridge.Offloader`, because the engine's pull mode has no async form. Each job runs as a task:
``await handler(job)``; its end is built by the job layer's own outcomes (completed with the result, retried after
a backoff, or dead) and committed by a finisher task that batches the ends of all jobs done meanwhile into one
engine call (``complete_nodes``, fenced by each job's lease), also in the offloader.

- **Timeouts.** A job added with ``timeout=`` (or the worker's default ``timeout``) whose handler is still running
  after that many seconds is cancelled (``asyncio.timeout``); the attempt fails with :class:`JobTimeoutError`,
  retried or dead-lettered by the queue's :class:`~zkqueue.jobs.RetryPolicy`.
- **Cancellation.** Cancelling the worker's task (:attr:`AsyncWorker.task`) cancels every running handler and gives
  their jobs back untouched (``release``): they run again at once elsewhere, their claimed attempt counted. Ends
  already decided are committed first.
- **stop()** stops claiming, lets running handlers finish, commits their ends and gives back nothing else (a
  worker holds no job it has not started).
- **Blocking handlers** are reported once per job id (:mod:`zkqueue.aio.watchdog`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Awaitable, Callable

from zkqueue.aio.held import Finisher, JobSource, claim_held
from zkqueue.aio.watchdog import SlowSteps
from zkqueue.errors import ConfigurationError, QueueClosedError, ZkQueueError
from zkqueue.jobs.claims import Claimed
from zkqueue.jobs.model import Job, check_timeout
from zkqueue.jobs.scope import HeldJob

log = logging.getLogger("zkqueue.aio.worker")

#: Seconds one claim waits for a due job before the claim loop looks at stop() again.
CLAIM_WAIT = 0.5
#: Seconds to wait after a claim failed (e.g. the connection is lost) before the next one.
CLAIM_ERROR_PAUSE = 1.0

AsyncHandler = Callable[[Job], Awaitable[Any]]


class JobTimeoutError(ZkQueueError, TimeoutError):
    """A job's handler ran past its ``timeout`` and was cancelled: the attempt failed (what the record keeps)."""


class AsyncWorker:
    """Coroutine handlers of one job queue on the running loop (see the module docs). Made by
    :meth:`AsyncJobQueue.work <zkqueue.aio.AsyncJobQueue.work>`; ``await worker.stop()`` drains it. ``jq`` is the
    queue it claims from; ``on_stopped`` is called with the worker once :meth:`stop` has drained it (the queue
    forgets it)."""

    def __init__(self, jq: JobSource, handler: AsyncHandler, concurrency: int, timeout: float | None,
                 slow_after: float | None, on_stopped: Callable[[AsyncWorker], None] | None = None) -> None:
        if not callable(handler):
            raise ConfigurationError(f"handler must be an async callable, got {handler!r}")
        if not (inspect.iscoroutinefunction(handler)
                or inspect.iscoroutinefunction(getattr(handler, "__call__", None))):
            raise ConfigurationError(f"handler must be a coroutine function (async def), got {handler!r}; "
                                     "thread handlers go to JobQueue.work")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if slow_after is not None and not slow_after > 0:
            raise ConfigurationError(f"slow_after must be seconds > 0 or None, got {slow_after!r}")
        self._jq = jq
        self._on_stopped = on_stopped
        self._handler = handler
        self._outcomes = jq.sync.outcomes  # the job layer's own ends: same records, tallies and logs
        self.concurrency = concurrency
        self._timeout = check_timeout(timeout)
        self._slow = SlowSteps(slow_after, jq.path)
        self._finisher = Finisher(jq)
        self._running: set[asyncio.Task[None]] = set()
        self._freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._counts = {"completed": 0, "failed": 0, "timed_out": 0, "released": 0}
        self.peak_in_flight = 0
        #: The claim loop's task: cancel it to stop at once (running jobs are given back), await it to wait.
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            self._run(), name=f"zkqueue-aio-worker-{jq.path}")

    @property
    def in_flight(self) -> int:
        """Handlers running now."""
        return len(self._running)

    def stats(self) -> dict[str, int]:
        """This worker's jobs so far: ``completed``, ``failed`` (attempts that raised or timed out),
        ``timed_out``, ``released`` (given back by a cancellation), ``in_flight``, ``peak_in_flight`` and
        ``slow_reports`` (handlers reported for blocking the loop)."""
        return {**self._counts, "in_flight": self.in_flight, "peak_in_flight": self.peak_in_flight,
                "slow_reports": self._slow.reports}

    async def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                free = self.concurrency - len(self._running)
                if free <= 0:
                    self._freed.clear()
                    await self._wait_for(self._freed)
                    continue
                try:
                    held = await claim_held(self._jq, free, CLAIM_WAIT)
                except QueueClosedError:
                    log.info("job queue %s closed: worker ends", self._jq.path)
                    break
                except Exception:
                    log.warning("claiming jobs of %s failed; again in %.1fs", self._jq.path, CLAIM_ERROR_PAUSE,
                                exc_info=True)
                    await self._wait_for(self._stopping, CLAIM_ERROR_PAUSE)
                    continue
                for h in held:
                    if self._stopping.is_set():
                        self._finisher.release(h)
                        continue
                    task = asyncio.get_running_loop().create_task(self._one(h), name=f"zkqueue-aio-job-{h.record.id}")
                    self._running.add(task)
                    task.add_done_callback(self._done)
                self.peak_in_flight = max(self.peak_in_flight, len(self._running))
            if self._running:  # stop(): drain
                await asyncio.gather(*list(self._running), return_exceptions=True)
        except asyncio.CancelledError:
            running = list(self._running)
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            raise
        finally:
            await self._finisher.close()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._freed.set()

    async def _wait_for(self, event: asyncio.Event, timeout: float | None = None) -> None:
        """Until ``event`` or stop() (or ``timeout`` seconds)."""
        waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self._stopping.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _one(self, held: HeldJob) -> None:
        record = held.record
        claimed = Claimed(record, held.version)
        timeout = record.timeout if record.timeout is not None else self._timeout
        limit = asyncio.timeout(timeout)
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
            if isinstance(exc, TimeoutError) and limit.expired():
                self._counts["timed_out"] += 1
                error: Exception = JobTimeoutError(f"job {record.id} ran past its timeout of {timeout:g} s")
                error.__cause__ = exc
            else:
                error = exc
            self._counts["failed"] += 1
            self._finisher.finish(held, self._outcomes.failure(claimed, error))
            return
        self._counts["completed"] += 1
        self._finisher.finish(held, self._outcomes.success(claimed, result))

    async def stop(self) -> None:
        """Stop claiming, let the running handlers finish, commit their ends. Idempotent; returns when done."""
        self._stopping.set()
        await asyncio.gather(self.task, return_exceptions=True)
        if self._on_stopped is not None:
            self._on_stopped(self)

    def __await__(self) -> Any:
        return self.task.__await__()

    async def __aenter__(self) -> AsyncWorker:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.stop()
