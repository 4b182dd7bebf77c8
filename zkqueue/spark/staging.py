"""Durable claims of the Structured Streaming source: due items moved into numbered staging batches.

For a queue ``/q`` and a stream consumer id ``c``::

    /q-stream/c/owner                      ephemeral: the one live query of this consumer id
    /q-stream/c/b0000000007                a staged batch (its data: a small JSON record)
    /q-stream/c/b0000000007/s000000        a segment: many queue nodes (name and data each), in queue order
    /q-stream/c/b0000000007/s000001-L      a segment holding large-item references (their blobs go with it)

:meth:`Stage.stage` moves up to a limit of due items, in the queue's order, into a new batch. Each segment is one
multi: the segment's create and the delete of every queue node it holds, each under its version (and, with a lock
path, only if no lock-safe consumer holds it). So an item is in the queue or in exactly one segment, never both,
and staging costs about one write per item. A staged node is outside the queue node, so no queue consumer
(zkqueue or Curator) ever sees it. A queue node that cannot be decoded is moved to the queue's quarantine instead.

Readers only read segments; :meth:`Stage.commit` deletes the batches Spark has committed (with the blobs of their
large items). A batch that was staged but not committed is read again after a restart: a replay returns the same
rows.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from zkqueue.engine import api
from zkqueue.engine.api import blobs, create_op, delete_op, removal_ops
from zkqueue.errors import ConfigurationError, CorruptItemError, QueueStateError
from zkqueue.formats import framing, large_ref, naming
from zkqueue.spark.clients import TRANSIENT_ERRORS, await_session, call_with_reconnect, session_id
from zkqueue.spark.consumers import ordered_names
from zkqueue.spark.multis import commit_groups

log = logging.getLogger("zkqueue.spark.staging")

#: Names of staged batches: ``b`` and the batch number in 10 digits (so they sort by number).
BATCH_PREFIX = "b"
SEGMENT_PREFIX = "s"
#: Suffix of a segment that holds large-item references.
LARGE_SUFFIX = "-L"
OWNER = "owner"
#: Who numbers a consumer id's batches (recorded in its root node): a streaming query, or batch reads.
STREAM_MODE = "stream"
READ_MODE = "batch"
#: Queue nodes read per multiRead while staging.
_READ_CHUNK = 1000
#: Room kept free in a segment's multi beyond the segment's data and the deletes.
_SLACK = 16 * 1024
#: Most ops in one segment's multi.
_MAX_OPS = 3000
#: Reads of due nodes in flight (each of _READ_CHUNK nodes).
_READS_AHEAD = 3
#: Segment multis in flight.
_WINDOW = 3
#: Tries of one batch's staging across lost connections (each waits for the session to come back).
_ATTEMPTS = 5
#: Upper estimate of the bytes one delete, check or lock op adds to a multi, beyond its path.
_OP_BYTES = api.OP_OVERHEAD


#: (session id, consumer root) of the owner nodes this process holds: a second reader of the same consumer id in
#: this process shares the session, so the node's ephemeral owner alone cannot tell it from a lost create reply.
_HELD: set[tuple[int, str]] = set()


def stream_root(queue_path: str, consumer_id: str) -> str:
    return f"{queue_path}-stream/{consumer_id}"


def batch_name(number: int) -> str:
    return f"{BATCH_PREFIX}{number:010d}"


def batch_number(name: str) -> int | None:
    digits = name[len(BATCH_PREFIX):]
    return int(digits) if name.startswith(BATCH_PREFIX) and digits.isdigit() else None


def item_count(data: bytes) -> int:
    """Rows a queue node gives: its frame's items; a large item's reference counts as one (its blob is not read
    while staging); a node that cannot be decoded, 0."""
    if large_ref.is_ref(data):
        return 1
    try:
        return framing.count_items(data)
    except CorruptItemError:
        return 0


def encode_segment(entries: Iterable[tuple[str, bytes]]) -> bytes:
    """A segment's data: a Curator frame of (name, node data) pairs, in order."""
    return framing.encode_items([part for name, data in entries for part in (name.encode(), data)])


def decode_segment(data: bytes) -> list[tuple[str, bytes]]:
    parts = framing.decode_items(data, strict=True)
    if len(parts) % 2:
        raise CorruptItemError(f"a staging segment holds {len(parts)} parts, not (name, data) pairs")
    return [(parts[i].decode(), parts[i + 1]) for i in range(0, len(parts), 2)]


@dataclass
class _Entry:
    name: str
    data: bytes
    version: int
    rows: int
    ops: list[Any]


