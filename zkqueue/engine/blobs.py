"""Large items: writing a blob and committing its reference, reading it back, and the ops that end it.

Turned on by ``QueueBuilder.large_items(...)`` (:class:`LargeItems`). The layout, for a queue ``/q``::

    /q/queue-0000000007          reference node (see zkqueue.formats.large_ref), a normal queue item
    /q-blobs/b-<uuid>            blob node: its state record (writing, committed, moving, quarantined)
    /q-blobs/b-<uuid>/owner      ephemeral, while the writer is alive
    /q-blobs/b-<uuid>/c-000000   chunks, each below the packet limit

A put writes the blob node and its owner in one multi, then the chunks (pipelined, several requests in flight),
then commits in ONE multi: delete the owner, mark the blob committed, create the reference item. Until that
multi commits no consumer can see the item; a writer that dies leaves a blob without owner, which
:mod:`zkqueue.engine.blob_reaper` reclaims after the grace period.

Consumers of every mode read the blob when they are about to deliver the item (one item's bytes at a time), check
its length and checksum, and end it with the item: :func:`removal_ops` go into the same multi as the item's
delete. A requeue or move keeps the blob (the new reference node points at it) and marks it ``moving`` in the
same multi; the next consumer to read it records the new reference path again (:func:`read_frame`).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError

from zkqueue.engine.commit import CONNECTION_ERRORS, check_op, create_op, delete_op, map_error, run_multi_retrying
from zkqueue.engine.context import QueueContext
from zkqueue.errors import ConfigurationError, CorruptItemError, ItemTooLargeError
from zkqueue.formats import large_ref, naming
from zkqueue.formats.large_ref import BlobRef, BlobState
from zkqueue.transport import protocol

log = logging.getLogger("zkqueue.engine.blobs")

#: Most chunks one blob may have: its removal ops (one delete each) must fit the ack multi with room to spare.
MAX_CHUNKS = 400
#: Chunk writes (about 1 MB each) in flight at once.
_WINDOW = 4
#: Bytes kept free in each chunk's request beyond path and data.
_CHUNK_SLACK = 16 * 1024
#: Largest chunk, whatever the packet limit allows (the size the benchmark compares with).
_CHUNK_MAX = 1_000_000


#: The largest framed item accepted by default (bytes): 64 MiB.
DEFAULT_MAX_ITEM_BYTES = 64 * 2**20

@dataclass(frozen=True)
class LargeItems:
    """Settings of ``QueueBuilder.large_items``."""

    max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES
    compression: str = "zlib"
    orphan_grace: float = 60.0

    def __post_init__(self) -> None:
        if isinstance(self.max_item_bytes, bool) or not isinstance(self.max_item_bytes, int) or self.max_item_bytes <= 0:
            raise ConfigurationError(f"max_item_bytes must be a positive int, got {self.max_item_bytes!r}")
        if self.max_item_bytes > MAX_CHUNKS * _CHUNK_MAX:
            raise ConfigurationError(
                f"max_item_bytes is at most {MAX_CHUNKS * _CHUNK_MAX} (an item's chunks are removed in one multi)"
            )
        if self.compression not in large_ref.COMPRESSIONS:
            raise ConfigurationError(f"compression must be one of {large_ref.COMPRESSIONS}, got {self.compression!r}")
        if isinstance(self.orphan_grace, bool) or not isinstance(self.orphan_grace, (int, float)) or self.orphan_grace < 0:
            raise ConfigurationError(f"orphan_grace must be >= 0 seconds, got {self.orphan_grace!r}")


class BlobMissingError(CorruptItemError):
    """A large-item reference whose blob node does not exist."""


def blob_root(queue_path: str) -> str:
    """Where a queue's blobs live: a sibling of the queue node, like its quarantine."""
    return queue_path + "-blobs"


def chunk_size(jute_max_buffer: int) -> int:
    return max(1024, min(_CHUNK_MAX, jute_max_buffer - _CHUNK_SLACK))


# ---------------------------------------------------------------------------------------------- ops that end it
def removal_ops(ref: BlobRef) -> list[Any]:
    """Deletes of the blob's chunks and node: they commit in the same multi as its reference's delete."""
    return [delete_op(p) for p in ref.chunk_paths()] + [delete_op(ref.blob)]


def moving_ops(ref: BlobRef) -> list[Any]:
    """For the multi that re-creates ``ref`` under a new sequential name: the blob is marked ``moving`` (the next
    reader records the new name), which also makes the reaper's version-checked reclaim of it fail."""
    state = BlobState("moving", _queue_of(ref.blob), chunks=ref.chunks)
    return [protocol.SetDataOp(ref.blob, state.encode(), -1)]


