"""Result nodes in ZooKeeper: one node per key, written version-checked, large values through zkqueue's blobs.

Layout under the backend's root (``/celery-results`` in the URL's chroot unless its ``root`` option says
otherwise)::

    <root>/tasks/<task id>          a task's state and result (Celery's encoded meta)
    <root>/groups/<group id>        a saved GroupResult
    <root>/chords/<group id>        a chord's counter (see :mod:`zkqueue.celery.chords`)
    <root>/large/<uuid>/ref-0000000000   the reference node of a large value (see below)
    <root>/large-blobs/b-<uuid>     its blob and chunks (zkqueue's large-item layout)

Ids are escaped into one node name as zkqueue escapes queue names (:func:`zkqueue.formats.naming.escape_id`).

**Large values.** ZooKeeper refuses any request over ``jute.maxbuffer`` (1 MiB by default). A value too big for
one node is written as a zkqueue blob (chunks below the limit) by :class:`~zkqueue.engine.api.BlobWriter`, whose
commit multi also creates the value's own directory ``<root>/large/<uuid>`` and writes the result node: the
result node then holds a small pointer (:data:`LARGE_MAGIC` + the reference node's path). A fresh directory's
first sequential child is always ``ref-0000000000``, so the pointer is known before the multi commits, and a
reader never sees a pointer without its blob. Overwriting or deleting a large value deletes its blob, reference
and directory in the same multi as the result node's update. Values above ``max_value_bytes`` (64 MiB by
default) raise :class:`~zkqueue.errors.ItemTooLargeError`.

Every write is version-checked against the state it was decided on (:meth:`ResultStore.update`), so two writers
never overwrite each other blindly; reads and writes wait out a failover (a leader election, a reconnect).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)

from zkqueue.engine.api import (
    CONNECTION_ERRORS,
    DEFAULT_MAX_ITEM_BYTES,
    BlobTarget,
    BlobWriter,
    ClientConnection,
    Counters,
    LargeItems,
    blobs,
    create_op,
    delete_op,
    jute_max_buffer,
    multi_read,
    read_retrying,
    run_multi,
    set_op,
)
from zkqueue.errors import ConnectionLostError, CorruptItemError
from zkqueue.formats import large_ref, naming

log = logging.getLogger("zkqueue.celery.result_store")

#: First bytes of a result node that points at a large value (no Celery serializer starts so: JSON, msgpack,
#: YAML and pickle payloads never begin with a NUL byte).
LARGE_MAGIC = b"\x00zkqueue-large-result\x00"
#: Name of a large value's reference node: the first sequential child of its fresh directory.
REF_NAME = "ref-0000000000"
#: Bytes of a request kept free beyond a value's data (path, ACL, multi header, the other ops of the multi).
_SLACK = 64 * 1024
#: Seconds a read or write waits for a lost connection to come back before it fails.
DEFAULT_WAIT = 60.0


def node_name(key: str) -> str:
    """One node name for a task, group or chord id (reversible)."""
    escaped = naming.escape_id(key)
    if escaped in ("", ".", ".."):
        escaped = escaped.replace(".", "%2E") or "%00"
    return escaped


def key_of(name: str) -> str:
    """The id a node name stands for (inverse of :func:`node_name`)."""
    return naming.unescape_id(name)


@dataclass(frozen=True)
class Stored:
    """A result node as read: its value (a large one read back from its blob), version and modification time."""

    value: bytes
    version: int
    mtime_ms: int
    #: The reference node of a large value, else None.
    large_ref: str | None = None


class ConflictError(Exception):
    """The node changed between the read a write was decided on and the write: read again and decide again."""


class ExtraOpsFailed(Exception):
    """An op written with a value failed (the value was not written): write it without them."""

    def __init__(self, failure: BaseException | None) -> None:
        super().__init__(repr(failure))
        self.failure = failure


class ResultStore:
    """Reads and version-checked writes of result nodes under ``root`` with one started kazoo client."""

    def __init__(self, client: KazooClient, root: str, *, acl: Any = None,
                 max_value_bytes: int = DEFAULT_MAX_ITEM_BYTES, wait: float = DEFAULT_WAIT) -> None:
        self.client = client
        self.root = root.rstrip("/") or "/"
        self.acl = acl
        self.wait = wait
        self.tasks = naming.join(self.root, "tasks")
        self.groups = naming.join(self.root, "groups")
        self.chords = naming.join(self.root, "chords")
        self.large = naming.join(self.root, "large")
        self.limit = jute_max_buffer()
        self.inline_max = self.limit - _SLACK
        self.connection = ClientConnection(client)
        target = BlobTarget(client=client, queue_path=self.large, acl=acl, jute_max_buffer=self.limit,
                            connection=self.connection, counters=Counters())
        self._writer = BlobWriter(target, LargeItems(max_item_bytes=max_value_bytes))
        self._ensured = False

    # ------------------------------------------------------------------------------------------ paths
    def task_path(self, task_id: str) -> str:
        return naming.join(self.tasks, node_name(task_id))

    def group_path(self, group_id: str) -> str:
        return naming.join(self.groups, node_name(group_id))

    def chord_path(self, group_id: str) -> str:
        return naming.join(self.chords, node_name(group_id))

    def ensure(self) -> None:
        """Create the layout's parent nodes (once per store)."""
        if self._ensured:
            return
        for path in (self.tasks, self.groups, self.chords, self.large, blobs.blob_root(self.large)):
            self.retrying(lambda p=path: self.client.ensure_path(p, acl=self.acl), f"create {path}")
        self._ensured = True

    def retrying(self, call: Callable[[], Any], what: str) -> Any:
        """``call()`` again after connection errors, for up to :attr:`wait` seconds (only for calls that are safe
        to repeat: reads, and writes whose repetition is harmless or detected)."""
        return read_retrying(call, self.connection, self.wait, what)

    # ------------------------------------------------------------------------------------------ reads
    def read(self, path: str, *, watch: Callable[[Any], None] | None = None) -> Stored | None:
        """The node at ``path`` (None if there is none), a large value read back from its blob. With ``watch``,
        a one-shot kazoo watch is left on the node (on its creation when it does not exist yet)."""
        for _attempt in range(5):
            raw = self.retrying(lambda: self._get(path, watch), f"read {path}")
            if raw is None:
                return None
            try:
                return self._resolve(*raw)
            except (NoNodeError, CorruptItemError):
                continue  # overwritten or deleted between the two reads: read the node again
        raise CorruptItemError(f"the large value of {path} kept changing or is missing")

    def read_many(self, paths: list[str]) -> list[Stored | None]:
        """:meth:`read` of many nodes in one multiRead request (a large value takes reads of its own)."""
        if not paths:
            return []
        replies = self.retrying(lambda: multi_read(self.client, paths), f"read {len(paths)} results")
        out: list[Stored | None] = []
        for path, reply in zip(paths, replies):
            if isinstance(reply, NoNodeError):
                out.append(None)
            elif isinstance(reply, BaseException):
                raise reply
            else:
                data, stat = reply
                if data.startswith(LARGE_MAGIC):
                    out.append(self.read(path))
                else:
                    out.append(Stored(data, stat.version, stat.mtime))
        return out

    def _get(self, path: str, watch: Callable[[Any], None] | None) -> tuple[bytes, Any] | None:
        while True:
            try:
                return self.client.get(path, watch=watch)
            except NoNodeError:
                if self.client.exists(path, watch=watch) is None:
                    return None  # (the exists call left the watch on the node's creation)

    def _resolve(self, data: bytes, stat: Any) -> Stored:
        if not data.startswith(LARGE_MAGIC):
            return Stored(data, stat.version, stat.mtime)
        ref_path = data[len(LARGE_MAGIC):].decode("utf-8")
        ref_data, _ = self.client.get(ref_path)
        value = blobs.node_frame(self.client, ref_data)
        return Stored(value, stat.version, stat.mtime, ref_path)

    # ------------------------------------------------------------------------------------------ writes
    def update(self, path: str, decide: Callable[[Stored | None], bytes | None],
               extra_ops: Sequence[Any] = ()) -> bool:
        """Write ``decide(current)`` at ``path`` unless it returns None, version-checked against ``current``:
        when another writer got there first, read again and decide again. Whether something was written.

        ``extra_ops`` commit in the same multi as an inline value (a task's late ack: :mod:`.late_acks`); when one
        of them fails (or the value is large), the value is written without them.

        After a lost connection the write is decided again on what is then stored, so a write that did commit
        is seen (``decide`` must be ready to see its own value). The first try decides on "nothing stored" and
        creates the node (a result's first write: one round trip); a node already there fails that create, and the
        write is decided again on what is stored."""
        self.ensure()
        optimistic = True  # most writes are a task's first result: try a create before reading (one round trip)
        while True:
            guessed, optimistic = optimistic, False
            current = None if guessed else self.read(path)
            value = decide(current)
            if guessed and (value is None or len(value) > self.inline_max):
                continue  # decide on what is stored (a large value's blob is written before its multi fails)
            if value is None:
                return False
            try:
                self.write(path, value, current, extra_ops)
                return True
            except ConflictError:
                continue
            except ExtraOpsFailed as exc:
                log.info("the ops written with %s failed (%r); written without them", path, exc.failure)
                extra_ops = ()
                continue
            except CONNECTION_ERRORS:
                if not self.connection.wait(self.wait):
                    raise ConnectionLostError(f"write {path}", self.wait) from None

    def write(self, path: str, value: bytes, current: Stored | None, extra_ops: Sequence[Any] = ()) -> None:
        """Replace ``current`` (None: the node must not exist) by ``value``, in one multi with the removal of
        ``current``'s large value if it had one and (for an inline value) ``extra_ops``; :class:`ConflictError` if
        the node is not ``current`` any more, :class:`ExtraOpsFailed` if one of ``extra_ops`` failed."""
        old = self.large_removal_ops(current)
        if len(value) <= self.inline_max:
            node_op = (create_op(path, value, acl=self.acl) if current is None
                       else set_op(path, value, current.version))
            ops = [node_op, *old]
            first_extra = len(ops)
            result = run_multi(self.client, [*ops, *extra_ops], limit=self.limit)
            if not result.ok:
                failed = result.failed_index
                if extra_ops and failed is not None and failed >= first_extra:
                    raise ExtraOpsFailed(result.failure)
                self._raise(result.failure, path)
            return
        directory = naming.join(self.large, uuid.uuid4().hex)
        pointer = LARGE_MAGIC + naming.join(directory, REF_NAME).encode("utf-8")
        node_op = (create_op(path, pointer, acl=self.acl) if current is None
                   else set_op(path, pointer, current.version))
        try:
            self._writer.put(value, naming.join(directory, "ref-"),
                             extra_ops=[create_op(directory, b"", acl=self.acl), node_op, *old])
        except (NodeExistsError, BadVersionError, NoNodeError) as exc:
            self._raise(exc, path)
        log.debug("large result of %d bytes at %s", len(value), path)

    def delete(self, path: str) -> None:
        """Delete the node at ``path`` (and its large value); nothing if there is none."""
        while True:
            current = self.read(path)
            if current is None:
                return
            try:
                result = self.retrying(
                    lambda c=current: run_multi(self.client, [delete_op(path, c.version), *self.large_removal_ops(c)],
                                                limit=self.limit), f"delete {path}")
            except NotEmptyError:
                self.delete_tree(path)
                return
            if result.ok or isinstance(result.failure, NoNodeError):
                return
            if isinstance(result.failure, NotEmptyError):
                self.delete_tree(path)
                return
            if not isinstance(result.failure, BadVersionError):
                raise result.failure  # type: ignore[misc]

    def delete_tree(self, path: str) -> None:
        """Delete ``path`` and its children (chord nodes), whatever their versions."""
        self.retrying(lambda: self.client.delete(path, recursive=True), f"delete {path}")

    def large_removal_ops(self, current: Stored | None) -> list[Any]:
        """Ops that delete ``current``'s large value: its blob's chunks and node, its reference and directory."""
        if current is None or current.large_ref is None:
            return []
        try:
            data, _ = self.retrying(lambda: self.client.get(current.large_ref), f"read {current.large_ref}")
            ref = large_ref.decode_ref(data)
        except (NoNodeError, CorruptItemError):
            return []  # gone already; the version check of the node's own op decides
        directory = current.large_ref.rsplit("/", 1)[0]
        return [*blobs.removal_ops(ref), delete_op(current.large_ref), delete_op(directory)]

    def _raise(self, failure: BaseException | None, path: str) -> None:
        if isinstance(failure, (NodeExistsError, BadVersionError)):
            raise ConflictError(path)
        if isinstance(failure, NoNodeError):
            # deleted meanwhile, or a parent removed under us (a cleanup of the whole root): decide again
            self._ensured = False
            self.ensure()
            raise ConflictError(path)
        raise failure if failure is not None else RuntimeError(f"write of {path} failed")


def now_ms() -> int:
    return int(time.time() * 1000)
