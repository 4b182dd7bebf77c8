"""Operator actions on a queue's nodes: peek at the head items, purge a queue in batched multis, and list, redrive
or purge its quarantine. Used by the ``zkqueue`` commands and the dashboard."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError, NotEmptyError

from zkqueue.engine import api
from zkqueue.engine.api import create_op, delete_op, minute_buckets
from zkqueue.errors import QueuePermissionError, QueueStateError
from zkqueue.formats import framing, naming
from zkqueue.formats.serializers import BytesSerializer, JsonSerializer, StrSerializer

log = logging.getLogger("zkqueue.ops.items")

#: Names of the serializers ``peek`` and the dashboard decode with.
SERIALIZERS: dict[str, Callable[[], Any]] = {"str": StrSerializer, "json": JsonSerializer, "bytes": BytesSerializer}
#: Deletes per multi when purging (well under ZooKeeper's 1 MiB packet for any path).
PURGE_BATCH = 1000
#: Multis in flight at once when purging.
PURGE_WINDOW = 8


@dataclass
class Peeked:
    """One node at the head of a queue: its name, its items decoded (or a note why not), its size and ctime."""

    name: str
    items: list[Any]
    size: int
    ctime_ms: int
    error: str | None = None


def _children(client: KazooClient, path: str) -> list[str]:
    try:
        return client.get_children(path)
    except NoNodeError as exc:
        raise QueueStateError(f"no node {path}: check the path") from exc
    except NoAuthError as exc:
        raise QueuePermissionError(f"not allowed to list {path}: check auth and ACLs") from exc


def _order(names: Iterable[str]) -> list[str]:
    """Queue order as the plain queue sorts (priority and delay names sort by their prefix first)."""
    return sorted(names, key=lambda n: (naming.strip_sequence(n), naming.sequence_of(n) or 0, n))


def decode(data: bytes, serializer: str = "str") -> tuple[list[Any], str | None]:
    """The items of one queue node decoded with the serializer named ``serializer`` (see :data:`SERIALIZERS`)."""
    ser = SERIALIZERS[serializer]()
    try:
        payloads = framing.decode_items(data)
    except Exception as exc:  # noqa: BLE001 - a corrupt node is shown, not raised
        return [], f"not a queue frame: {exc}"
    out = []
    for payload in payloads:
        try:
            out.append(ser.deserialize(payload))
        except Exception:  # noqa: BLE001 - shown raw
            out.append(repr(bytes(payload[:200])))
    return out, None


def peek(client: KazooClient, path: str, n: int = 10, serializer: str = "str") -> list[Peeked]:
    """The first ``n`` nodes of the queue at ``path`` in queue order, decoded; nothing is taken or locked."""
    path = naming.validate_queue_path(path)
    names = _order(c for c in _children(client, path) if naming.is_item_name(c) or not c.startswith("."))[:n]
    out = []
    for name, res in zip(names, api.multi_read(client, [naming.join(path, c) for c in names])):
        if isinstance(res, BaseException):
            continue  # taken meanwhile
        data, stat = res
        items, error = decode(data or b"", serializer)
        out.append(Peeked(name, items, len(data or b""), stat.ctime, error))
    return out


def delete_children(client: KazooClient, parent: str, names: list[str],
                    progress: Callable[[int], None] | None = None) -> int:
    """Delete ``names`` under ``parent`` in multis of :data:`PURGE_BATCH`, :data:`PURGE_WINDOW` in flight; a
    multi that fails (a node already gone) is redone as single deletes. Returns how many this call deleted;
    ``progress(n)`` is called as batches finish."""
    deleted = 0
    batches = [names[i:i + PURGE_BATCH] for i in range(0, len(names), PURGE_BATCH)]
    for start in range(0, len(batches), PURGE_WINDOW):
        window = batches[start:start + PURGE_WINDOW]
        sent = [api.send_multi(client, [delete_op(naming.join(parent, c)) for c in batch]) for batch in window]
        for batch, pending in zip(window, sent):
            result = pending.result(60.0)
            if result.ok:
                done = len(batch)
            elif isinstance(result.failure, NoAuthError):
                raise QueuePermissionError(f"not allowed to delete in {parent}: check auth and ACLs")
            else:
                singles = api.delete_many(client, [naming.join(parent, c) for c in batch], timeout=60.0)
                if any(isinstance(r, NoAuthError) for r in singles):
                    raise QueuePermissionError(f"not allowed to delete in {parent}: check auth and ACLs")
                done = sum(1 for r in singles if r is True)
            deleted += done
            if progress is not None:
                progress(len(batch))
    return deleted


def purge(client: KazooClient, path: str, progress: Callable[[int, int], None] | None = None) -> int:
    """Delete every item of the queue at ``path`` (foreign children are left), and its parked items (see
    :mod:`zkqueue.engine.parking`); return how many were deleted. ``progress(done, total)`` follows it. Items a
    consumer holds go too: its ack then finds them gone."""
    path = naming.validate_queue_path(path)
    names = [c for c in _children(client, path) if naming.is_item_name(c)]
    parked = _parked_buckets(client, path)
    total = len(names) + sum(len(items) for _bucket, items in parked)
    done = [0]

    def step(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], total)

    if progress is not None:
        progress(0, total)
    deleted = delete_children(client, path, names, step)
    for bucket, items in parked:
        deleted += delete_children(client, bucket, items, step)
        with contextlib.suppress(NoNodeError, NotEmptyError):  # a put raced in: the bucket stays, with it
            client.delete(bucket)
    return deleted


def _parked_buckets(client: KazooClient, path: str) -> list[tuple[str, list[str]]]:
    """The minute buckets of the queue's schedule with the parked items in each (empty if it has none)."""
    minutes = minute_buckets(client, path)
    return [(minute, listing) for minute, listing in zip(minutes, api.multi_read(client, minutes, children=True))
            if not isinstance(listing, BaseException) and listing]