def quarantined_ops(ref: BlobRef, target: str) -> list[Any]:
    """For the multi that moves ``ref``'s node to the quarantine at ``target``: the blob is kept for inspection."""
    state = BlobState("quarantined", _queue_of(ref.blob), item=target, chunks=ref.chunks)
    return [protocol.SetDataOp(ref.blob, state.encode(), -1)]


def _queue_of(blob: str) -> str:
    root = blob.rsplit("/", 1)[0]
    return root[: -len("-blobs")] if root.endswith("-blobs") else root


# ---------------------------------------------------------------------------------------------- reading
def read_frame(client: Any, ref: BlobRef, *, item_path: str | None = None) -> bytes:
    """The frame a reference stands for: its chunks read (pipelined), joined, checked and decompressed.

    Raises :class:`CorruptItemError` when the blob or a chunk is missing or the bytes do not match the reference.
    Connection errors propagate. When ``item_path`` is given and the blob does not name it as its reference yet
    (after a requeue or move), the name is recorded, best effort.
    """
    paths = [ref.blob, *ref.chunk_paths()]
    pending = [protocol.send_multi_read(client, [p]) for p in paths]
    results = [p.result()[0] for p in pending]
    head = results[0]
    if isinstance(head, NoNodeError):
        raise BlobMissingError(f"the blob {ref.blob} of a large-item reference is missing")
    if isinstance(head, BaseException):
        raise head
    chunks: list[bytes] = []
    for path, res in zip(paths[1:], results[1:]):
        if isinstance(res, NoNodeError):
            raise CorruptItemError(f"chunk {path} of a large item is missing")
        if isinstance(res, BaseException):
            raise res
        chunks.append(res[0])
    frame = large_ref.unpack(ref, chunks)
    if item_path is not None:
        _note_reference(client, ref, head, item_path)
    return frame


def node_frame(client: Any, data: bytes, *, item_path: str | None = None) -> bytes:
    """The Curator frame a queue node stands for: its own data, or for a large-item reference the frame read
    back from its blob (see :func:`read_frame`)."""
    if large_ref.is_ref(data):
        return read_frame(client, large_ref.decode_ref(data), item_path=item_path)
    return data


def _note_reference(client: Any, ref: BlobRef, head: tuple[bytes, Any], item_path: str) -> None:
    data, stat = head
    try:
        state = BlobState.decode(data)
    except CorruptItemError:
        log.warning("blob %s has a corrupt state record; recording its reference %s", ref.blob, item_path)
        state = BlobState("committed", _queue_of(ref.blob))
    if state.state in ("committed", "moving") and state.item != item_path:
        fixed = BlobState("committed", state.queue, item=item_path, chunks=ref.chunks)
        client.set_async(ref.blob, fixed.encode(), stat.version)  # a race lost here is harmless


# ---------------------------------------------------------------------------------------------- writing
class Reconnect(Protocol):
    def wait(self, timeout: float) -> bool: ...


class Tally(Protocol):
    def add(self, key: str, n: int = 1) -> None: ...


@dataclass(frozen=True)
class BlobTarget:
    """What a :class:`BlobWriter` writes through: the client, the queue whose blobs they are, the ACL of the nodes
    it creates, the request size limit, ``connection.wait(seconds) -> bool`` (wait for the client to be back) and
    ``counters.add(key)``. A queue's :class:`~zkqueue.engine.context.QueueContext` is one; a writer outside a queue
    (the Spark sink) builds one."""

    client: Any
    queue_path: str
    acl: Any
    jute_max_buffer: int
    connection: Reconnect
    counters: Tally


