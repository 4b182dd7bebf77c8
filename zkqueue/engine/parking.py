"""Parking: items due far ahead wait in time buckets beside the queue, not in it.

Curator's delay queue keeps every item in the queue node, and every change to that node makes each consumer list
and sort all of its children: a million items parked a month ahead make every due item tens of seconds late.
With parking (``build_delay_queue(park_after=60.0)``, and job queues by default) an item due more than
``park_after`` seconds ahead goes to a minute bucket under ``<queue>-schedule/`` (layout:
:mod:`zkqueue.formats.buckets`). Consumers list only the queue node, which holds what is due soon; a put into a
far bucket wakes nobody. The elected mover (:mod:`zkqueue.engine.mover`) moves each bucket into the queue node
``lead_s`` (10) seconds before the bucket starts, under the item's own name, so Curator consumers of the same
queue still get every item on time. The time scale is the queue's :class:`~zkqueue.formats.buckets.Layout`,
recorded in the schedule root by the first instance that starts.

An item is parked only if its bucket starts later than ``lead_s`` + ``margin_s`` (15) seconds from now:
an item never lands in a bucket the mover may already have emptied (unless clocks differ by more than the
margin; then the bucket is simply created again and moved at once). Large items (see ``large_items``) are never
parked: their blob records the node that refers to it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from zkqueue.errors import ConfigurationError
from zkqueue.formats import buckets, naming
from zkqueue.transport import protocol

log = logging.getLogger("zkqueue.engine.parking")


class Placement(NamedTuple):
    """Where one node goes: the full sequential prefix to create it at, and the buckets to create first (empty
    when it goes straight into the queue node)."""

    prefix: str
    parents: tuple[str, ...]

    @property
    def parked(self) -> bool:
        return bool(self.parents)


def check_park_after(park_after: Any) -> float | None:
    if park_after is None:
        return None
    if isinstance(park_after, bool) or not isinstance(park_after, (int, float)) or park_after < 0:
        raise ConfigurationError(f"park_after must be None or a number of seconds >= 0, got {park_after!r}")
    return float(park_after)


class Parking:
    """Chooses between the queue node and a time bucket for each put of one queue. ``layout`` is the one asked
    for; :meth:`open` replaces it with the one the schedule root records, if another instance created it first."""

    def __init__(self, queue_path: str, park_after: float, layout: buckets.Layout | None = None) -> None:
        self.queue_path = queue_path
        self.park_after = float(park_after)
        self.root = buckets.schedule_root(queue_path)
        self.layout = layout or buckets.Layout()

    def open(self, client: KazooClient, acl: Any) -> buckets.Layout:
        """Create the schedule root recording this layout, or adopt the layout it records."""
        try:
            client.create(self.root, self.layout.encode(), acl=acl)
            return self.layout
        except NodeExistsError:
            data, _stat = client.get(self.root)
        recorded = buckets.Layout.decode(data)
        if recorded != self.layout:
            log.info("the schedule of %s keeps its recorded layout %s", self.queue_path, recorded)
        self.layout = recorded
        return recorded

    def place(self, name_prefix: str, due_ms: int, now_ms: int | None = None) -> Placement:
        """Where a node named ``name_prefix`` + sequence, due at ``due_ms`` (epoch ms), goes."""
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        if due_ms - now > self.park_after * 1000:
            layout = self.layout
            bucket = buckets.bucket_of(self.root, due_ms, layout)
            if bucket.minute_s * 1000 > now + (layout.lead_s + layout.margin_s) * 1000:
                return Placement(naming.join(bucket.minute_path, name_prefix), (bucket.hour_path, bucket.minute_path))
        return Placement(naming.join(self.queue_path, name_prefix), ())


def minute_buckets(client: KazooClient, queue_path: str) -> list[str]:
    """The paths of every minute bucket of the queue's schedule: one listing of the hour buckets and one pipelined
    multiRead of their children (empty when the queue has no schedule)."""
    root = buckets.schedule_root(queue_path)
    try:
        hours = [naming.join(root, n) for n in client.get_children(root) if buckets.parse_bucket(n) is not None]
    except NoNodeError:
        return []
    return [naming.join(hour, n) for hour, listing in zip(hours, protocol.multi_read(client, hours, children=True))
            if not isinstance(listing, BaseException) for n in listing if buckets.parse_bucket(n) is not None]


def parked_count(client: KazooClient, queue_path: str) -> int:
    """How many items are parked for the queue at ``queue_path``: :func:`minute_buckets` and pipelined reads of
    their stats (no item is read). Costs one read per bucket (about 44,000 for a schedule spread over 30 days), so
    it is for counts and dashboards, not for hot paths."""
    return sum(res[1].numChildren for res in protocol.multi_read(client, minute_buckets(client, queue_path))
               if not isinstance(res, BaseException))


__all__ = ["Parking", "Placement", "check_park_after", "minute_buckets", "parked_count"]
