"""The write path of the Spark sink: rows -> Curator-framed item nodes, many creates per multi transaction.

One task writes one partition:

1. Each row becomes one payload (the ``valueColumn`` value, or the row as JSON, through the serializer) and one
   node-name prefix (``queue-``, or the priority / delay / id prefix from the key column, encoded exactly as
   Curator's recipes do). Without a ``valueColumn`` option a string or binary column ``value`` is the item, and
   for ``kind=id`` a column ``key`` is the id when there is no column ``id``, as in Spark's Kafka sink
   (:meth:`~zkqueue.spark.options.SinkOptions.with_conventions`: the driver applies it to the DataFrame's
   schema, :func:`row_pairs` to the first row's values).
2. Consecutive rows with the same prefix are framed together, up to ``itemsPerNode`` per znode (Curator's
   ``putMulti`` format); with the default of 1 every row is one Curator ``put``.
3. Nodes are grouped into multi transactions of up to ``batchSize`` creates, cut earlier so a request never
   exceeds ``jute.maxbuffer``; up to ``inflight`` multis are pipelined on the process's one session (ZooKeeper
   applies one session's requests in order, so the partition's items keep their order).

Delivery is at-least-once: a retried task, or a multi re-sent after ``ConnectionLoss`` (when its outcome is
unknown), may put items again. A lost connection does not fail the task as long as the session survives: every
request (multis included) is sent again once the client is back on the same session; a session that ends fails
the task with :class:`~zkqueue.spark.clients.SessionLostError` (see :mod:`zkqueue.spark.clients`).

``dedupe`` makes it exactly-once per (scope, partition, row). The scope is ``<query id>.<batch id>`` for a
stream and the ``dedupeKey`` (or a per-write random key) for a batch write. Every multi starts by creating
a marker node ``<dedupePath>/<scope>/p<partition>-r<first row index>``. ZooKeeper commits the marker and the
items together or not at all. When the multi is re-sent (task retry, re-run batch, lost connection), the
marker already exists. The whole multi then fails with NodeExistsError on op 0 and adds nothing, so those
rows count as ``deduped``. This needs no read before writing and no listing of the queue, and it still holds
after consumers took the first copy, which a check for existing ids would miss. It assumes that a retried
task sees the same rows in the same order. That holds for deterministic sources such as files and stream
offsets; a non-deterministic plan may shift rows between chunks.

``largeItems`` (off by default): a row whose framed node would not fit one request is stored as a large item,
by the engine's :class:`~zkqueue.engine.blobs.BlobWriter` (the blob under ``<queue>-blobs``, then one multi that
commits it and creates the reference item), instead of failing the task with ItemTooLargeError. Such a row
always gets a node of its own (with ``itemsPerNode`` > 1 the rows around it are framed without it, and nodes
are cut early rather than grow past the limit); the multis before it are settled first and it is committed before
anything after it is sent, so the partition keeps its order. With ``dedupe`` its marker is created in the
blob's commit multi, so a large row is exactly-once like the others. Rows above ``maxItemBytes`` still fail.
A blob whose writer died before its commit is reclaimed by any running queue built with ``large_items``.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoAuthError, NodeExistsError, NoNodeError

from zkqueue._extras import require
from zkqueue.engine.api import BlobTarget, BlobWriter, Counters, LargeItems, create_op
from zkqueue.formats import framing, naming
from zkqueue.engine import api
from zkqueue.errors import ItemTooLargeError, QueueFullError, QueuePermissionError, SerializationError
from zkqueue.spark.clients import TRANSIENT_ERRORS, await_session, call_with_reconnect, session_id
from zkqueue.spark.options import SinkOptions, load_serializer

log = logging.getLogger("zkqueue.spark.sink")

_RETRIES = 5  # re-sends of one multi after creating a missing parent
#: Bytes kept free in every multi for the dedupe marker (its path is short; this is generous).
_MARKER_RESERVE = 600


@dataclass
class SinkStats:
    """What one task (or :func:`put_partition` call) wrote."""

    rows: int = 0  # rows put in this call (excluding deduped ones)
    nodes: int = 0  # item znodes created
    multis: int = 0  # multi transactions committed
    deduped: int = 0  # rows skipped because their chunk was already committed (dedupe only)
    large_items: int = 0  # rows stored as large items (largeItems only; counted in rows and nodes too)

    def add(self, other: SinkStats) -> None:
        self.rows += other.rows
        self.nodes += other.nodes
        self.multis += other.multis
        self.deduped += other.deduped
        self.large_items += other.large_items


@dataclass
class _Node:
    prefix: str
    payloads: list[bytes]
    first_row: int
    size: int = 0  # framed bytes (tracked with largeItems only)
    large: bool = False  # too big for one znode: goes in as a large item


@dataclass
class _Chunk:
    ops: list[Any]
    rows: int
    nodes: int
    first_row: int
    marker: str | None = None
    large: tuple[str, bytes] | None = None  # (prefix, frame) of a large item, put on its own
    digest: str | None = None  # of the chunk's nodes, kept in its marker (dedupe)

    def with_marker(self, marker: str) -> _Chunk:
        """The same chunk under another marker name (its first op is the marker's create)."""
        first = self.ops[0]
        ops = [api.CreateOp(marker, first.data, first.acl, False, False), *self.ops[1:]]
        return _Chunk(ops, self.rows, self.nodes, self.first_row, marker, self.large, self.digest)


def chunk_digest(ops: Sequence[Any]) -> str:
    """A digest of a chunk's node data, in order: a retried task that reaches the same marker with other rows
    (a plan whose row order is not stable) is told apart from a true repeat."""
    h = hashlib.blake2b(digest_size=12)
    for op in ops:
        h.update(len(op.data).to_bytes(4, "big"))
        h.update(op.data)
    return h.hexdigest()


class _Connection:
    """What :class:`BlobWriter` needs of a queue's connection watch: ``wait`` for the client to be back, on the
    write's session (another session means the write's ephemeral nodes are gone: SessionLostError)."""

    def __init__(self, client: KazooClient, session: int | None, what: str) -> None:
        self._client = client
        self._session = session
        self._what = what

    def wait(self, timeout: float) -> bool:
        await_session(self._client, self._session, self._what, ConnectionLoss())
        return True


class Encoder:
    """Turns rows into (node prefix, payload) pairs for one queue kind; built once per task."""

    def __init__(self, options: SinkOptions, value_type: str | None) -> None:
        self.options = options
        self.serializer_name = options.resolve_serializer(value_type)
        self.serializer = load_serializer(self.serializer_name)
        self._plain = options.path + "/" + naming.ITEM_PREFIX
        self._cache: dict[Any, str] = {}

    def payload(self, value: Any, row: int) -> bytes:
        if value is None:
            what = f"column {self.options.value_column!r}" if self.options.value_column else "the row"
            raise SerializationError(f"row {row}: {what} is null; a queue item cannot be null")
        try:
            data = self.serializer.serialize(value)
        except Exception as exc:
            raise SerializationError(
                f"row {row}: serializer {self.serializer_name} failed on {type(value).__name__}: {exc}"
            ) from exc
        if not isinstance(data, bytes):
            if isinstance(data, (bytearray, memoryview)):
                return bytes(data)
            raise SerializationError(f"row {row}: serializer {self.serializer_name} returned {type(data).__name__}")
        return data

    def prefix(self, key: Any, row: int) -> str:
        kind = self.options.kind
        if kind == "plain":
            return self._plain
        cached = self._cache.get(key) if isinstance(key, (int, str, bytes)) and not isinstance(key, bool) else None
        if cached is not None:
            return cached
        if key is None:
            raise SerializationError(f"row {row}: the {kind} column {self.options.key_column!r} is null")
        try:
            if kind == "priority":
                name = naming.priority_prefix(key)
            elif kind == "delay":
                name = naming.delay_prefix(_epoch_ms(key))
            else:
                name = naming.id_prefix(key if isinstance(key, str) else _id_text(key))
        except (TypeError, ValueError) as exc:
            raise SerializationError(
                f"row {row}: bad {kind} value {key!r} in column {self.options.key_column!r}: {exc}"
            ) from exc
        prefix = self.options.path + "/" + name
        if len(self._cache) < 10_000 and isinstance(key, (int, str, bytes)):
            self._cache[key] = prefix
        return prefix


def _id_text(key: Any) -> str:
    """An id that is not a str: an integer's digits, or binary decoded as UTF-8 (Kafka keys are often binary)."""
    if isinstance(key, (bytes, bytearray, memoryview)):
        try:
            return bytes(key).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"a binary id must be UTF-8: {exc}") from None
    if isinstance(key, bool) or not isinstance(key, int):
        raise TypeError(f"an id must be a string, UTF-8 binary or an integer, got {type(key).__name__}")
    return str(key)


