"""DistributedDelayQueue: Curator's delay queue (an item is handed out no earlier than its due time).

Parking (``build_delay_queue(park_after=60.0)``, the default): an item due more than ``park_after`` seconds ahead
waits in a time bucket under ``<queue>-schedule/`` and is moved into the queue node, under its Curator name,
shortly before it is due (see :mod:`zkqueue.engine.parking`), so consumers never list a month of schedule.
``park_after=None`` keeps Curator's flat layout.

Names are Curator's (``queue-|<hex epoch ms>|<seq>``). The engine's loop sleeps until the head of the queue is
due or the children change; it never polls. Fixed against Curator: equal due times stay FIFO (by sequence),
and a requeued item keeps its due time (Curator re-creates it as plain ``queue-<seq>``, due at once), with an
optional back-off for retries.

The due time is compared with this consumer's wall clock, as in Curator: clock skew between producer and
consumer shifts delivery.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterable, TypeVar

from kazoo.client import KazooClient

from zkqueue.formats import naming
from zkqueue.errors import ConfigurationError
from zkqueue.engine.queue import DistributedQueue

log = logging.getLogger("zkqueue.recipes.delay")

T = TypeVar("T")

_NEVER_ABANDON = 2**31 - 1  # Curator's Integer.MAX_VALUE: a batch is never abandoned for a newer listing


def now_ms() -> int:
    """Wall-clock epoch in milliseconds (what due times are compared with)."""
    return time.time_ns() // 1_000_000


class DistributedDelayQueue(DistributedQueue[T]):
    """Build with :meth:`QueueBuilder.build_delay_queue`.

    ``requeue_backoff`` (seconds, default None): when a lock-safe consumer fails on an item, it is requeued
    due at ``max(original due time, now + requeue_backoff)``. None keeps the original due time.
    """

    def __init__(
        self,
        client: KazooClient,
        consumer: Any,
        serializer: Any,
        queue_path: str,
        *,
        requeue_backoff: float | None = None,
        **options: Any,
    ) -> None:
        if requeue_backoff is not None and (
            isinstance(requeue_backoff, bool) or not isinstance(requeue_backoff, (int, float)) or requeue_backoff < 0
        ):
            raise ConfigurationError(f"requeue_backoff must be None or >= 0 seconds, got {requeue_backoff!r}")
        self._requeue_backoff = requeue_backoff
        options.pop("refresh_on_watch", None)
        options.pop("min_items_before_refresh", None)
        super().__init__(
            client,
            consumer,
            serializer,
            queue_path,
            min_items_before_refresh=_NEVER_ABANDON,
            refresh_on_watch=True,
            **options,
        )

    # -- puts
    def put(self, item: T, delay_until_epoch_ms: int, timeout: float | None = None) -> bool:  # type: ignore[override]
        """Add ``item``, to be handed out no earlier than ``delay_until_epoch_ms`` (epoch ms, > 0; a past
        time means now). With parking, an item due more than ``park_after`` seconds ahead is parked."""
        self._check_started()
        return self._put_due(naming.delay_prefix(delay_until_epoch_ms), delay_until_epoch_ms, [item], multi=False,
                             timeout=timeout)

    def put_multi(  # type: ignore[override]
        self, items: Iterable[T], delay_until_epoch_ms: int, timeout: float | None = None
    ) -> bool:
        """Add ``items`` in ONE znode due at ``delay_until_epoch_ms``."""
        self._check_started()
        return self._put_due(naming.delay_prefix(delay_until_epoch_ms), delay_until_epoch_ms, list(items),
                             multi=True, timeout=timeout)

    # -- hooks
    def get_delay(self, item_node: str) -> float:
        """Seconds until the item is due (<= 0: due). Unparsable names are due at once, as in Curator."""
        return (naming.parse_delay_epoch(item_node) - now_ms()) / 1000.0

    def sort_children(self, names: list[str]) -> list[str]:
        """By due time, then sequence: equal due times stay FIFO (CURATOR-115/116 without their gap)."""
        return sorted(names, key=naming.delay_sort_key)

    def make_requeue_item_path(self, item_path: str) -> str:
        name = item_path.rsplit("/", 1)[-1]
        epoch = naming.parse_delay_epoch(name)
        if self._requeue_backoff is not None:
            epoch = max(epoch, now_ms() + int(self._requeue_backoff * 1000))
        if epoch <= 0:
            return self.make_item_path()
        return self.place_due(naming.delay_prefix(epoch), epoch)  # a long back-off is parked like a far put
