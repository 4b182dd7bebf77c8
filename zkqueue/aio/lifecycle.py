"""What the async classes share. Workers (:class:`WorkerTask`): a task on the loop that runs a worker until
:meth:`WorkerTask.stop` (``await worker.stop()`` or ``async with worker``), awaitable as that task. Queues and
flows (:class:`Opened`): ``async with`` over ``start()`` and ``close()``."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Generic, TypeVar

from zkqueue.errors import ConfigurationError, QueueClosedError

W = TypeVar("W", bound="WorkerTask[Any]")


class WorkerTask(Generic[W]):
    """Base of :class:`~zkqueue.aio.worker.AsyncWorker` and :class:`~zkqueue.aio.flow_worker.AsyncFlowWorker`.
    A subclass calls :meth:`_begin` with its task's coroutine at the end of ``__init__``; the coroutine ends
    once ``_stopping`` is set and the worker is drained."""

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

    def _begin(self, run: Any, name: str) -> None:
        #: The worker's task: cancel it to stop at once (running jobs are given back), await it to wait.
        self.task = asyncio.get_running_loop().create_task(run, name=name)

    async def stop(self) -> None:
        """Stop claiming, let the running handlers finish, commit their ends. Idempotent; returns when done."""
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
