"""How a queue consumes: ONE factory, :func:`build_consumption`, for push and pull consumption.

- **push** (a queue built with a consumer): at ``start()``, a run loop on its own thread takes due nodes (no-lock:
  :class:`~zkqueue.engine.nolock.NoLockTaker`; with a lock path: :class:`~zkqueue.engine.locksafe.LeaseTaker`),
  delivers them to the consumer (:class:`~zkqueue.engine.delivery.Delivery`) and completes them;
- **pull** (a lock-safe queue built without a consumer): at the first ``claim_nodes``, a
  :class:`~zkqueue.engine.pull.Puller` over a lazily listing children cache and a lease taker that delivers to
  nobody; the caller completes or releases what it claimed.

Which one a queue gets depends only on whether it has a consumer; pull needs a lock path.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from zkqueue.consumer import ErrorMode, QueueConsumer
from zkqueue.engine.children import ChildrenCache
from zkqueue.engine.config import QueueConfig
from zkqueue.engine.context import QueueContext
from zkqueue.engine.delivery import Delivery
from zkqueue.engine.locksafe import LeaseTaker
from zkqueue.engine.nolock import NoLockTaker
from zkqueue.engine.pull import Puller
from zkqueue.engine.quarantine import Quarantine
from zkqueue.engine.run_loop import RunLoop
from zkqueue.engine.steps import StepSizer
from zkqueue.errors import ConfigurationError

#: Why a queue cannot be consumed in pull mode.
PULL_NEEDS = "pull mode (claim_nodes) needs a lock path and no consumer"


@dataclass(frozen=True)
class Hooks:
    """The queue's naming and ordering hooks (recipes override them) and its current error mode."""

    sort_children: Callable[[list[str]], list[str]]
    get_delay: Callable[[str], float]
    order_key: Callable[[str], Any] | None
    requeue_prefix: Callable[[str], str]
    error_mode: Callable[[], ErrorMode]


@dataclass(frozen=True)
class Consumption:
    """What consumes one started queue: ``loop`` and ``thread`` in push mode, ``puller`` in pull mode; the
    ``lease_taker`` of a lock-safe queue (acks, flushes, close) and the ``cache`` of its children in both."""

    cache: ChildrenCache
    lease_taker: LeaseTaker | None = None
    loop: RunLoop | None = None
    thread: threading.Thread | None = None
    puller: Puller | None = None


def build_consumption(ctx: QueueContext, config: QueueConfig, serializer: Any, hooks: Hooks,
                      consumer: QueueConsumer[Any] | None, cache: ChildrenCache | None) -> Consumption:
    """Build and start the queue's consumption: push with a ``consumer`` (``cache`` is the started one the queue
    shares with its producer), pull without one (``cache``, if the queue has one already, is reused; else a lazy
    one is started). ConfigurationError for pull mode without a lock path."""
    if consumer is not None:
        assert cache is not None
        return _push(ctx, config, serializer, hooks, consumer, cache)
    if config.lock_path is None:
        raise ConfigurationError(PULL_NEEDS)
    if cache is None:
        cache = ChildrenCache(ctx.client, ctx.queue_path, name=f"zkqueue-cache-{ctx.queue_path}", lazy=True,
                              acl=ctx.acl)
        cache.start()
    taker = _lease_taker(ctx, config, serializer, hooks, None, StepSizer(config.max_batch_bytes, lambda: None))
    puller = Puller(ctx, cache, taker, sort_children=hooks.sort_children, get_delay=hooks.get_delay,
                    order_key=hooks.order_key, serializer=serializer)
    return Consumption(cache, lease_taker=taker, puller=puller)


def _lease_taker(ctx: QueueContext, config: QueueConfig, serializer: Any, hooks: Hooks, delivery: Delivery | None,
                 sizer: StepSizer) -> LeaseTaker:
    taker = LeaseTaker(ctx, serializer, delivery, Quarantine(ctx), sizer, error_mode=hooks.error_mode,
                       requeue_prefix=hooks.requeue_prefix, claim_hook=config.claim_hook)
    taker.start()
    return taker


def _push(ctx: QueueContext, config: QueueConfig, serializer: Any, hooks: Hooks, consumer: QueueConsumer[Any],
          cache: ChildrenCache) -> Consumption:
    delivery = Delivery(ctx, consumer, config.executor, error_mode=hooks.error_mode, serializer=serializer)
    sizer = StepSizer(config.max_batch_bytes, lambda: delivery.pace)
    taker: Any
    lease_taker: LeaseTaker | None = None
    lease_hooks: dict[str, Any] = {}
    if config.lock_path is None:
        taker = NoLockTaker(ctx, serializer, delivery, Quarantine(ctx), sizer)
    else:
        taker = lease_taker = _lease_taker(ctx, config, serializer, hooks, delivery, sizer)
        lease_hooks = {"retry_deferred": taker.retry_deferred, "take_released": taker.take_released,
                       "share": taker.share, "align_blocks": taker.uses_blocks}
    loop = RunLoop(
        ctx, cache, taker, sizer,
        sort_children=hooks.sort_children, get_delay=hooks.get_delay, batch_size=config.batch_size,
        refresh_on_watch=config.refresh_on_watch, min_items_before_refresh=config.min_items_before_refresh,
        **lease_hooks,
    )
    thread = threading.Thread(target=loop.run, name=f"zkqueue-loop-{ctx.queue_path}", daemon=True)
    thread.start()
    return Consumption(cache, lease_taker=lease_taker, loop=loop, thread=thread)
