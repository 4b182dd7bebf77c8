"""Async workers: ``jq.work(handler, concurrency=200)`` runs coroutine handlers on the running event loop, up to
``concurrency`` in flight, on the one worker runtime (:mod:`zkqueue.runtime`).

The runtime's claimers, dispatcher and finisher (threads) claim jobs ahead of free slots (``prefetch``, default
``concurrency``; no attempt counted until a job starts), count each attempt as its job starts, and commit the ends
in batches, fenced by each job's lease; its asyncio driver runs each job as a task of this loop: ``await
handler(job)``. So timeouts, stop and give-back mean what they mean for ``JobQueue.work`` and ``zkqueue worker``:

- **Timeouts.** A job added with ``timeout=`` (or the worker's default ``timeout``) whose handler is still running
  after that many seconds is cancelled; the attempt fails with :class:`~zkqueue.errors.JobTimeoutError`, retried or
  dead-lettered by the queue's :class:`~zkqueue.jobs.RetryPolicy`.
- **Cancellation.** Cancelling the worker's task (:attr:`AsyncWorker.task`) cancels every running handler and gives
  their jobs back (their attempt counted); jobs claimed ahead go back uncounted. Ends already decided are committed
  first.
- **stop(timeout)** stops claiming, gives back the jobs claimed ahead (uncounted: they never ran), lets running
  handlers finish within ``timeout`` seconds (then gives them back, as a cancellation does) and commits their ends.
- **Blocking handlers** are reported once per job id (:mod:`zkqueue.aio.watchdog`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Awaitable, Callable

from zkqueue.aio.lifecycle import WorkerTask
from zkqueue.aio.watchdog import SlowSteps
from zkqueue.errors import ConfigurationError, JobTimeoutError  # JobTimeoutError: importable here as before
from zkqueue.jobs.model import Job
from zkqueue.runtime import AsyncioDriver, Route, Worker

log = logging.getLogger("zkqueue.aio.worker")

AsyncHandler = Callable[[Job], Awaitable[Any]]


class AsyncWorker(WorkerTask["AsyncWorker"]):
    """Coroutine handlers of one job queue on the running loop (see the module docs). Made by
    :meth:`AsyncJobQueue.work <zkqueue.aio.AsyncJobQueue.work>`; ``await worker.stop()`` drains it. ``jq`` is the
    async queue it works for (its ``sync`` job queue is claimed from); ``on_stopped`` is called with the worker once
    :meth:`stop` has drained it (the queue forgets it)."""

    def __init__(self, jq: Any, handler: AsyncHandler, concurrency: int, timeout: float | None,
                 slow_after: float | None, on_stopped: Callable[[AsyncWorker], None] | None = None,
                 prefetch: int | None = None, block_leases: bool | None = None) -> None:
        if not callable(handler):
            raise ConfigurationError(f"handler must be an async callable, got {handler!r}")
        if not (inspect.iscoroutinefunction(handler)
                or inspect.iscoroutinefunction(getattr(handler, "__call__", None))):
            raise ConfigurationError(f"handler must be a coroutine function (async def), got {handler!r}; "
                                     "thread handlers go to JobQueue.work")
        super().__init__(on_stopped, concurrency, slow_after)
        self._jq = jq
        self._handler = handler
        self._slow = SlowSteps(slow_after, jq.path)
        driver = AsyncioDriver(loop=asyncio.get_running_loop())
        self._runtime = Worker([jq.sync], lambda _queue, _job: Route(driver, self._call), [driver],
                               concurrency=concurrency, prefetch=prefetch, timeout=timeout,
                               block_leases=block_leases, name=f"zkqueue-aio-{jq.path}")
        #: Jobs claimed ahead of free slots (see the module docs).
        self.prefetch = self._runtime.prefetch
        self._runtime.start()
        self._begin(self._runtime, f"zkqueue-aio-worker-{jq.path}")

    def _call(self, job: Job) -> Awaitable[Any]:
        call = self._handler(job)
        if not inspect.isawaitable(call):
            raise TypeError(f"the handler returned {type(call).__name__}, not an awaitable")
        return self._slow.timed(call, job.id) if inspect.iscoroutine(call) else call

    @property
    def in_flight(self) -> int:
        """Handlers running now."""
        return self._runtime.in_flight

    @property
    def uses_block_leases(self) -> bool:
        """Whether claims take block leases now (``block_leases``; None: once handlers prove short)."""
        return self._runtime.uses_block_leases

    @property
    def peak_in_flight(self) -> int:
        """The most handlers that ran at once."""
        return self._runtime.peak_in_flight

    def stats(self) -> dict[str, int]:
        """This worker's jobs so far: ``completed``, ``failed`` (attempts that raised or timed out),
        ``timed_out``, ``released`` (running handlers given back by a cancellation or a cold stop), ``returned``
        (claimed ahead and given back unstarted), ``in_flight``, ``prefetched`` (claimed, waiting for a slot),
        ``peak_in_flight`` and ``slow_reports`` (handlers reported for blocking the loop)."""
        s = self._runtime.stats()
        return {"completed": s["completed"], "failed": s["failed"] + s["timed_out"], "timed_out": s["timed_out"],
                "released": s["given_back"], "returned": s["returned"], "in_flight": s["in_flight"],
                "prefetched": s["held"], "peak_in_flight": self._runtime.peak_in_flight,
                "slow_reports": self._slow.reports}


__all__ = ["AsyncHandler", "AsyncWorker", "JobTimeoutError"]
