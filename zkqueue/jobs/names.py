"""Node names of a job queue. Pure, no I/O.

Queue items are ``queue-|<ms, 11 hex>|<priority>|<kind>|<escaped id>|<seq>``: the engine consumes ``queue-``
children; the id lets the claim find the record without reading the item. The kind is ``i`` for a first run due
at once, ``n`` for a delayed first run and ``r`` for a retry (so counts need no record reads). The ms field is the
time the job became (or becomes) runnable: the due time of kinds ``n`` and ``r`` (a job is never handed out
before it), the time an ``i`` job was queued (it is due at once on every host, whatever the clocks: its ms only
orders it). Among due jobs the order is priority (lower first), then that runnable time, then the sequence
(:func:`sort_key`); jobs not due yet are skipped by the claims, wherever they sort. Names written before kind
``i`` existed (ms 0, kind ``n``) are due at once and come first among their priority.

Records are ``<job queue>/records/<escaped id>`` while a job is unfinished and move to ``completed/`` or ``dead/``
when it ends.
"""

from __future__ import annotations

from typing import NamedTuple

from zkqueue.errors import ConfigurationError
from zkqueue.formats import naming

#: A first run (the kind :func:`zkqueue.jobs.store.item_name` is given): named ``n`` when delayed; a first run due
#: at once (its record's ``due_ms`` is 0) is named :data:`IMMEDIATE` instead.
NEW = "n"
#: A first run due at once: its ms field is the time it was queued, not a due time.
IMMEDIATE = "i"
#: A retry, due at its ms field.
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
    """The name of a job's queue item without its sequence (the same in the queue and, parked, in a bucket).
    ``due_ms`` is the name's ms field: the due time, or for kind :data:`IMMEDIATE` the time it was queued."""
    return f"{naming.ITEM_PREFIX}|{max(0, due_ms):011X}|{naming.encode_priority(priority)}|{kind}|{node_id(job_id)}|"


def item_prefix(queue_path: str, job_id: str, *, due_ms: int, priority: int, kind: str) -> str:
    """The sequential prefix of a job's queue item in the queue node."""
    return naming.join(queue_path, item_name_prefix(job_id, due_ms=due_ms, priority=priority, kind=kind))


class ItemName(NamedTuple):
    #: The ms field: when the job became (or becomes) runnable (see the module docs).
    runnable_ms: int
    priority: str
    kind: str
    job_id: str
    seq: int

    @property
    def due_ms(self) -> int:
        """The instant (epoch ms) before which the item is not handed out: 0 (due at once) for kind
        :data:`IMMEDIATE`, else its ms field."""
        return 0 if self.kind == IMMEDIATE else self.runnable_ms


def parse_item(name: str) -> ItemName | None:
    """The parts of a job item name, or None for anything else (a foreign node)."""
    parts = name.split("|")
    if len(parts) != 6 or parts[0] != naming.ITEM_PREFIX:
        return None
    try:
        return ItemName(int(parts[1], 16), parts[2], parts[3], job_id_of(parts[4]), int(parts[5]))
    except ValueError:
        return None


def count_waiting(names: list[str], held: set[str] | frozenset[str]) -> tuple[int, int]:
    """(queued, retrying): the job items among ``names`` (a listing of the queue node) that no worker holds, by
    kind. Other nodes are not counted. What :meth:`JobQueue.counts <zkqueue.jobs.JobQueue.counts>` and the
    operations tools report."""
    queued = retrying = 0
    for name in names:
        if name in held:
            continue
        item = parse_item(name)
        if item is None:
            continue
        if item.kind == RETRY:
            retrying += 1
        else:
            queued += 1
    return queued, retrying


def sort_key(name: str) -> tuple[int, str, int, int, str]:
    """Priority (lower first), then the time the job became runnable, then put order; names of other shapes last,
    by name. Jobs not due yet sort among the due ones: the pull claims skip them (see
    :class:`~zkqueue.engine.ordering.KeptOrder`)."""
    item = parse_item(name)
    if item is None:
        return (1, "", 0, 0, name)
    return (0, item.priority, item.runnable_ms, item.seq, "")
