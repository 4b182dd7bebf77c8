"""Counters of one queue instance: :class:`QueueStats` and the thread-safe :class:`Counters` that fill it."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass


@dataclass
class QueueStats:
    """Counters of one queue instance. A "skip" the engine logs is always counted here."""

    put_ok: int = 0
    put_failed: int = 0
    consumed: int = 0
    consumer_errors: int = 0
    requeued: int = 0
    deleted_on_error: int = 0
    corrupt_quarantined: int = 0
    foreign_skipped: int = 0
    loop_errors: int = 0
    lock_conflicts: int = 0
    lock_lost: int = 0
    lost_races: int = 0
    queue_recreated: int = 0
    listings: int = 0
    moved: int = 0
    released: int = 0
    leases_downgraded: int = 0
    #: Claimed names taken under a block lease this instance held already (see ``Leases.join_blocks``).
    block_joins: int = 0
    large_items_put: int = 0
    blobs_reclaimed: int = 0
    #: Puts sent to the schedule (due more than ``park_after`` ahead), and parked items this instance's mover moved
    #: into the queue node.
    parked: int = 0
    unparked: int = 0
    #: Writes spent on the schedule's buckets: creates this instance's puts sent (one that exists already still
    #: costs ZooKeeper a write request) and buckets its mover deleted.
    bucket_writes: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Counters:
    """A :class:`QueueStats` that many threads add to."""

    def __init__(self) -> None:
        self._stats = QueueStats()
        self._lock = threading.Lock()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self._stats, name, getattr(self._stats, name) + n)

    def snapshot(self) -> QueueStats:
        with self._lock:
            return QueueStats(**asdict(self._stats))

    def contention(self) -> int:
        """Races lost to other consumers so far (a change means others work on this queue)."""
        with self._lock:
            return self._stats.lost_races + self._stats.lock_conflicts
