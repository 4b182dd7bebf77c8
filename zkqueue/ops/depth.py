"""Cheap depths of queues, job queues and flows for monitoring (``zkqueue metrics``, ``watch``, ``dashboard``), and
finding them under a root. Child counts come from ``exists()`` (the stat's ``numChildren``); a queue's items are
listed only when it holds at most :data:`LIST_LIMIT` nodes (to split them into pending/in flight or queued/
retrying); no item is ever read. :func:`zkqueue.ops.inspect.queue_counts` is the exact, listing version."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError

from zkqueue.engine.api import held_items
from zkqueue.errors import QueuePermissionError
from zkqueue.formats import naming
from zkqueue.ops.inspect import children

log = logging.getLogger("zkqueue.ops.depth")

#: Most items listed to split a depth into its parts; above it, the parts are estimated from the lock nodes.
LIST_LIMIT = 10_000

#: The nodes that make a node a job queue (a queue from before cancel and pause has no ``cancelled``/``control``).
JOB_PARTS = ("queue", "records", "dead", "completed")
#: Where a job queue keeps its finished jobs' records (each counted in :func:`job_depth`).
JOB_FINISHED_PARTS = ("dead", "completed", "cancelled")
FLOW_PARTS = ("flows", "steps")
#: Sibling nodes that belong to a queue, not queues of their own.
QUEUE_SUFFIXES = ("-locks", "-quarantine", "-receipts", "-blobs", "-staging", "-producers")


@dataclass
class Depth:
    """One queue's depth. ``items`` counts every child of the queue node; ``in_flight`` the items a lock-safe
    consumer holds (exact when listed, else the number of lease nodes); ``retrying``, ``dead``, ``completed``,
    ``cancelled`` and ``paused`` are for job queues (``retrying`` None when not listed); ``jobs`` the flow jobs a
    flow keeps."""

    path: str
    kind: str
    items: int = 0
    pending: int = 0
    in_flight: int = 0
    quarantined: int = 0
    consumers: int = 0
    retrying: int | None = None
    dead: int | None = None
    completed: int | None = None
    cancelled: int | None = None
    paused: bool | None = None
    jobs: int | None = None
    exact: bool = True
    #: The queue node's child version: +1 per child created or deleted, so between two looks
    #: puts = (dcversion + ditems) / 2 and takes = (dcversion - ditems) / 2 (see :func:`rates`).
    cversion: int = 0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _stat(client: KazooClient, path: str) -> Any:
    try:
        return client.exists(path)
    except NoAuthError as exc:
        raise QueuePermissionError(f"not allowed to read {path}: check auth and ACLs") from exc


def _num_children(client: KazooClient, path: str) -> int | None:
    stat = _stat(client, path)
    return None if stat is None else stat.numChildren


def job_paused(client: KazooClient, path: str) -> bool:
    """Whether the job queue at ``path`` is paused: one read of its control node (none: not paused)."""
    from zkqueue.jobs.control import is_paused  # noqa: PLC0415 - the job layer only when a job queue is looked at
    from zkqueue.jobs.store import Paths  # noqa: PLC0415

    control_path = Paths(naming.validate_queue_path(path)).control
    try:
        data, _stat = client.get(control_path)
    except NoNodeError:
        return False
    except NoAuthError as exc:
        raise QueuePermissionError(f"not allowed to read {control_path}: check auth and ACLs") from exc
    return is_paused(data)


def kind_of(client: KazooClient, path: str) -> str | None:
    """``"jobs"``, ``"flow"`` or ``"queue"`` for the node at ``path`` (by its layout), None if it does not exist.
    A node with many children is taken for a queue without listing them."""
    count = _num_children(client, path)
    if count is None:
        return None
    if count > 64:
        return "queue"
    names = set(children(client, path))
    if set(JOB_PARTS) <= names:
        return "jobs"
    if set(FLOW_PARTS) <= names:
        return "flow"
    return "queue"


def find_queues(client: KazooClient, root: str, max_depth: int = 3) -> list[tuple[str, str]]:
    """(path, kind) of the queues, job queues and flows under ``root``: a node is a queue when it is empty, holds
    items or is big; otherwise its children are looked at (down to ``max_depth``). Lock, quarantine and similar
    sibling nodes are skipped."""
    root = naming.validate_path(root)
    found: list[tuple[str, str]] = []
    todo = [(root, 0)]
    while todo:
        path, depth = todo.pop()
        count = _num_children(client, path)
        if count is None or path.endswith(QUEUE_SUFFIXES):
            continue
        kind = kind_of(client, path)
        if kind in ("jobs", "flow"):
            found.append((path, kind))
            continue
        names = children(client, path) if count <= 64 else []
        if path != root and (count > 64 or not names or any(naming.is_item_name(n) for n in names)):
            found.append((path, "queue"))
        elif depth < max_depth:
            todo.extend((naming.join(path, n), depth + 1) for n in names)
    return sorted(found)


def _held(client: KazooClient, queue_path: str, lock_path: str, count: int) -> tuple[set[str], int, int, bool,
                                                                                    list[str]]:
    """(the held item names if listed, in flight, consumers, exact, item names if listed) of a queue: the lock
    directory is listed once."""
    locks = children(client, lock_path)
    fences = sum(1 for n in locks if naming.is_fence_name(n, queue_path))
    if count <= LIST_LIMIT:
        items = [n for n in children(client, queue_path)]
        held = held_items(items, locks, queue_path)
        return held, len(held), fences, True, items
    return set(), len(locks) - fences, fences, False, []


def queue_depth(client: KazooClient, path: str, *, lock_path: str | None = None,
                quarantine_path: str | None = None) -> Depth:
    """The depth of the plain queue at ``path`` (lock path default ``PATH-locks``, quarantine ``PATH-quarantine``)."""
    path = naming.validate_queue_path(path)
    stat = _stat(client, path)
    count = stat.numChildren if stat else 0
    _h, in_flight, consumers, exact, _items = _held(client, path, lock_path or path + "-locks", count)
    return Depth(path=path, kind="queue", items=count, pending=count - in_flight, in_flight=in_flight,
                 quarantined=_num_children(client, quarantine_path or path + "-quarantine") or 0,
                 consumers=consumers, exact=exact, cversion=stat.cversion if stat else 0)


def job_depth(client: KazooClient, path: str) -> Depth:
    """The depth of the job queue at ``path``: queued (pending), in flight (active), retrying, dead, completed,
    cancelled, and whether it is paused (one read of its control node)."""
    from zkqueue.jobs import names  # noqa: PLC0415 - the job layer only when a job queue is looked at
    from zkqueue.jobs.store import Paths  # noqa: PLC0415

    paths = Paths(naming.validate_queue_path(path))
    stat = _stat(client, paths.queue)
    count = stat.numChildren if stat else 0
    held, in_flight, consumers, exact, items = _held(client, paths.queue, paths.locks, count)
    retrying = names.count_waiting(items, held)[1] if exact else None
    return Depth(path=paths.root, kind="jobs", items=count, pending=count - in_flight - (retrying or 0),
                 in_flight=in_flight, quarantined=_num_children(client, paths.queue + "-quarantine") or 0,
                 consumers=consumers, retrying=retrying,
                 **{part: _num_children(client, naming.join(paths.root, part)) or 0 for part in JOB_FINISHED_PARTS},
                 paused=job_paused(client, paths.root), exact=exact, cversion=stat.cversion if stat else 0)


def flow_depth(client: KazooClient, path: str) -> list[Depth]:
    """The flow's own line (``jobs``: flow jobs kept) and one job-queue depth per step (``PATH/steps/<step>``)."""
    root = naming.validate_queue_path(path)
    steps = naming.join(root, "steps")
    out = [Depth(path=root, kind="flow", jobs=_num_children(client, naming.join(root, "flows")) or 0)]
    out.extend(job_depth(client, naming.join(steps, name)) for name in sorted(children(client, steps)))
    return out


def depths(client: KazooClient, path: str, kind: str | None = None) -> list[Depth]:
    """Depths of whatever is at ``path`` (its kind found from its layout unless given); [] if it does not exist."""
    kind = kind or kind_of(client, path)
    if kind is None:
        return []
    if kind == "jobs":
        return [job_depth(client, path)]
    if kind == "flow":
        return flow_depth(client, path)
    return [queue_depth(client, path)]


def rates(before: Depth, after: Depth, seconds: float) -> tuple[float, float]:
    """(puts per second, takes per second) of one queue between two looks ``seconds`` apart, from the child
    version and count of its node (a requeue counts as one take and one put)."""
    if seconds <= 0 or after.cversion < before.cversion:
        return 0.0, 0.0
    dc, dn = after.cversion - before.cversion, after.items - before.items
    return max(0.0, (dc + dn) / 2 / seconds), max(0.0, (dc - dn) / 2 / seconds)