def quarantine_path(path: str) -> str:
    """The default quarantine of the queue at ``path``."""
    return naming.validate_queue_path(path) + "-quarantine"


def quarantined(client: KazooClient, path: str, n: int | None = None, serializer: str = "str") -> list[Peeked]:
    """The nodes in the quarantine of the queue at ``path`` (oldest first), decoded where they can be."""
    qpath = quarantine_path(path)
    try:
        names = sorted(client.get_children(qpath))[:n]
    except NoNodeError:
        return []
    except NoAuthError as exc:
        raise QueuePermissionError(f"not allowed to list {qpath}: check auth and ACLs") from exc
    out = []
    for name, res in zip(names, api.multi_read(client, [naming.join(qpath, c) for c in names])):
        if not isinstance(res, BaseException):
            items, error = decode(res[0] or b"", serializer)
            out.append(Peeked(name, items, len(res[0] or b""), res[1].ctime, error))
    return out


def redrive(client: KazooClient, path: str, names: list[str] | None = None) -> int:
    """Move quarantined nodes (all, or ``names``) back into the queue at ``path`` as new items at its tail, each
    in one multi (create the item, delete the quarantined node at its version). Returns how many moved."""
    path = naming.validate_queue_path(path)
    qpath = quarantine_path(path)
    if names is None:
        try:
            names = sorted(client.get_children(qpath))
        except NoNodeError:
            return 0
    moved = 0
    for name, res in zip(names, api.multi_read(client, [naming.join(qpath, c) for c in names])):
        if isinstance(res, BaseException):
            continue
        data, stat = res
        result = api.run_multi(client, [create_op(naming.join(path, naming.ITEM_PREFIX), data or b"",
                                                       sequence=True),
                                             delete_op(naming.join(qpath, name), stat.version)], timeout=30.0)
        if result.ok:
            moved += 1
        elif isinstance(result.failure, NoAuthError):
            raise QueuePermissionError(f"not allowed to move {qpath}/{name} to {path}: check auth and ACLs")
    return moved


def purge_quarantine(client: KazooClient, path: str) -> int:
    """Delete every node in the quarantine of the queue at ``path``; return how many were deleted."""
    qpath = quarantine_path(path)
    try:
        names = client.get_children(qpath)
    except NoNodeError:
        return 0
    return delete_children(client, qpath, names)
