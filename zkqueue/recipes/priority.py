"""DistributedPriorityQueue: Curator's priority queue (lower priority first, FIFO within a priority).

Names are Curator's (``queue-<sign digit><8 upper-case hex><seq>``), so Curator and zkqueue producers and
consumers mix freely. Fixed against Curator: a requeued item keeps its priority (Curator re-creates it as plain
``queue-<seq>``, which sorts before every priority, so a failing item jumps to the head).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, TypeVar

from kazoo.client import KazooClient

from zkqueue.formats import naming
from zkqueue.errors import ConfigurationError
from zkqueue.engine.queue import DistributedQueue

log = logging.getLogger("zkqueue.recipes.priority")

T = TypeVar("T")


class DistributedPriorityQueue(DistributedQueue[T]):
    """Build with :meth:`QueueBuilder.build_priority_queue`.

    ``min_items_before_refresh`` keeps Curator's meaning: after that many items of one listing have been
    handed out, the consumer checks for a newer listing before each further item and starts over from it when
    one arrived, so a higher-priority arrival overtakes after at most that many items (0: checks before every
    item).
    """

    def __init__(
        self,
        client: KazooClient,
        consumer: Any,
        serializer: Any,
        queue_path: str,
        *,
        min_items_before_refresh: int = 0,
        **options: Any,
    ) -> None:
        if (
            isinstance(min_items_before_refresh, bool)
            or not isinstance(min_items_before_refresh, int)
            or min_items_before_refresh < 0
        ):
            raise ConfigurationError(f"min_items_before_refresh must be an int >= 0, got {min_items_before_refresh!r}")
        options.pop("refresh_on_watch", None)
        super().__init__(
            client,
            consumer,
            serializer,
            queue_path,
            min_items_before_refresh=min_items_before_refresh,
            refresh_on_watch=True,
            **options,
        )

    # -- puts
    def put(self, item: T, priority: int, timeout: float | None = None) -> bool:  # type: ignore[override]
        """Add ``item`` with ``priority`` (any 32-bit signed int; lower comes out first)."""
        self._check_started()
        return self._put_one(naming.join(self.queue_path, naming.priority_prefix(priority)), item, timeout)

    def put_ops(self, item: T, priority: int) -> list[Any]:  # type: ignore[override]
        """The op that adds ``item`` with ``priority``, for a multi of the caller's (see
        :meth:`DistributedQueue.put_ops <zkqueue.engine.queue.DistributedQueue.put_ops>`)."""
        self._check_started()
        return self._put_ops(naming.join(self.queue_path, naming.priority_prefix(priority)), item)

    def put_multi(  # type: ignore[override]
        self, items: Iterable[T], priority: int, timeout: float | None = None
    ) -> bool:
        """Add ``items`` in ONE znode with ``priority``; a consumer gets them together, in order."""
        self._check_started()
        return self._put_many(naming.join(self.queue_path, naming.priority_prefix(priority)), items, timeout)

    # -- hooks
    def sort_children(self, names: list[str]) -> list[str]:
        """Curator's lexicographic order: by priority, then sequence (names without a priority first)."""
        return sorted(names, key=naming.priority_sort_key)

    def make_requeue_item_path(self, item_path: str) -> str:
        """The item's own prefix (priority kept), never a plain ``queue-``."""
        name = item_path.rsplit("/", 1)[-1]
        if naming.parse_priority(name) is None:
            return self.make_item_path()
        return naming.join(self.queue_path, naming.strip_sequence(name))