def _epoch_ms(value: Any) -> int:
    """A delay column value as epoch milliseconds: an integer, or a timestamp (naive ones are taken as UTC)."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return int(value.timestamp() * 1000)
    if isinstance(value, datetime.date):
        return int(datetime.datetime(value.year, value.month, value.day, tzinfo=datetime.timezone.utc).timestamp()
                   * 1000)
    return value


# ----------------------------------------------------------------------------------------------- row sources
def arrow_pairs(batches: Iterable[Any], encoder: Encoder) -> Iterator[tuple[str, bytes]]:
    """(prefix, payload) per row of pyarrow RecordBatches, converting whole columns at once."""
    options = encoder.options
    row = 0
    for batch in batches:
        names = batch.schema.names
        n = batch.num_rows
        if options.value_column is not None:
            values = batch.column(names.index(options.value_column)).to_pylist()
        else:
            values = batch.to_pylist()
            for field in batch.schema:
                if _has_map(field.type):  # Arrow gives maps as [(k, v)]; JSON wants an object
                    values = [{**v, field.name: _plain(v[field.name], field.type)} for v in values]
        keys = batch.column(names.index(options.key_column)).to_pylist() if options.key_column else None
        payload = encoder.payload
        if keys is None:
            prefix = encoder.prefix(None, row)
            for i in range(n):
                yield prefix, payload(values[i], row + i)
        else:
            prefix_of = encoder.prefix
            for i in range(n):
                yield prefix_of(keys[i], row + i), payload(values[i], row + i)
        row += n


def _has_map(arrow_type: Any) -> bool:
    pa = require("pyarrow", what="zkqueue.spark")

    if pa.types.is_map(arrow_type):
        return True
    if pa.types.is_struct(arrow_type):
        return any(_has_map(f.type) for f in arrow_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _has_map(arrow_type.value_type)
    return False


def _plain(value: Any, arrow_type: Any) -> Any:
    """``value`` (from ``to_pylist``) with every map turned into a dict, as Spark's own rows have it."""
    pa = require("pyarrow", what="zkqueue.spark")

    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        return {(k if isinstance(k, str) else str(k)): _plain(v, arrow_type.item_type) for k, v in value}
    if pa.types.is_struct(arrow_type):
        return {f.name: _plain(value.get(f.name), f.type) for f in arrow_type}
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [_plain(v, arrow_type.value_type) for v in value]
    return value