class BlobWriter:
    """Puts of large items for one queue: blob, chunks, then the commit multi with the reference item. ``ctx``:
    a :class:`BlobTarget` (or the queue's context, which has the same fields)."""

    def __init__(self, ctx: BlobTarget | QueueContext, settings: LargeItems) -> None:
        self._ctx = ctx
        self.settings = settings
        self.root = blob_root(ctx.queue_path)
        self._chunk = chunk_size(ctx.jute_max_buffer)

    def check(self, data: bytes) -> None:
        """:class:`ItemTooLargeError` before any I/O for a frame above ``max_item_bytes``."""
        if len(data) > self.settings.max_item_bytes:
            raise ItemTooLargeError(len(data), self.settings.max_item_bytes, "large item")

    def put(self, data: bytes, prefix: str, *, extra_ops: Sequence[Any] = ()) -> str | None:
        """Store frame ``data`` as a blob and commit a reference node at ``prefix``; returns the reference's path
        (None when the commit's reply was lost but the blob shows that it committed).

        ``extra_ops`` commit in the same multi as the reference (e.g. a writer's dedupe marker). When one of them
        fails, the blob is deleted and that op's error (e.g. ``NodeExistsError``) is raised."""
        self.check(data)
        ctx = self._ctx
        blob = naming.join(self.root, "b-" + uuid.uuid4().hex)
        ref, chunks = large_ref.pack(data, blob, self._chunk, self.settings.compression)
        try:
            path = self._write(ref, chunks, prefix, list(extra_ops))
        except BaseException:
            # The blob stays for the reaper (its owner goes with this session, or now): never a half item.
            self._drop_owner(blob)
            raise
        ctx.counters.add("large_items_put")
        if path is not None:
            hint = BlobState("committed", ctx.queue_path, item=path, chunks=ref.chunks)
            ctx.client.set_async(blob, hint.encode(), 1)  # created at version 0, committed at 1
        log.debug("large item of %d bytes (%d stored, %s) in %d chunk(s) at %s", ref.length, ref.stored,
                  ref.compression, ref.chunks, path)
        return path

    def _write(self, ref: BlobRef, chunks: Sequence[memoryview], prefix: str, extra_ops: list[Any]) -> str | None:
        """Blob, chunks and commit, sent back to back without waiting between them: ZooKeeper applies one
        session's requests in order, and the commit multi checks that every chunk exists, so it commits only
        when all of them were written. The chunk replies are awaited to keep ``_WINDOW`` of them in flight.
        When anything goes wrong (the blob root is missing on a first put, a lost connection), the put goes on
        step by step from what is there."""
        ctx = self._ctx
        client, limit = ctx.client, ctx.jute_max_buffer
        replies = [protocol.send_multi(client, self._blob_ops(ref.blob), limit=limit)]
        inflight: list[Any] = []
        failed = False
        for index, chunk in enumerate(chunks):
            op = create_op(large_ref.chunk_path(ref.blob, index), bytes(chunk), acl=ctx.acl)
            inflight.append(protocol.send_multi(client, [op], limit=limit))
            if len(inflight) >= _WINDOW and not self._settled(inflight.pop(0)):
                failed = True
                break
        if not failed:
            commit = protocol.send_multi(client, self._commit_ops(ref, prefix, extra_ops), limit=limit)
            outcomes = [self._settled(r) for r in (*replies, *inflight)]
            try:
                result = commit.result()
            except CONNECTION_ERRORS as exc:
                if self._was_committed(ref, exc):
                    return None  # the next reader records the reference's name
                return self._careful(ref, chunks, prefix, extra_ops)
            if result.ok:
                return result.results[-1]
            if result.failed_index is not None and result.failed_index < len(extra_ops):
                self._discard(ref)  # it will never be committed
                raise map_error(result.failure or RuntimeError(f"commit of {ref.blob} failed"))
            if all(outcomes):
                raise map_error(result.failure or RuntimeError(f"commit of {ref.blob} failed"))
        else:
            for r in (*replies, *inflight):
                self._settled(r)
        return self._careful(ref, chunks, prefix, extra_ops)

    @staticmethod
    def _settled(pending: Any) -> bool:
        """Wait for one sent multi; whether it committed (an error or a lost reply counts as not)."""
        try:
            return bool(pending.result().ok)
        except CONNECTION_ERRORS:
            return False

    def _careful(self, ref: BlobRef, chunks: Sequence[memoryview], prefix: str, extra_ops: list[Any]) -> str | None:
        """The put step by step: create what is missing of the blob and its chunks, then commit."""
        if not self._ctx.connection.wait(30.0):
            raise ConnectionLoss(f"no connection to finish writing {ref.blob}")
        self._create_blob(ref.blob)
        self._write_chunks(ref, chunks)
        return self._commit(ref, prefix, extra_ops)

    def _blob_ops(self, blob: str) -> list[Any]:
        ctx = self._ctx
        return [create_op(blob, BlobState("writing", ctx.queue_path).encode(), acl=ctx.acl),
                create_op(naming.join(blob, large_ref.OWNER), b"", ephemeral=True, acl=ctx.acl)]

    def _commit_ops(self, ref: BlobRef, prefix: str, extra_ops: list[Any]) -> list[Any]:
        """The commit multi: ``extra_ops``, a check of every chunk, the owner's delete, the blob marked committed
        (it was created at version 0), the reference item (last)."""
        state = BlobState("committed", self._ctx.queue_path, chunks=ref.chunks)
        return [*extra_ops,
                *(check_op(p) for p in ref.chunk_paths()),
                delete_op(naming.join(ref.blob, large_ref.OWNER)),
                protocol.SetDataOp(ref.blob, state.encode(), 0),
                create_op(prefix, large_ref.encode_ref(ref), sequence=True, acl=self._ctx.acl)]

    def _create_blob(self, blob: str) -> None:
        ctx = self._ctx
        ops = self._blob_ops(blob)
        for _attempt in range(3):
            result = run_multi_retrying(self._ctx, ops)
            if result.ok or (isinstance(result.failure, NodeExistsError) and result.failed_index == 0):
                return  # (exists: an attempt whose reply was lost committed; the name is ours alone)
            if isinstance(result.failure, NoNodeError) and result.failed_index == 0:
                ctx.client.ensure_path(self.root, acl=ctx.acl)
                continue
            raise map_error(result.failure or RuntimeError(f"could not create blob {blob}"))
        raise RuntimeError(f"could not create blob {blob}: its parent {self.root} keeps vanishing")

    def _write_chunks(self, ref: BlobRef, chunks: Sequence[memoryview]) -> None:
        ctx = self._ctx
        inflight: list[tuple[int, Any]] = []
        index = 0
        while index < len(chunks) or inflight:
            while index < len(chunks) and len(inflight) < _WINDOW:
                op = create_op(large_ref.chunk_path(ref.blob, index), bytes(chunks[index]), acl=ctx.acl)
                inflight.append((index, protocol.send_multi(ctx.client, [op], limit=ctx.jute_max_buffer)))
                index += 1
            at, pending = inflight.pop(0)
            try:
                result = pending.result()
            except CONNECTION_ERRORS:
                op = create_op(large_ref.chunk_path(ref.blob, at), bytes(chunks[at]), acl=ctx.acl)
                result = run_multi_retrying(self._ctx, [op])
            if not result.ok and isinstance(result.failure, NodeExistsError):
                continue  # written by an earlier attempt (nobody else writes under our blob)
            if not result.ok:
                raise map_error(result.failure or RuntimeError(f"chunk {at} of {ref.blob} failed"))

    def _commit(self, ref: BlobRef, prefix: str, extra_ops: list[Any]) -> str | None:
        ctx = self._ctx
        ops = self._commit_ops(ref, prefix, extra_ops)
        for attempt in range(3):
            try:
                result = protocol.run_multi(ctx.client, ops, limit=ctx.jute_max_buffer)
                break
            except CONNECTION_ERRORS as exc:
                if self._was_committed(ref, exc):
                    return None
                if attempt == 2:
                    raise  # not committed: the blob is left for the reaper once this session's owner is gone
        if not result.ok:
            if result.failed_index is not None and result.failed_index < len(extra_ops):
                self._discard(ref)  # it will never be committed
            raise map_error(result.failure or RuntimeError(f"commit of {ref.blob} failed"))
        return result.results[-1]

    def _discard(self, ref: BlobRef) -> None:
        """Delete a blob that will not be committed (best effort: otherwise the reaper reclaims it)."""
        ops = [delete_op(naming.join(ref.blob, large_ref.OWNER)), *removal_ops(ref)]
        try:
            protocol.run_multi(self._ctx.client, ops, limit=self._ctx.jute_max_buffer)
        except Exception:  # noqa: BLE001 - left for the reaper
            log.debug("could not delete the unneeded blob %s", ref.blob, exc_info=True)

    def _was_committed(self, ref: BlobRef, exc: BaseException) -> bool:
        """A commit's reply was lost: the blob's state tells whether it committed (it is set in that multi).
        Raises ``exc`` when the connection does not come back."""
        ctx = self._ctx
        log.warning("commit of large item %s lost its reply (%r); reading the blob's state", ref.blob, exc)
        if not ctx.connection.wait(30.0):
            raise exc
        try:
            data, _stat = ctx.client.get(ref.blob)
        except NoNodeError:
            return False
        return BlobState.decode(data).state != "writing"

    def _drop_owner(self, blob: str) -> None:
        try:
            self._ctx.client.delete_async(naming.join(blob, large_ref.OWNER))
        except Exception:  # the client may be closed; the owner is ephemeral anyway
            log.debug("could not drop the owner of %s", blob, exc_info=True)
