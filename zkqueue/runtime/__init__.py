"""The one worker runtime (:mod:`zkqueue.runtime.worker`): a claim loop with slots, claims ahead, timeouts, give-back
on stop and batched ends, and the drivers that run handlers on threads, child processes or an event loop.

``JobQueue.work`` and ``zkqueue worker`` are configurations of it::

    from zkqueue.runtime import for_handler
    worker = for_handler([jq], handler, pool="process", concurrency=2).start()
    ...
    worker.stop(timeout=30)
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

from zkqueue.errors import ConfigurationError
from zkqueue.runtime.attempt import Attempt
from zkqueue.runtime.loop import AsyncioDriver
from zkqueue.runtime.processes import ProcessDriver
from zkqueue.runtime.threads import ThreadDriver
from zkqueue.runtime.worker import CLAIM_WAIT, DEFAULT_STOP_TIMEOUT, Driver, Route, Worker

#: The pools a worker can run sync handlers on.
POOLS: dict[str, type[Any]] = {"thread": ThreadDriver, "process": ProcessDriver}


def is_async(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` is a coroutine function (or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None))


def pool_driver(pool: str, name: str = "zkqueue") -> Driver:
    """A driver for sync handlers: ``"thread"`` or ``"process"``."""
    if pool not in POOLS:
        raise ConfigurationError(f"pool must be one of {sorted(POOLS)}, got {pool!r}")
    return POOLS[pool](f"{name}-{pool}")  # type: ignore[no-any-return]


def for_handler(queues: Sequence[Any], handler: Callable[..., Any], *, pool: str = "thread", **options: Any
                ) -> Worker:
    """A worker (not started) running ``handler(job)`` for the jobs of ``queues``: a coroutine function on an
    event loop, else on ``pool`` (``"thread"`` or ``"process"``: then ``handler`` must pickle). ``options``: see
    :class:`Worker`."""
    if not callable(handler):
        raise ConfigurationError(f"handler must be callable, got {handler!r}")
    driver = AsyncioDriver() if is_async(handler) else pool_driver(pool)
    route = Route(driver, handler)
    return Worker(queues, lambda _queue, _job: route, [driver], **options)


__all__ = ["AsyncioDriver", "Attempt", "CLAIM_WAIT", "DEFAULT_STOP_TIMEOUT", "Driver", "POOLS", "ProcessDriver",
           "Route", "ThreadDriver", "Worker", "for_handler", "is_async", "pool_driver"]
