"""The asyncio driver: coroutine handlers (async tasks) run on one event loop in a thread of the worker.

Each attempt is a task on that loop (``await call(job)``); a timeout or a cold stop cancels it. A handler that
blocks the loop holds every other coroutine job of the worker: the loop's slow-callback report is on.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading

from zkqueue.errors import ConfigurationError
from zkqueue.runtime.attempt import RAN, Attempt

log = logging.getLogger("zkqueue.runtime.loop")


class AsyncioDriver:
    """Runs attempts as tasks of an event loop: a loop of its own on a thread (``zkqueue-loop``), or ``loop``, a
    running loop of the caller's (:mod:`zkqueue.aio` workers run their handlers on the application's loop)."""

    name = "asyncio"

    def __init__(self, thread_name: str = "zkqueue-loop", *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._own = loop is None
        self._loop = loop if loop is not None else asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=thread_name, daemon=True)

    def start(self, concurrency: int) -> None:
        if self._own:
            self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    def submit(self, attempt: Attempt) -> None:
        """Schedule ``attempt`` on the loop; RuntimeError if the loop is closed."""
        coro = self._run(attempt)
        try:
            attempt.driver_state = asyncio.run_coroutine_threadsafe(coro, self._loop)
        except BaseException:
            coro.close()  # never scheduled
            raise

    async def _run(self, attempt: Attempt) -> None:
        if not attempt.begin():  # settled before it began (a cold stop): never run
            return
        try:
            value = attempt.call(attempt.job)
            if not inspect.isawaitable(value):
                raise ConfigurationError(f"job {attempt.label}'s handler returned {type(value).__name__}, not an "
                                         "awaitable: sync handlers run on the thread or process driver")
            value = await value
        except asyncio.CancelledError:
            if attempt.settled:  # cancelled by its timeout or a cold stop: settled already
                return
            attempt.settle(RAN, error=asyncio.CancelledError(f"job {attempt.label}'s handler was cancelled"))
            return
        except BaseException as exc:  # noqa: BLE001 - any exit of a handler is that attempt's failure
            attempt.settle(RAN, error=exc)
            return
        attempt.settle(RAN, result=value)

    def abandon(self, attempt: Attempt) -> None:
        """Cancel ``attempt``'s task (timeout, cold stop)."""
        future = attempt.driver_state
        if future is not None:
            future.cancel()

    def cancel(self, attempt: Attempt) -> None:
        """A cancel of ``attempt``'s job was requested: cancel its task (the attempt then ends CANCELLED)."""
        self.abandon(attempt)

    def close(self, wait: float | None = None) -> None:
        if self._own and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(wait)


__all__ = ["AsyncioDriver"]
