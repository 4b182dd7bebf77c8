"""What the async classes share. Workers (:class:`WorkerTask`): a task on the loop that runs a worker until
:meth:`WorkerTask.stop` (``await worker.stop()`` or ``async with worker``), awaitable as that task. Queues and
flows (:class:`Opened`): ``async with`` over ``start()`` and ``close()``."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Generic, Protocol, TypeVar

from zkqueue.errors import ConfigurationError, QueueClosedError
from zkqueue.jobs.queue import DEFAULT_STOP_TIMEOUT

W = TypeVar("W", bound="WorkerTask[Any]")


class Stoppable(Protocol):
    """What a worker task drives (a :class:`~zkqueue.runtime.Worker`, a flow worker): a warm ``stop(timeout)``
    that turns cold after ``timeout`` seconds, and ``kill()`` to make it cold at once."""

    def stop(self, timeout: float | None = ...) -> bool: ...

    def kill(self) -> None: ...


class WorkerTask(Generic[W]):
    """Base of :class:`~zkqueue.aio.worker.AsyncWorker` and :class:`~zkqueue.aio.flow_worker.AsyncFlowWorker`.
    A subclass calls :meth:`_begin` at the end of ``__init__`` with the :class:`Stoppable` its task drives; the
    task ends once :meth:`stop` has drained it, or at once when the task is cancelled."""

    task: asyncio.Task[None]

    def __init__(self, on_stopped: Callable[[Any], None] | None, concurrency: int, slow_after: float | None) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if slow_after is not None and not slow_after > 0:
            raise ConfigurationError(f"slow_after must be seconds > 0 or None, got {slow_after!r}")
        #: Handlers in flight at most.
        self.concurrency = concurrency
        self._on_stopped = on_stopped
        self._stopping = asyncio.Event()
        self._stop_timeout: float | None = DEFAULT_STOP_TIMEOUT

    def _begin(self, driven: Stoppable, name: str) -> None:
        #: The worker's task: cancel it to stop at once (running jobs are given back), await it to wait.
        self.task = asyncio.get_running_loop().create_task(self._drive(driven), name=name)

    async def _drive(self, driven: Stoppable) -> None:
        loop = asyncio.get_running_loop()
        try:
            await self._stopping.wait()
            await loop.run_in_executor(None, driven.stop, self._stop_timeout)
        except asyncio.CancelledError:  # give back what runs (its attempt counted) and what is held (uncounted)
            driven.kill()
            await asyncio.shield(loop.run_in_executor(None, driven.stop, 0.0))
            raise

    async def stop(self, timeout: float | None = DEFAULT_STOP_TIMEOUT) -> None:
        """Stop claiming, give back the jobs claimed ahead (uncounted), let the running handlers finish and commit
        their ends within ``timeout`` seconds (None: as long as they take; then they are given back, their attempt
        counted). Idempotent; returns when done."""
        self._stop_timeout = timeout
        self._stopping.set()
        await asyncio.gather(self.task, return_exceptions=True)
        if self._on_stopped is not None:
            self._on_stopped(self)

    def __await__(self) -> Any:
        return self.task.__await__()

    async def __aenter__(self: W) -> W:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.stop()


S = TypeVar("S", bound="Opened")


class Opened:
    """``async with`` over ``start()`` / ``close()`` for the async queues and flows, and the check that calls
    needing a started object make (``kind`` names the object in its errors)."""

    kind = "object"
    _state = "new"

    @property
    def path(self) -> str:
        raise NotImplementedError

    async def start(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: S) -> S:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._state == "closed":
            raise QueueClosedError(f"{self.kind} {self.path} is closed")
        if self._state != "started":
            raise ConfigurationError(f"{self.kind} {self.path} is not started; use 'async with' or await start()")