def _python_type(value: Any) -> str:
    """The Spark type name matching a Python value of a row, as far as the column conventions care."""
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "binary"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    return "void" if value is None else type(value).__name__


def row_pairs(rows: Iterable[Any], encoder: Encoder) -> Iterator[tuple[str, bytes]]:
    """(prefix, payload) per pyspark Row, dict or namedtuple. Rows carry no schema: the column conventions
    (:meth:`SinkOptions.with_conventions`) are decided by the first row's columns and values."""
    options = encoder.options
    for row_index, row in enumerate(rows):
        if isinstance(row, dict):
            record = row
        elif hasattr(row, "asDict"):
            record = row.asDict(recursive=True)
        elif hasattr(row, "_asdict"):
            record = row._asdict()
        else:
            raise SerializationError(f"row {row_index}: expected a pyspark Row or a dict, got {type(row).__name__}")
        if row_index == 0:
            types = {str(name): _python_type(value) for name, value in record.items()}
            resolved, notes = options.with_conventions(types)
            for note in notes:
                log.debug("put to %s: %s", options.path, note)
            if resolved is not options:
                options = resolved
                value_type = types.get(options.value_column) if options.value_column else None
                encoder = Encoder(options, value_type)
        key = None
        if options.key_column is not None:
            if options.key_column not in record:
                raise SerializationError(f"row {row_index}: no column {options.key_column!r}")
            key = record[options.key_column]
        if options.value_column is not None:
            if options.value_column not in record:
                raise SerializationError(f"row {row_index}: no column {options.value_column!r}")
            value = record[options.value_column]
        else:
            value = record
        yield encoder.prefix(key, row_index), encoder.payload(value, row_index)


