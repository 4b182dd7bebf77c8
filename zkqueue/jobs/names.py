"""Node names of a job queue. Pure, no I/O.

Queue items are ``queue-|<due ms, 11 hex>|<priority>|<kind>|<escaped id>|<seq>``: the engine consumes ``queue-``
children; the due time and priority order them (a job is never handed out before its due time); the kind is ``n``
for a job's first run and ``r`` for a retry (so counts need no record reads); the id lets the claim find the
record without reading the item. Records are ``<job queue>/records/<escaped id>`` while a job is unfinished and
move to ``completed/`` or ``dead/`` when it ends.
"""

from __future__ import annotations

from typing import NamedTuple

from zkqueue.errors import ConfigurationError
from zkqueue.formats import naming

NEW = "n"
RETRY = "r"


def node_id(job_id: str) -> str:
    """``job_id`` as a node name: the id queue's reversible escaping (and ``.``/``..`` escaped too)."""
    if not isinstance(job_id, str):
        raise TypeError(f"a job id must be a str, got {type(job_id).__name__}: {job_id!r}")
    if not job_id:
        raise ConfigurationError("a job id must be a non-empty str")
    escaped = naming.escape_id(job_id)
    if escaped in (".", ".."):
        escaped = escaped.replace(".", "%2E")
    return escaped


def job_id_of(node: str) -> str:
    return naming.unescape_id(node)


def item_name_prefix(job_id: str, *, due_ms: int, priority: int, kind: str) -> str:
    """The name of a job's queue item without its sequence (the same in the queue and, parked, in a bucket)."""
    return f"{naming.ITEM_PREFIX}|{max(0, due_ms):011X}|{naming.encode_priority(priority)}|{kind}|{node_id(job_id)}|"


def item_prefix(queue_path: str, job_id: str, *, due_ms: int, priority: int, kind: str) -> str:
    """The sequential prefix of a job's queue item in the queue node."""
    return naming.join(queue_path, item_name_prefix(job_id, due_ms=due_ms, priority=priority, kind=kind))


class ItemName(NamedTuple):
    due_ms: int
    priority: str
    kind: str
    job_id: str
    seq: int


def parse_item(name: str) -> ItemName | None:
    """The parts of a job item name, or None for anything else (a foreign node)."""
    parts = name.split("|")
    if len(parts) != 6 or parts[0] != naming.ITEM_PREFIX:
        return None
    try:
        return ItemName(int(parts[1], 16), parts[2], parts[3], job_id_of(parts[4]), int(parts[5]))
    except ValueError:
        return None


def sort_key(name: str) -> tuple[int, str, int, str]:
    """Due time, then priority (lower first), then put order; names of other shapes last, by name."""
    item = parse_item(name)
    if item is None:
        return (2**63, "", 0, name)
    return (item.due_ms, item.priority, item.seq, "")
