"""AsyncProgressConsumer: the ordered consumer of :mod:`zkqueue.progress` with a coroutine worker run on the loop.

It wraps a :class:`~zkqueue.progress.ProgressConsumer` (:attr:`AsyncProgressConsumer.sync`) whose jobs run on the
event loop instead of a thread pool (its ``runner`` seam, :mod:`zkqueue.progress.runner`). Everything else is
the sync consumer's own: the election and failover, the window (``max_processing``, ``max_search_ahead``), the
processed index stored with compare-and-set, retries with the policy's backoff and ``on_stuck``, exactly-once
hand-offs. Its one coordinator thread stays a thread: it waits on the election, the source and the store.

```python
async def verify(index: int, job: bytes) -> None: ...      # or (index, job, ctx): ctx.append_and_done is awaited

async with AsyncProgressConsumer(client, jobs=log, progress_path="/progress/verifier", worker=verify,
                                 max_processing=100) as c:
    await c.wait_processed(target, timeout=60)
```

- Up to ``max_processing`` worker coroutines run at once on the loop that called :meth:`start`.
- A failing run is retried after the policy's backoff (a loop sleep); a job is never skipped.
- :meth:`stop` lets running jobs finish their current run and stores the processed index; it blocks only the
  thread pool, not the loop. It returns once every worker coroutine has returned, those of a term that ended
  with a lost session too (they are waited for, not cancelled). Jobs the loop cancels outside of a stop (e.g.
  the loop shuts down) are not finished: the consumer steps down and the jobs above the stored index run again.
- A term elected again after a lost session starts no coroutine until those of the term before it have returned
  (the sync consumer's coordinator decides): one job never runs twice at once, nor more than ``max_processing``
  coroutines at once.
- :meth:`wait_processed` waits on the consumer's progress callback, bridged to the loop (no polling).
- ``start``, ``stop``, ``leader`` and ``ctx.append_and_done`` run in ONE small thread pool (``executor_threads``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from typing import Any, Awaitable, Callable

from kazoo.client import KazooClient

from zkqueue.aio.bridge import Offloader, to_loop
from zkqueue.aio.watchdog import SlowSteps
from zkqueue.errors import ConfigurationError, QueueStateError
from zkqueue.jobs.queue import DEFAULT_STOP_TIMEOUT
from zkqueue.progress.attempts import StuckCallback
from zkqueue.progress.consumer import ProgressConsumer, ProgressStats
from zkqueue.progress.context import JobContext
from zkqueue.progress.log import JobLog
from zkqueue.progress.runner import DriverRunner, JobTask
from zkqueue.runtime.loop import AsyncioDriver

log = logging.getLogger("zkqueue.aio.progress")

AsyncProgressWorker = Callable[..., Awaitable[Any]]


class AsyncJobContext:
    """The third argument of a worker that takes three: the job's ``index`` and ``attempt``, and the hand-offs of
    :class:`~zkqueue.progress.JobContext`, awaited (they run in the consumer's thread pool). ``sync`` is the
    wrapped context."""

    def __init__(self, sync: JobContext, offloader: Offloader) -> None:
        self.sync = sync
        self._off = offloader

    @property
    def index(self) -> int:
        return self.sync.index

    @property
    def attempt(self) -> int:
        return self.sync.attempt

    async def append(self, job_log: JobLog, items: bytes | Sequence[bytes]) -> list[int]:
        """:meth:`JobContext.append` (at-least-once)."""
        return await self._off.run(self.sync.append, job_log, items)

    async def append_and_done(self, job_log: JobLog, items: bytes | Sequence[bytes] = ()) -> list[int]:
        """:meth:`JobContext.append_and_done`: the append and this job's done marker in one multi (exactly
        once). Shielded: once sent, it is carried through even if the awaiting task is cancelled."""
        return await asyncio.shield(self._off.submit(self.sync.append_and_done, job_log, items))


class _LoopRunner(DriverRunner):
    """Runs coroutine workers as tasks of the caller's event loop, on the runtime's asyncio driver."""

    def __init__(self, worker: AsyncProgressWorker, progress_path: str, slow_after: float | None) -> None:
        super().__init__(None, self._run, progress_path, interrupted=_stopped)
        self._worker = worker
        self._slow = SlowSteps(slow_after, progress_path)
        self._off: Offloader | None = None

    def bind(self, loop: asyncio.AbstractEventLoop, offloader: Offloader) -> None:
        self._driver = AsyncioDriver(loop=loop)
        self._off = offloader

    def start(self, max_processing: int) -> None:
        if self._driver is None:
            raise QueueStateError("the async progress consumer is started with 'await start()'")
        super().start(max_processing)

    def submit(self, task: JobTask) -> None:  # the coordinator's thread
        try:
            super().submit(task)
        except RuntimeError:  # the loop is closed: nobody will run it
            task.finished(None)

    async def _run(self, task: JobTask) -> bool:
        assert self._off is not None
        run = task.open()
        args = task.args if task.context is None else (task.index, task.job, AsyncJobContext(task.context, self._off))
        return await run.run_async(lambda attempt: self._call_worker(args, task.index))

    async def _call_worker(self, args: tuple[Any, ...], index: int) -> Any:
        call = self._worker(*args)
        if not inspect.isawaitable(call):
            raise TypeError(f"the worker returned {type(call).__name__}, not an awaitable")
        return await (self._slow.timed(call, str(index)) if inspect.iscoroutine(call) else call)

    def shutdown(self) -> None:  # any thread: cancel what is left (runs still going when a stop's timeout ran out)
        if self._driver is not None:
            for attempt in self._left():
                self._driver.abandon(attempt)
        super().shutdown()

    @property
    def slow_reports(self) -> int:
        return self._slow.reports


def _stopped(task: JobTask, error: BaseException) -> bool:
    """A cancelled run is a stop's leftover (unfinished) once its term is over; any other cancellation makes the
    consumer step down."""
    return isinstance(error, asyncio.CancelledError) and task.run is not None and not task.run.keep_going()


def _is_coroutine_function(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


class AsyncProgressConsumer:
    """Runs ``await worker(index, job)`` (or ``await worker(index, job, ctx)``, ctx an :class:`AsyncJobContext`)
    for every job of ``jobs`` above the stored processed index, in index order, on the running loop, and stores
    the processed index at ``progress_path`` (see the module docs).

    Every keyword of :class:`~zkqueue.progress.ProgressConsumer` (``max_processing``, ``max_search_ahead``,
    ``default_index``, ``retry``, ``progress_interval``, ``progress_batch``, ``poll_interval``, ``on_stuck``,
    ``with_context``, ``identifier``) is passed on. ``slow_after``: a worker step that blocks the loop longer is
    reported once per job (:mod:`zkqueue.aio.watchdog`); ``executor_threads`` sizes the thread pool.
    """

    def __init__(self, client: KazooClient, jobs: Any, progress_path: str, worker: AsyncProgressWorker, *,
                 executor_threads: int = 2, slow_after: float | None = 0.1, **options: Any) -> None:
        if not _is_coroutine_function(worker):
            raise ConfigurationError(f"worker must be a coroutine function (async def), got {worker!r}; thread "
                                     "workers go to ProgressConsumer")
        if slow_after is not None and not slow_after > 0:
            raise ConfigurationError(f"slow_after must be seconds > 0 or None, got {slow_after!r}")
        if "runner" in options:
            raise ConfigurationError("an async progress consumer runs its jobs on the loop; runner is not an option")
        self._runner = _LoopRunner(worker, progress_path, slow_after)
        #: The sync consumer this one wraps: its coordinator, election and store, with jobs run on the loop.
        self.sync = ProgressConsumer(client, jobs, progress_path, worker, runner=self._runner, **options)
        self.offloader = Offloader(executor_threads, f"zkqueue-aio-progress-{progress_path}")
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._state = "new"

    @property
    def progress_path(self) -> str:
        return self.sync.progress_path

    # ------------------------------------------------------------------------------------------ lifecycle
    async def start(self) -> AsyncProgressConsumer:
        """Join the election and, once active, run jobs on this loop (returns at once)."""
        if self._state != "new":
            raise QueueStateError(f"consumer is {self._state}; a consumer starts once")
        self._state = "started"
        loop = asyncio.get_running_loop()
        self._runner.bind(loop, self.offloader)
        self.sync.on_progress(to_loop(loop, self._progressed))
        await self.offloader.run(self.sync.start)
        return self

    async def stop(self, timeout: float | None = DEFAULT_STOP_TIMEOUT) -> None:
        """:meth:`ProgressConsumer.stop`: stop starting jobs, let running ones finish their current run (on this
        loop), store the processed index, leave the election. Returns once every worker coroutine returned, those
        of a term lost with the session included; past ``timeout`` the ones left are cancelled. Waits in the
        thread pool; a cancelled caller does not cut it short. Idempotent."""
        if self._state != "started":
            self._state = "closed"
            return
        self._state = "closing"
        try:
            await asyncio.shield(self.offloader.submit(self.sync.stop, timeout))
        finally:
            self._state = "closed"
            self.offloader.shutdown()

    close = stop

    async def __aenter__(self) -> AsyncProgressConsumer:
        return await self.start()

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.stop()

    # ------------------------------------------------------------------------------------------ waiting
    def _progressed(self, index: int) -> None:  # on the loop
        ready = [(i, f) for i, f in self._waiters if i <= index]
        for entry in ready:
            self._waiters.remove(entry)
            if not entry[1].done():
                entry[1].set_result(None)

    async def wait_processed(self, index: int, timeout: float | None = None) -> bool:
        """Until ``processed_index >= index``; whether it got there within ``timeout`` seconds. Waits on the
        consumer's progress callback (no polling, no thread)."""
        processed = self.sync.processed_index
        if processed is not None and processed >= index:
            return True
        entry = (index, asyncio.get_running_loop().create_future())
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):
                await entry[1]
            return True
        except TimeoutError:
            return False
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    # ------------------------------------------------------------------------------------------ looking
    def check(self) -> None:
        """New jobs may be there (:meth:`ProgressConsumer.check`; no I/O here)."""
        self.sync.check()

    @property
    def processed_index(self) -> int | None:
        return self.sync.processed_index

    @property
    def stored_index(self) -> int | None:
        return self.sync.stored_index

    @property
    def is_active(self) -> bool:
        return self.sync.is_active

    @property
    def running(self) -> int:
        """Worker coroutines running now (including those waiting for a retry)."""
        return self._runner.running

    @property
    def peak_running(self) -> int:
        """The most worker coroutines that ran at once."""
        return self._runner.peak

    @property
    def slow_reports(self) -> int:
        """Jobs whose worker was reported for blocking the loop."""
        return self._runner.slow_reports

    async def leader(self) -> str | None:
        """The identifier of the active process, if any (read in the thread pool)."""
        return await self.offloader.run(self.sync.leader)

    def stats(self) -> ProgressStats:
        return self.sync.stats()

    def on_progress(self, callback: Callable[[int], None]) -> None:
        """``callback(processed_index)`` after the processed index moved, on the consumer's coordinator thread
        (use :func:`zkqueue.aio.bridge.to_loop` to run it on a loop)."""
        self.sync.on_progress(callback)

    def on_stuck(self, callback: StuckCallback) -> None:
        """``callback(index, error, attempts)`` once a job failed as often as the retry policy allows (called
        on the loop, from the failing job's task)."""
        self.sync.on_stuck(callback)

    def on_error(self, callback: Callable[[BaseException], None]) -> None:
        """``callback(error)`` for errors of the source, the store or the election (coordinator thread)."""
        self.sync.on_error(callback)

    def __repr__(self) -> str:
        return f"AsyncProgressConsumer(progress_path={self.progress_path!r})"


__all__ = ["AsyncJobContext", "AsyncProgressConsumer"]