# ----------------------------------------------------------------------------------------------- the writer
class PartitionWriter:
    """Writes one partition's (prefix, payload) pairs; see the module docstring for the protocol."""

    def __init__(self, client: KazooClient, options: SinkOptions, *, scope: str | None, partition: int) -> None:
        if options.dedupe and not scope:
            raise ValueError("dedupe needs a scope")
        self.client = client
        self.options = options
        self.scope_path = naming.join(options.dedupe_path, scope) if options.dedupe and scope else None
        self.partition = partition
        self.stats = SinkStats()
        self._session = session_id(client)  # the session this write must keep (see _call)
        limit = options.jute_max_buffer
        self._budget = limit - api.REQUEST_HEADER_BYTES - api.MULTI_HEADER_BYTES
        if self.scope_path is not None:
            self._budget -= _MARKER_RESERVE
        self._acl = client.default_acl or None
        self._base_sizes: dict[str, int] = {}  # op_size is costly per row; it is constant per prefix plus the data
        self._large: LargeItems | None = options.large_item_settings()
        self._blobs: BlobWriter | None = None

    def _base(self, prefix: str) -> int:
        """Bytes a sequential create at ``prefix`` adds to a multi, without its data."""
        base = self._base_sizes.get(prefix)
        if base is None:
            base = api.op_size(api.CreateOp(prefix, b"", self._acl, False, True), self.client)
            if len(self._base_sizes) < 10_000:
                self._base_sizes[prefix] = base
        return base

    # -- grouping
    def _nodes(self, pairs: Iterable[tuple[str, bytes]]) -> Iterator[_Node]:
        if self._large is not None:
            yield from self._sized_nodes(pairs)
            return
        per_node = self.options.items_per_node
        current: _Node | None = None
        for row, (prefix, payload) in enumerate(pairs):
            if current is not None and (current.prefix != prefix or len(current.payloads) >= per_node):
                yield current
                current = None
            if current is None:
                current = _Node(prefix, [payload], row)
            else:
                current.payloads.append(payload)
        if current is not None:
            yield current

    def _sized_nodes(self, pairs: Iterable[tuple[str, bytes]]) -> Iterator[_Node]:
        """Nodes with largeItems: a row too big for a znode of its own is a large node between the others, and a
        node is cut before it would grow past the limit."""
        per_node = self.options.items_per_node
        budget = self._budget
        current: _Node | None = None
        for row, (prefix, payload) in enumerate(pairs):
            room = budget - self._base(prefix)
            if framing.FRAME_OVERHEAD + framing.ITEM_OVERHEAD + len(payload) > room:
                if current is not None:
                    yield current
                    current = None
                yield _Node(prefix, [payload], row, large=True)
                continue
            if current is not None and (current.prefix != prefix or len(current.payloads) >= per_node
                                        or current.size + framing.ITEM_OVERHEAD + len(payload) > room):
                yield current
                current = None
            if current is None:
                current = _Node(prefix, [payload], row, framing.FRAME_OVERHEAD + framing.ITEM_OVERHEAD + len(payload))
            else:
                current.payloads.append(payload)
                current.size += framing.ITEM_OVERHEAD + len(payload)
        if current is not None:
            yield current

    def _chunks(self, nodes: Iterable[_Node]) -> Iterator[_Chunk]:
        limit = self.options.nodes_per_multi
        ops: list[Any] = []
        rows = 0
        first_row = 0
        used = 0
        acl = self._acl
        for node in nodes:
            data = framing.encode_items(node.payloads)
            if node.large:
                if ops:
                    yield self._chunk(ops, rows, first_row)
                    ops, rows, used = [], 0, 0
                yield self._large_chunk(node, data)
                continue
            op = api.CreateOp(node.prefix, data, acl, False, True)
            base = self._base(node.prefix)
            size = base + len(data)
            if size > self._budget:
                hint = ("lower itemsPerNode, or set option largeItems=true" if len(node.payloads) > 1
                        else "set option largeItems=true to store such rows as large items")
                raise ItemTooLargeError(len(data), self._budget - base,
                                        f"row {node.first_row} ({len(node.payloads)} item(s) in one znode; {hint})")
            if ops and (len(ops) >= limit or used + size > self._budget):
                yield self._chunk(ops, rows, first_row)
                ops, rows, used = [], 0, 0
            if not ops:
                first_row = node.first_row
            ops.append(op)
            rows += len(node.payloads)
            used += size
        if ops:
            yield self._chunk(ops, rows, first_row)

    def _chunk(self, ops: list[Any], rows: int, first_row: int) -> _Chunk:
        nodes = len(ops)
        marker = digest = None
        if self.scope_path is not None:
            marker = f"{self.scope_path}/p{self.partition}-r{first_row}"
            digest = chunk_digest(ops)
            ops = [api.CreateOp(marker, f"{rows}:{digest}".encode(), None, False, False), *ops]
        return _Chunk(ops, rows, nodes, first_row, marker, digest=digest)

    def _large_chunk(self, node: _Node, data: bytes) -> _Chunk:
        assert self._large is not None
        if len(data) > self._large.max_item_bytes:
            raise ItemTooLargeError(len(data), self._large.max_item_bytes,
                                    f"row {node.first_row} (a large item; option maxItemBytes)")
        marker = None if self.scope_path is None else f"{self.scope_path}/p{self.partition}-r{node.first_row}"
        return _Chunk([], 1, 1, node.first_row, marker, large=(node.prefix, data))

    # -- sending
    def _call(self, call: Any) -> Any:
        """``call()``, sent again after a connection loss once the client is back on this write's session."""
        return call_with_reconnect(self.client, call, f"sink write to {self.options.path}", session=self._session)

    def write(self, pairs: Iterable[tuple[str, bytes]]) -> SinkStats:
        # One exists() each (usually): creating parents up front keeps the first pipelined multis from failing.
        self._call(lambda: self.client.ensure_path(self.options.path))
        if self.scope_path is not None:
            self._call(lambda: self.client.ensure_path(self.scope_path))
        window: list[tuple[_Chunk, Any]] = []
        inflight = 1 if self.options.max_items is not None else self.options.inflight
        for chunk in self._chunks(self._nodes(pairs)):
            if chunk.large is not None:
                # Everything sent before it must be settled (a re-sent multi would land after it), and it is
                # committed before anything newer is sent.
                while window:
                    self._finish(*window.pop(0))
                if self.options.max_items is not None:
                    self._wait_for_room(1)
                self._put_large(chunk)
                continue
            if self.options.max_items is not None:
                self._wait_for_room(chunk.nodes)
            window.append((chunk, api.run_multi_async(self.client, chunk.ops)))
            if len(window) >= inflight and self._finish(*window.pop(0)):
                # The head had to be re-sent: settle the rest of the window before sending anything newer,
                # so re-sent chunks keep their place in the partition's order.
                while window:
                    self._finish(*window.pop(0))
        while window:
            self._finish(*window.pop(0))
        return self.stats

    def _blob_writer(self) -> BlobWriter:
        if self._blobs is None:
            assert self._large is not None
            path = self.options.path
            target = BlobTarget(client=self.client, queue_path=path, acl=self._acl,
                                jute_max_buffer=self.options.jute_max_buffer,
                                connection=_Connection(self.client, self._session, f"sink write to {path}"),
                                counters=Counters())
            self._blobs = BlobWriter(target, self._large)
        return self._blobs

    def _put_large(self, chunk: _Chunk) -> None:
        """Store one large row through the engine's blob writer (its marker in the commit multi with dedupe)."""
        assert chunk.large is not None
        prefix, data = chunk.large
        writer = self._blob_writer()
        marker = chunk.marker
        # With dedupe the marker commits with the reference item, so a large row is exactly-once like the others.
        extra = [] if marker is None else [create_op(marker, b"1")]
        try:
            if marker is not None and self._call(lambda: self.client.exists(marker)) is not None:
                raise NodeExistsError(marker)  # committed before: no need to write the blob again
            path = self._call(lambda: writer.put(data, prefix, extra_ops=extra))
        except NodeExistsError:
            if marker is None:
                raise
            self.stats.deduped += 1
            log.info("large row %d of partition %d was already written (marker %s); skipped", chunk.first_row,
                     self.partition, chunk.marker)
            return
        except NoAuthError as exc:
            raise QueuePermissionError(f"ZooKeeper refused a create under {self.options.path}: {exc!r}") from exc
        self.stats.rows += 1
        self.stats.nodes += 1
        self.stats.large_items += 1
        log.debug("row %d of partition %d (%d bytes framed) stored as large item %s", chunk.first_row,
                  self.partition, len(data), path)

    def _send(self, chunk: _Chunk) -> Any:
        return self._call(lambda: api.run_multi(self.client, chunk.ops))

    def _finish(self, chunk: _Chunk, pending: Any) -> bool:
        """Wait for one chunk's multi, re-sending it where that is needed and safe; True if it was re-sent."""
        try:
            try:
                result, retried = pending.get(), False
            except TRANSIENT_ERRORS as exc:
                log.warning(
                    "multi of %d node(s) to %s: %r; re-sending after reconnect (%s)", chunk.nodes,
                    self.options.path, exc,
                    "the dedupe marker makes this safe" if chunk.marker else "a duplicate is possible",
                )
                await_session(self.client, self._session, f"sink write to {self.options.path}", exc)
                result, retried = self._send(chunk), True
            for _ in range(_RETRIES):
                if result.ok or not isinstance(result.failure, NoNodeError):
                    break
                # A parent is missing: the marker scope (op 0 with dedupe) or the queue itself.
                marker_scope = chunk.marker is not None and result.failed_index == 0
                parent = self.scope_path if marker_scope else self.options.path
                self._call(lambda: self.client.ensure_path(parent))
                result, retried = self._send(chunk), True
        except NoAuthError as exc:
            raise QueuePermissionError(f"ZooKeeper refused a create under {self.options.path}: {exc!r}") from exc
        if result.ok:
            self.stats.rows += chunk.rows
            self.stats.nodes += chunk.nodes
            self.stats.multis += 1
            return retried
        failure, index = result.failure, result.failed_index
        if chunk.marker is not None and index == 0 and isinstance(failure, NodeExistsError):
            if self._same_rows(chunk):
                self.stats.deduped += chunk.rows
                log.info("rows %d..%d of partition %d were already written (marker %s); skipped",
                         chunk.first_row, chunk.first_row + chunk.rows - 1, self.partition, chunk.marker)
                return retried
            # Other rows than the first attempt's at this position: nothing is skipped (nothing may be lost),
            # and their own marker keeps a further retry of the same rows idempotent.
            log.warning("rows %d..%d of partition %d differ from those an earlier attempt wrote under %s (the plan's "
                        "row order is not stable): writing them; some rows may be stored twice", chunk.first_row,
                        chunk.first_row + chunk.rows - 1, self.partition, chunk.marker)
            alternate = chunk.with_marker(f"{chunk.marker}-{chunk.digest}")
            self._finish(alternate, self._call(lambda: api.run_multi_async(self.client, alternate.ops)))
            return True
        if isinstance(failure, NoAuthError):
            raise QueuePermissionError(
                f"ZooKeeper refused a create under {self.options.path}: {failure!r}") from failure
        raise failure if failure is not None else RuntimeError("multi failed without an error")

    def _same_rows(self, chunk: _Chunk) -> bool:
        """Whether the existing marker of ``chunk`` was written for the same rows (markers without a digest,
        from older versions, count as the same)."""
        try:
            data, _stat = self._call(lambda: self.client.get(chunk.marker))
        except NoNodeError:
            return False
        _rows, _, digest = data.decode("ascii", "replace").partition(":")
        return not digest or digest == chunk.digest

    def _wait_for_room(self, nodes: int) -> None:
        """Block until the queue holds fewer than ``maxItems - nodes`` item nodes (Curator counts nodes)."""
        limit = self.options.max_items
        assert limit is not None
        deadline = time.monotonic() + self.options.max_items_timeout
        while True:
            changed = threading.Event()
            try:
                children = self._call(
                    lambda: self.client.get_children(self.options.path, watch=lambda _e: changed.set()))
            except NoNodeError:
                self._call(lambda: self.client.ensure_path(self.options.path))
                continue
            count = sum(1 for name in children if naming.is_item_name(name))
            if count + nodes <= limit or count == 0:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not changed.wait(remaining):
                raise QueueFullError(
                    f"queue {self.options.path} still holds {count} item node(s) (maxItems={limit}) after "
                    f"{self.options.max_items_timeout:g}s"
                )


def write_pairs(
    client: KazooClient,
    options: SinkOptions,
    pairs: Iterable[tuple[str, bytes]],
    *,
    scope: str | None,
    partition: int,
) -> SinkStats:
    """Write ``pairs`` as one partition; ensure the dedupe scope exists first when deduplicating."""
    writer = PartitionWriter(client, options, scope=scope, partition=partition)
    return writer.write(pairs)


def delete_scopes(client: KazooClient, dedupe_path: str, scopes: Sequence[str]) -> int:
    """Delete dedupe marker scopes (and their markers); return how many existed."""
    deleted = 0
    for scope in scopes:
        try:
            client.delete(naming.join(dedupe_path, scope), recursive=True)
            deleted += 1
        except NoNodeError:
            pass
    return deleted
