"""Read-only counts of a queue's nodes, for ``zkqueue stats`` and monitoring."""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError

from zkqueue.engine.api import held_items
from zkqueue.formats import naming
from zkqueue.errors import QueuePermissionError

log = logging.getLogger("zkqueue.ops.inspect")


def children(client: KazooClient, path: str) -> list[str]:
    """The children of ``path`` ([] if it does not exist); a refusal is a QueuePermissionError."""
    try:
        return client.get_children(path)
    except NoNodeError:
        return []
    except NoAuthError as exc:
        raise QueuePermissionError(f"not allowed to list {path}: check auth and ACLs") from exc


def queue_counts(
    client: KazooClient,
    queue_path: str,
    *,
    lock_path: str | None = None,
    quarantine_path: str | None = None,
) -> dict[str, int]:
    """``pending`` items, ``locked`` items (held by a lock-safe consumer: an item lease, or a block lease that
    covers the item), ``quarantined`` corrupt items, ``foreign`` nodes that are not queue items, and ``consumers``
    (live lock-safe consumers, by their session fences). Lock nodes of either naming style are matched to this
    queue's items, so a lock path shared with other queues is counted correctly. Reads two listings, never items."""
    queue_path = naming.validate_queue_path(queue_path)
    names = children(client, queue_path)
    items = {n for n in names if naming.is_item_name(n)}
    locked = 0
    consumers = 0
    if lock_path:
        lock_names = children(client, naming.validate_path(lock_path))
        consumers = sum(1 for n in lock_names if naming.is_fence_name(n, queue_path))
        locked = len(held_items(items, lock_names, queue_path))
    quarantine = naming.validate_path(quarantine_path or queue_path + "-quarantine")
    return {
        "pending": len(items) - locked,
        "locked": locked,
        "quarantined": len(children(client, quarantine)),
        "foreign": len(names) - len(items),
        "consumers": consumers,
    }