@dataclass
class _Segment:
    path: str
    entries: list[_Entry] = field(default_factory=list)

    def ops(self, acl: Any) -> list[Any]:
        data = encode_segment((e.name, e.data) for e in self.entries)
        return [create_op(self.path, data, acl=acl), *(op for e in self.entries for op in e.ops)]

    def entry_at(self, op_index: int) -> int | None:
        """The entry whose ops hold op ``op_index`` of :meth:`ops` (None: the segment's own create)."""
        op_index -= 1
        for i, e in enumerate(self.entries):
            if op_index < len(e.ops):
                return i if op_index >= 0 else None
            op_index -= len(e.ops)
        return None


@dataclass
class Stage:
    """The staging area of one stream consumer of one queue (driver side)."""

    client: Any
    queue_path: str
    consumer_id: str
    kind: str = "plain"
    lock_path: str | None = None
    acl: Any = None
    limit: int | None = None  # the server's jute.maxbuffer

    def due(self, names: list[str]) -> list[str]:
        """The due item names among ``names``, in consumption order."""
        return ordered_names(names, self.kind)

    @property
    def root(self) -> str:
        return stream_root(self.queue_path, self.consumer_id)

    # ------------------------------------------------------------------------------------------ owner
    def acquire(self, wait: float, mode: str = STREAM_MODE) -> None:
        """Become the one live reader of this consumer id: create the ephemeral owner node. An owner left by a
        driver that died goes with its session; this waits up to ``wait`` seconds for that, then refuses.

        ``mode`` is who numbers the batches: a streaming query (Spark's offsets) or batch reads
        (:func:`next_number`). The first reader of a consumer id records it; the other kind is refused."""
        self.client.ensure_path(self.root, acl=self.acl)
        self._check_mode(mode)
        held = (session_id(self.client), self.root)  # readers of one process share its cached client's session
        deadline = time.monotonic() + wait
        while True:
            try:
                call_with_reconnect(self.client, lambda: self.client.create(f"{self.root}/{OWNER}", b"",
                                                                            ephemeral=True, acl=self.acl),
                                    f"creating the stream owner {self.root}/{OWNER}")
                _HELD.add(held)
                return
            except NodeExistsError:
                stat = self.client.exists(f"{self.root}/{OWNER}")
                if stat is not None and stat.ephemeralOwner == session_id(self.client) and held not in _HELD:
                    _HELD.add(held)
                    return  # our own create, whose reply was lost
                if time.monotonic() >= deadline:
                    raise QueueStateError(
                        f"another reader (a streaming query or a batch read) has {self.queue_path} as consumer "
                        f"{self.consumer_id!r} (its owner node {self.root}/{OWNER} is held by a live session); "
                        "stop it or choose another consumerId"
                    ) from None
                time.sleep(0.25)

    def _check_mode(self, mode: str) -> None:
        data, stat = call_with_reconnect(self.client, lambda: self.client.get(self.root), f"reading {self.root}")
        try:
            recorded = json.loads(data).get("mode") if data else None
        except (ValueError, AttributeError):
            recorded = None
        if recorded == mode:
            return
        if recorded is not None:
            raise ConfigurationError(
                f"consumer id {self.consumer_id!r} of {self.queue_path} is used by {recorded} reads, not {mode} "
                "reads: a streaming query and batch reads of one queue need different consumerIds")
        try:
            self.client.set(self.root, json.dumps({"mode": mode}).encode(), version=stat.version)
        except BadVersionError:
            self._check_mode(mode)  # another reader recorded its mode first

    def next_number(self) -> int:
        """A batch number above every batch this consumer id ever staged (for batch reads, which have no
        offsets): the root's child version only grows, and every staged batch was one of its children."""
        stat = call_with_reconnect(self.client, lambda: self.client.exists(self.root), f"reading {self.root}")
        return (stat.cversion if stat is not None else 0) + 1

    def release(self) -> None:
        _HELD.discard((session_id(self.client), self.root))
        try:
            self.client.delete(f"{self.root}/{OWNER}")
        except NoNodeError:
            pass

    # ------------------------------------------------------------------------------------------ batches
    def _children(self, path: str) -> list[str]:
        """The children of ``path`` ([] when it does not exist), across a lost connection of this session."""
        try:
            return call_with_reconnect(self.client, lambda: self.client.get_children(path), f"listing {path}")
        except NoNodeError:
            return []

    def batches(self) -> list[int]:
        """Numbers of the staged batches not committed yet, in order."""
        names = self._children(self.root)
        return sorted(n for n in (batch_number(x) for x in names) if n is not None)

    def staged(self, number: int) -> list[str]:
        """Full paths of the segments of batch ``number``, in queue order."""
        path = f"{self.root}/{batch_name(number)}"
        names = self._children(path)
        return [naming.join(path, n) for n in sorted(n for n in names if n.startswith(SEGMENT_PREFIX))]

    def stage(self, number: int, max_items: int | None, only: set[str] | None = None) -> int:
        """Move up to ``max_items`` rows of due items (all when None; only names in ``only`` when given) into batch
        ``number``; return how many rows were staged (0: nothing due, and no batch node is left behind).

        When the connection is lost midway, this waits for the session to come back (or raises SessionLostError)
        and keeps what committed: the batch then holds the segments that exist, and the result is their count."""
        session = session_id(self.client)
        batch = f"{self.root}/{batch_name(number)}"
        for attempt in range(_ATTEMPTS):
            try:
                return self._stage(number, max_items, only)
            except TRANSIENT_ERRORS as exc:
                await_session(self.client, session, f"staging {batch}", exc)
                segments = [n for n in self._children(batch) if n.startswith(SEGMENT_PREFIX)]
                log.warning("staging %s lost the connection (%r); %d segment(s) had committed", batch, exc,
                            len(segments))
                if segments:
                    return len(segments)  # keep what committed: it is this batch
                if attempt == _ATTEMPTS - 1:
                    raise  # never report "nothing due" because of the connection
        raise AssertionError("unreachable")

    def _stage(self, number: int, max_items: int | None, only: set[str] | None) -> int:
        try:
            names = self.due(self.client.get_children(self.queue_path))
        except NoNodeError:
            return 0
        if only is not None:
            names = [n for n in names if n in only]
        if not names:
            return 0
        batch = f"{self.root}/{batch_name(number)}"
        try:
            self.client.create(batch, json.dumps({"staged_at": time.time()}).encode(), acl=self.acl)
        except NodeExistsError:
            pass  # an earlier attempt of this batch number left it (the caller checked it had no segments)
        rows = 0
        inflight: list[tuple[_Segment, Any]] = []
        for segment in self._segments(batch, names, max_items):
            inflight.append((segment, api.send_multi(self.client, segment.ops(self.acl), limit=self.limit)))
            if len(inflight) >= _WINDOW:
                rows += self._settle(*inflight.pop(0))
        while inflight:
            rows += self._settle(*inflight.pop(0))
        if rows == 0:
            self._delete_batch(batch)
        log.info("staged %d row(s) of %s into %s", rows, self.queue_path, batch)
        return rows

    def _segments(self, batch: str, names: list[str], max_items: int | None) -> Iterator[_Segment]:
        """Segments of due nodes (read ahead a chunk at a time), each fitting one multi, until ``max_items``."""
        budget = api.jute_max_buffer(self.limit) - _SLACK
        planned = 0
        index = 0
        segment = _Segment(f"{batch}/{SEGMENT_PREFIX}{index:06d}")
        used = ops = 0
        if max_items is not None:
            names = names[:max_items]  # every node gives at least one row: no need to read further
        chunks = [names[i : i + _READ_CHUNK] for i in range(0, len(names), _READ_CHUNK)]
        prefix = self.queue_path + "/"
        reads_ahead = [api.send_multi_read(self.client, [prefix + n for n in chunk])
                       for chunk in chunks[:_READS_AHEAD]]
        for k, chunk in enumerate(chunks):
            reads = reads_ahead.pop(0).result()
            if k + _READS_AHEAD < len(chunks):  # keep reading ahead while this chunk's segments commit
                reads_ahead.append(api.send_multi_read(self.client, [prefix + n for n in chunks[k + _READS_AHEAD]]))
            for name, res in zip(chunk, reads):
                if isinstance(res, BaseException):
                    continue  # taken by someone else meanwhile
                data, stat = res
                large = large_ref.is_ref(data)
                count = 1 if large else item_count(data)
                if count == 0:
                    self._quarantine(name, data, stat.version)
                    continue
                if max_items is not None and planned and planned + count > max_items:
                    if segment.entries:
                        yield segment
                    return
                move = self._move_ops(name, data, stat.version, large)
                entry = _Entry(name, data, stat.version, count, move)
                size = len(name) + len(data) + 10 + (4 * len(move[0].path) + _OP_BYTES if len(move) == 1 else
                                                     sum(4 * len(op.path) + _OP_BYTES for op in move))
                if size > budget:
                    log.error("queue node %s/%s (%d bytes) is too big to stage; left in the queue", self.queue_path,
                              name, len(data))
                    continue
                if segment.entries and (used + size > budget or ops + len(entry.ops) > _MAX_OPS):
                    yield segment
                    index += 1
                    segment = _Segment(f"{batch}/{SEGMENT_PREFIX}{index:06d}")
                    used = ops = 0
                segment.entries.append(entry)
                if large and not segment.path.endswith(LARGE_SUFFIX):
                    segment.path += LARGE_SUFFIX
                used += size
                ops += len(entry.ops)
                planned += count
        if segment.entries:
            yield segment

    def _settle(self, segment: _Segment, pending: Any) -> int:
        """Wait for a segment's multi; when it failed (an item was taken or changed by someone else meanwhile),
        send it again without that item. Returns the rows staged."""
        result = pending.result()
        while not result.ok:
            at = segment.entry_at(result.failed_index or 0)
            if at is None or not isinstance(result.failure, (NoNodeError, NodeExistsError, BadVersionError)):
                raise result.failure or RuntimeError(f"staging segment {segment.path} failed")
            del segment.entries[at]  # lost a race for it: it stays where it is now
            if not segment.entries:
                return 0
            result = api.run_multi(self.client, segment.ops(self.acl), limit=self.limit)
        return sum(e.rows for e in segment.entries)

    def _move_ops(self, name: str, data: bytes, version: int, large: bool) -> list[Any]:
        ops = removal_ops(self.queue_path, self.lock_path, name, curator_names=False, acl=self.acl, version=version)
        if large:
            try:
                ops.extend(blobs.moving_ops(large_ref.decode_ref(data)))  # the reaper keeps a moving blob
            except CorruptItemError:
                pass
        return ops

    def _quarantine(self, name: str, data: bytes, version: int) -> None:
        """A queue node that cannot be decoded goes to the queue's quarantine (as a queue consumer would do)."""
        target = naming.join(self.queue_path + "-quarantine", name)
        self.client.ensure_path(self.queue_path + "-quarantine", acl=self.acl)
        ops = [create_op(target + "-", data, sequence=True, acl=self.acl),
               *removal_ops(self.queue_path, self.lock_path, name, curator_names=False, acl=self.acl,
                            version=version)]
        (res,) = commit_groups(self.client, [ops], limit=self.limit)
        if res is True:
            log.error("queue node %s/%s cannot be decoded; moved to %s-quarantine", self.queue_path, name,
                      self.queue_path)

    def commit(self, upto: int) -> int:
        """Delete the staged batches numbered ``upto`` or lower (with the blobs of their large items); return how
        many were deleted."""
        done = 0
        for number in self.batches():
            if number > upto:
                break
            batch = f"{self.root}/{batch_name(number)}"
            call_with_reconnect(self.client, lambda: self._delete_batch(batch), f"deleting {batch}")  # idempotent
            done += 1
        return done

    def _delete_batch(self, batch: str) -> None:
        try:
            names = self.client.get_children(batch)
        except NoNodeError:
            return
        groups: list[list[Any]] = []
        for name in sorted(names):
            path = naming.join(batch, name)
            group = [delete_op(path)]
            if name.endswith(LARGE_SUFFIX):
                group.extend(self._blob_removals(path))
            groups.append(group)
        for res in commit_groups(self.client, groups, limit=self.limit):
            if res is not True and not isinstance(res.failure, NoNodeError):
                log.warning("could not delete a staged segment of %s: %r", batch, res.failure)
        try:
            self.client.delete(batch)
        except NoNodeError:
            pass

    def _blob_removals(self, segment: str) -> list[Any]:
        try:
            data, _stat = self.client.get(segment)
            entries = decode_segment(data)
        except (NoNodeError, CorruptItemError):
            return []
        ops: list[Any] = []
        for _name, node in entries:
            if large_ref.is_ref(node):
                try:
                    ops.extend(blobs.removal_ops(large_ref.decode_ref(node)))
                except CorruptItemError:
                    pass
        return ops


def decode_staged(client: Any, segments: Iterable[str]) -> Iterator[tuple[str, int, bytes]]:
    """(queue node name, index in node, payload) of every item in ``segments``, in order. Large items are read
    back from their blobs one at a time; a node that cannot be decoded is skipped and logged."""
    segments = list(segments)
    reads = call_with_reconnect(client, lambda: api.multi_read(client, segments),
                                "reading staging segments") if segments else []
    for segment, res in zip(segments, reads):
        if isinstance(res, BaseException):
            log.warning("staging segment %s cannot be read: %r (skipped)", segment, res)
            continue
        try:
            entries = decode_segment(res[0])
        except CorruptItemError as exc:
            log.error("staging segment %s is corrupt: %s (skipped)", segment, exc)
            continue
        for name, data in entries:
            try:
                if large_ref.is_ref(data):  # read back from its blob (the only read here that can lose a connection)
                    data = call_with_reconnect(client, lambda: blobs.node_frame(client, data),
                                               f"reading staged item {name}")
                payloads = framing.decode_items(data)
            except CorruptItemError as exc:
                log.error("staged item %s in %s is corrupt: %s (skipped)", name, segment, exc)
                continue
            for index, payload in enumerate(payloads):
                yield name, index, payload
