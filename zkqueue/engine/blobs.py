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
from typing import Any, Sequence

from kazoo.exceptions import NodeExistsError, NoNodeError

from zkqueue.engine.commit import CONNECTION_ERRORS, create_op, delete_op, map_error, run_multi_retrying
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


@dataclass(frozen=True)
class LargeItems:
    """Settings of ``QueueBuilder.large_items``."""

    max_item_bytes: int = 64 * 2**20
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
class BlobWriter:
    """Puts of large items for one queue: blob, chunks, then the commit multi with the reference item."""

    def __init__(self, ctx: QueueContext, settings: LargeItems) -> None:
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
        self._create_blob(blob)
        try:
            self._write_chunks(ref, chunks)
            path = self._commit(ref, prefix, list(extra_ops))
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

    def _create_blob(self, blob: str) -> None:
        ctx = self._ctx
        ops = [create_op(blob, BlobState("writing", ctx.queue_path).encode(), acl=ctx.acl),
               create_op(naming.join(blob, large_ref.OWNER), b"", ephemeral=True, acl=ctx.acl)]
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
                result = run_multi_retrying(self._ctx, [create_op(large_ref.chunk_path(ref.blob, at), bytes(chunks[at]), acl=ctx.acl)])
                if not result.ok and isinstance(result.failure, NodeExistsError):
                    continue  # the lost request had committed (nobody else writes under our blob)
            if not result.ok:
                raise map_error(result.failure or RuntimeError(f"chunk {at} of {ref.blob} failed"))

    def _commit(self, ref: BlobRef, prefix: str, extra_ops: list[Any]) -> str | None:
        ctx = self._ctx
        state = BlobState("committed", ctx.queue_path, chunks=ref.chunks)
        ops = [*extra_ops,
               delete_op(naming.join(ref.blob, large_ref.OWNER)),
               protocol.SetDataOp(ref.blob, state.encode(), 0),
               create_op(prefix, large_ref.encode_ref(ref), sequence=True, acl=ctx.acl)]
        try:
            result = protocol.run_multi(ctx.client, ops, limit=ctx.jute_max_buffer)
        except CONNECTION_ERRORS as exc:
            return self._after_lost_commit(ref, exc)
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

    def _after_lost_commit(self, ref: BlobRef, exc: BaseException) -> str | None:
        """The commit's reply was lost: the blob's state tells whether it committed (it is set in that multi)."""
        ctx = self._ctx
        log.warning("commit of large item %s lost its reply (%r); reading the blob's state", ref.blob, exc)
        if not ctx.connection.wait(30.0):
            raise exc
        data, _stat = ctx.client.get(ref.blob)
        if BlobState.decode(data).state != "writing":
            return None  # committed; the next reader records the reference's name
        raise exc  # not committed; the owner went with the session, so the reaper reclaims the blob

    def _drop_owner(self, blob: str) -> None:
        try:
            self._ctx.client.delete_async(naming.join(blob, large_ref.OWNER))
        except Exception:  # the client may be closed; the owner is ephemeral anyway
            log.debug("could not drop the owner of %s", blob, exc_info=True)
