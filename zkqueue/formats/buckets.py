"""Time buckets of parked items: names and arithmetic. Pure, no I/O.

Items due far ahead wait in ``<queue>-schedule/`` instead of the queue node (see :mod:`zkqueue.engine.parking`).
The schedule has two levels of buckets, both named ``t<start, epoch seconds, 10 digits>`` so that name order is
time order:

- hour buckets under the schedule root: 720 for a 30-day schedule;
- minute buckets under their hour: at most 60;
- parked items under their minute bucket, named as they will be in the queue (Curator's delay name, or a job
  item name) plus their sequence in the bucket.

A million items spread over 30 days make 43,200 minute buckets of about 23 items each; no node holds more than a
few thousand children unless one minute alone holds that many items.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import NamedTuple

from zkqueue.errors import ConfigurationError, CorruptItemError
from zkqueue.formats import naming

#: Width of a top-level bucket, in seconds.
HOUR = 3600
#: Width of a leaf bucket (the unit the mover moves), in seconds.
MINUTE = 60
#: First letter of every bucket name.
BUCKET_PREFIX = "t"
_DIGITS = 10


@dataclass(frozen=True)
class Layout:
    """The time scale of one queue's schedule, recorded in its schedule root so that every producer and mover of the
    queue agree: bucket widths, how long before a minute bucket starts it is moved (``lead_s``), and the margin
    beyond that a bucket must start in for an item to be parked in it (``margin_s``). The default suits schedules
    of minutes to months; tests shrink it."""

    hour_s: int = HOUR
    minute_s: int = MINUTE
    lead_s: float = 10.0
    margin_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("hour_s", "minute_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be an int >= 1 second, got {value!r}")
        if self.hour_s % self.minute_s:
            raise ConfigurationError(f"hour_s ({self.hour_s}) must be a multiple of minute_s ({self.minute_s})")
        for name in ("lead_s", "margin_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> "Layout":
        """The layout a schedule root holds (empty data: the default)."""
        if not data:
            return cls()
        try:
            fields = json.loads(data)
            return cls(int(fields["hour_s"]), int(fields["minute_s"]), float(fields["lead_s"]),
                       float(fields["margin_s"]))
        except (ValueError, KeyError, TypeError, ConfigurationError) as exc:
            raise CorruptItemError(f"the schedule root holds no valid layout ({data[:100]!r}): {exc}") from exc


def schedule_root(queue_path: str) -> str:
    """The parking area of the queue at ``queue_path``: its sibling ``<queue>-schedule``."""
    return queue_path + "-schedule"


def mover_path(queue_path: str) -> str:
    """Where the queue's movers hold their election: ``<queue>-mover``."""
    return queue_path + "-mover"


def bucket_name(start_s: int) -> str:
    return f"{BUCKET_PREFIX}{start_s:0{_DIGITS}d}"


def parse_bucket(name: str) -> int | None:
    """The start (epoch seconds) of the bucket called ``name``, or None for a name that is not a bucket."""
    digits = name[1:]
    if not name.startswith(BUCKET_PREFIX) or len(digits) != _DIGITS or not digits.isdigit():
        return None
    return int(digits)


class Bucket(NamedTuple):
    """The leaf bucket of a due time: its hour and minute starts (epoch seconds) and their paths."""

    hour_s: int
    minute_s: int
    hour_path: str
    minute_path: str


def bucket_of(root: str, due_ms: int, layout: Layout = Layout()) -> Bucket:
    """The minute bucket under ``root`` that holds items due at ``due_ms``."""
    due_s = max(0, due_ms) // 1000
    minute_s = due_s - due_s % layout.minute_s
    hour_s = due_s - due_s % layout.hour_s
    hour_path = naming.join(root, bucket_name(hour_s))
    return Bucket(hour_s, minute_s, hour_path, naming.join(hour_path, bucket_name(minute_s)))


def item_prefix(name: str) -> str | None:
    """The sequential prefix a parked item named ``name`` is re-created with in the queue (its name without the
    bucket's sequence), or None for a node that is no parked item (no sequence, or not a ``queue-`` name)."""
    if naming.sequence_of(name) is None or not naming.is_item_name(name):
        return None
    return naming.strip_sequence(name)


__all__ = ["BUCKET_PREFIX", "Bucket", "HOUR", "Layout", "MINUTE", "bucket_name", "bucket_of", "item_prefix", "mover_path",
           "parse_bucket", "schedule_root"]
