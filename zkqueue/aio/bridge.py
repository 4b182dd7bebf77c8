"""From kazoo's threads to the event loop: results, watches and connection states become asyncio futures and
events through ``loop.call_soon_threadsafe``; no thread is started per call.

Three ways across, in the order :mod:`zkqueue.aio` prefers them:

- :func:`from_kazoo`: a kazoo ``IAsyncResult`` (``get_async``, ``exists_async``, ``multi_read_async``...) becomes
  an asyncio future; kazoo's completion thread posts the outcome to the loop.
- :func:`to_loop`: a callable kazoo may call on any of its threads (a watch, a state listener) that runs the
  given function on the loop instead.
- :class:`Offloader`: the sync engine seams that have no async form (the exactly-once add, claims that wait for
  due items, fenced completions) run in ONE small thread pool per async queue, never a thread per call.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from zkqueue.errors import ConfigurationError

log = logging.getLogger("zkqueue.aio.bridge")

R = TypeVar("R")

__all__ = ["Offloader", "from_kazoo", "post", "to_loop"]


def _settle(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if fut.done():  # cancelled by its awaiter meanwhile
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


def post(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], value: Any = None,
         exc: BaseException | None = None) -> None:
    """Settle ``fut`` on ``loop`` from any thread (nothing happens once the loop is closed: nobody waits)."""
    try:
        loop.call_soon_threadsafe(_settle, fut, value, exc)
    except RuntimeError:  # the loop is closed
        pass


def from_kazoo(async_result: Any, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Future[Any]:
    """An asyncio future with the outcome of kazoo's ``async_result`` (value or exception), settled on ``loop``
    (the running loop by default) by kazoo's completion thread."""
    loop = loop or asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def done(res: Any) -> None:  # kazoo's completion thread
        if res.successful():
            post(loop, fut, res.value)
        else:
            post(loop, fut, None, res.exception)

    async_result.rawlink(done)
    return fut


def to_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any]) -> Callable[..., None]:
    """A callable for kazoo (a watch or a state listener, called on its threads) that runs ``fn`` with the same
    arguments on ``loop``; returns None (a kazoo listener that returns None stays registered)."""

    def call(*args: Any) -> None:
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed
            pass

    return call


class Offloader:
    """ONE small thread pool for the sync engine seams without an async form (see the module docs).

    ``threads`` bounds how many such calls run at once for the queue that owns it; calls beyond that wait in the
    pool's queue. :meth:`submit` returns an asyncio future; the call goes on in its thread even if the awaiter is
    cancelled, so callers that get resources back (claimed jobs) use :meth:`submit` with ``asyncio.shield`` and
    give back what a cancelled call returns.
    """

    def __init__(self, threads: int, name: str) -> None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ConfigurationError(f"executor_threads must be an int >= 1, got {threads!r}")
        self.threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
        self._closed = False

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The pool itself, for callers off the loop (a worker runtime's step ends)."""
        return self._pool

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> asyncio.Future[R]:
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def run(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        """``fn(*args, **kwargs)`` in the pool, awaited."""
        return await self.submit(fn, *args, **kwargs)

    def submit_detached(self, fn: Callable[..., Any], /, *args: Any) -> ThreadFuture[Any] | None:
        """Run ``fn(*args)`` in the pool with nobody awaiting it (giving back what a cancelled claim returned);
        its errors are logged. None once the pool is shut down."""
        if self._closed:
            return None

        def logged() -> Any:
            try:
                return fn(*args)
            except Exception:
                log.warning("a background call %s failed", getattr(fn, "__name__", fn), exc_info=True)
                return None

        try:
            return self._pool.submit(logged)
        except RuntimeError:  # shut down meanwhile
            return None

    def shutdown(self) -> None:
        """No new calls; calls already submitted finish in their threads (nothing is joined on the loop)."""
        self._closed = True
        self._pool.shutdown(wait=False)
