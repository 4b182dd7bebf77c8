"""DistributedIdQueue: Curator's id queue (items carry an id; ``remove(id)`` takes them out unconsumed).

Names are Curator's (``queue-|<id>|<seq>``). Fixed against Curator: every id works, including ids with ``/``
or ``|`` (escaped reversibly by :func:`zkqueue.formats.naming.escape_id`; Curator maps both to ``_`` and then can
never remove or find such an item), and a requeued item keeps its id. The queue is strict FIFO: the id
plays no part in the order.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, TypeVar

from zkqueue.formats import naming
from zkqueue.engine.queue import DistributedQueue

log = logging.getLogger("zkqueue.recipes.ids")

T = TypeVar("T")


class DistributedIdQueue(DistributedQueue[T]):
    """Build with :meth:`QueueBuilder.build_id_queue`."""

    # -- puts
    def put(self, item: T, item_id: str, timeout: float | None = None) -> bool:  # type: ignore[override]
        """Add ``item`` under ``item_id`` (any non-empty str)."""
        self._check_started()
        return self._put_one(naming.join(self.queue_path, naming.id_prefix(item_id)), item, timeout)

    def put_multi(  # type: ignore[override]
        self, items: Iterable[T], item_id: str, timeout: float | None = None
    ) -> bool:
        """Add ``items`` in ONE znode under ``item_id`` (Curator's id queue has no putMulti; this is an extra)."""
        self._check_started()
        return self._put_many(naming.join(self.queue_path, naming.id_prefix(item_id)), items, timeout)

    # -- id operations
    def _names_with_id(self, item_id: str) -> list[str]:
        naming.id_prefix(item_id)  # validates the id (TypeError / ConfigurationError)
        children = self.client.get_children(self.queue_path)
        return [n for n in children if naming.is_item_name(n) and naming.id_matches(n, item_id)]

    def remove(self, item_id: str) -> int:
        """Remove every queued item put under ``item_id``; return how many were removed. An item a consumer
        holds (lock-safe mode) or has already taken is not removed and counts 0."""
        self._check_started()
        names = self._names_with_id(item_id)
        if not names:
            return 0
        return self._remove_items(names)

    def is_queued(self, item_id: str) -> bool:
        """True if an item with ``item_id`` is in the queue (held by a consumer or not). Curator's
        ``debugIsQueued``."""
        self._check_started()
        return bool(self._names_with_id(item_id))

    # -- hooks
    def sort_children(self, names: list[str]) -> list[str]:
        """Strict FIFO: by the name without its id (``queue-<seq>``), as Curator."""
        return sorted(names, key=naming.id_sort_key)

    def make_requeue_item_path(self, item_path: str) -> str:
        """The item's own prefix: the id is kept, escaped exactly as it was (no name growth, CURATOR-56)."""
        name = item_path.rsplit("/", 1)[-1]
        if naming.parse_id(name)[0] is None:
            return self.make_item_path()
        return naming.join(self.queue_path, naming.strip_sequence(name))
