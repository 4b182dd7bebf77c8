"""How work travels to ZooKeeper: batched reads, checked multi transactions, pipelined async calls.

kazoo pays a large fixed cost per request, so the queue engine moves items in batches:

* :func:`multi_read` sends many getData (or getChildren) reads as ONE ``multiRead`` request (opcode 22,
  ZooKeeper 3.6+). kazoo does not expose it; :class:`MultiRead` is a small request class over kazoo's protocol
  layer, queued through the client's normal request queue so it is pipelined with every other call. Each read
  gets its own result or its own error: a failed read does not affect the others.
* :func:`run_multi` commits write ops (:class:`CreateOp`, :class:`DeleteOp`, :class:`SetDataOp`,
  :class:`CheckOp`) in ONE all-or-nothing ``multi`` transaction and reports which op failed.
  kazoo's ``TransactionRequest.commit`` hides failures in its result list; :class:`MultiResult` does not.
* :func:`get_many`, :func:`create_many`, :func:`delete_many` and :func:`pipeline` issue many ``*_async`` calls
  at once and gather their results in order (value or exception object per call).
* :func:`jute_max_buffer`, :func:`op_size`, :func:`multi_request_size`, :func:`max_create_data` and
  :func:`split_ops` keep every request under ZooKeeper's packet limit. The server drops the connection (the
  client sees ``ConnectionLoss``) when a request packet is longer than ``jute.maxbuffer``; the functions here
  check before sending and raise :class:`~zkqueue.errors.ItemTooLargeError` instead.

Failures of a whole request (``ConnectionLoss``, ``SessionExpiredError``, a closed client) are raised by the
synchronous functions and set on the async results. After ``ConnectionLoss`` a multi may or may not have been
committed: the caller must check, never blindly retry a sequential create.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeAlias

from kazoo.exceptions import EXCEPTIONS, RolledBackError, RuntimeInconsistency, ZookeeperError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import (
    CheckVersion,
    Create,
    Delete,
    GetChildren,
    GetData,
    MultiHeader,
    SetData,
    Transaction,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL, OPEN_ACL_UNSAFE

from zkqueue.errors import ConfigurationError, ItemTooLargeError

log = logging.getLogger("zkqueue.transport.protocol")

__all__ = [
    "DEFAULT_JUTE_MAXBUFFER",
    "JUTE_MAXBUFFER_ENV",
    "MAX_MULTI_BYTES",
    "MAX_MULTI_OPS",
    "MULTI_READ_OPCODE",
    "CheckOp",
    "CreateOp",
    "DeleteOp",
    "MultiRead",
    "MultiResult",
    "PendingMulti",
    "Op",
    "SetDataOp",
    "call",
    "create",
    "create_many",
    "delete_many",
    "gather",
    "get_many",
    "jute_max_buffer",
    "max_create_data",
    "multi_body",
    "multi_read",
    "multi_read_async",
    "multi_request_size",
    "op_size",
    "pipeline",
    "run_multi",
    "run_multi_async",
    "send_creates",
    "send_multi",
    "split_ops",
]

# ---------------------------------------------------------------------------------------------------------------
# Packet limits
# ---------------------------------------------------------------------------------------------------------------

#: ZooKeeper's default ``jute.maxbuffer`` (0xfffff): the longest request packet a server accepts. The packet
#: length counts the 4-byte xid, the 4-byte opcode and the request body (not the 4-byte length prefix itself).
DEFAULT_JUTE_MAXBUFFER = 0xFFFFF

#: Environment variable that overrides the limit (decimal or 0x-hex). Set it to the server's ``jute.maxbuffer``.
JUTE_MAXBUFFER_ENV = "ZKQUEUE_JUTE_MAXBUFFER"

#: Default cap on the number of ops put in one multi or multiRead by :func:`split_ops` and :func:`multi_read`.
#: ZooKeeper has no op-count limit of its own; this keeps one request's server work and response bounded.
MAX_MULTI_OPS = 1000

#: Opcode of ZooKeeper's read-only multi (``ZooDefs.OpCode.multiRead``).
MULTI_READ_OPCODE = 22

REQUEST_HEADER_BYTES = 8  # xid + opcode, counted in the server's packet-length check
MULTI_HEADER_BYTES = multiheader_struct.size  # type, done flag, err: 9 bytes before every op and at the end
_ERROR_OPCODE = -1

#: Largest multi packet (header + ops + end marker) under the DEFAULT limit. Guidance for planning only:
#: the limit in force is :func:`jute_max_buffer`, which the environment can change; prefer :func:`split_ops`.
MAX_MULTI_BYTES = DEFAULT_JUTE_MAXBUFFER


def jute_max_buffer(limit: int | None = None) -> int:
    """The request packet limit in bytes: ``limit`` if given, else ``$ZKQUEUE_JUTE_MAXBUFFER``, else 1048575.

    Raises :class:`~zkqueue.errors.ConfigurationError` for a value that is not a positive integer.
    """
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ConfigurationError(f"jute max buffer must be a positive int, got {limit!r}")
        return limit
    raw = os.environ.get(JUTE_MAXBUFFER_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_JUTE_MAXBUFFER
    try:
        value = int(raw.strip(), 0)
    except ValueError:
        raise ConfigurationError(f"{JUTE_MAXBUFFER_ENV}={raw!r} is not an integer") from None
    if value <= 0:
        raise ConfigurationError(f"{JUTE_MAXBUFFER_ENV}={raw!r} must be positive")
    return value


# ---------------------------------------------------------------------------------------------------------------
# Write ops
# ---------------------------------------------------------------------------------------------------------------


def _check_path(path: object) -> None:
    if not isinstance(path, str):
        raise TypeError(f"path must be a str, got {type(path).__name__}")


def _check_data(data: object) -> None:
    if data is not None and not isinstance(data, bytes):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")


def _check_version(version: object) -> None:
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"version must be an int, got {type(version).__name__}")


@dataclass(frozen=True, slots=True)
class CreateOp:
    """Create ``path``. With ``sequence`` the server appends a 10-digit counter (a trailing "/" is kept).

    ``acl=None`` means the client's ``default_acl``, else world:anyone with all permissions (as kazoo does).
    """

    path: str
    data: bytes = b""
    acl: Sequence[ACL] | None = None
    ephemeral: bool = False
    sequence: bool = False

    def __post_init__(self) -> None:
        _check_path(self.path)
        _check_data(self.data)
        if self.acl is not None and (isinstance(self.acl, ACL) or not isinstance(self.acl, (list, tuple))):
            raise TypeError("acl must be a list or tuple of kazoo ACL")
        if not isinstance(self.ephemeral, bool) or not isinstance(self.sequence, bool):
            raise TypeError("ephemeral and sequence must be bool")

    @property
    def flags(self) -> int:
        return (1 if self.ephemeral else 0) | (2 if self.sequence else 0)


@dataclass(frozen=True, slots=True)
class DeleteOp:
    """Delete ``path`` if its version matches (-1: any version)."""

    path: str
    version: int = -1

    def __post_init__(self) -> None:
        _check_path(self.path)
        _check_version(self.version)


@dataclass(frozen=True, slots=True)
class SetDataOp:
    """Replace the data of ``path`` if its version matches (-1: any version)."""

    path: str
    data: bytes
    version: int = -1

    def __post_init__(self) -> None:
        _check_path(self.path)
        _check_data(self.data)
        _check_version(self.version)


@dataclass(frozen=True, slots=True)
class CheckOp:
    """Fail the transaction unless ``path`` exists with this data version (-1: exists at all)."""

    path: str
    version: int

    def __post_init__(self) -> None:
        _check_path(self.path)
        _check_version(self.version)


Op: TypeAlias = CreateOp | DeleteOp | SetDataOp | CheckOp
_OP_TYPES = (CreateOp, DeleteOp, SetDataOp, CheckOp)


def _resolve_acl(client: Any, acl: Sequence[ACL] | None) -> Sequence[ACL]:
    if acl is None:
        acl = getattr(client, "default_acl", None) if client is not None else None
    return acl or OPEN_ACL_UNSAFE


def _chroot(client: Any) -> str:
    return (getattr(client, "chroot", None) or "") if client is not None else ""


def _full_path(root: str, path: str, trailing: bool = False) -> str:
    """``path`` with the chroot ``root`` prepended, as kazoo's ``_prefix_root`` makes it.

    Paths the queues send are already normal (absolute, no empty, ``.`` or ``..`` segments), and for those
    plain concatenation is the same string at a fraction of the cost: this runs once per op in every multi.
    """
    if path.startswith("/") and "//" not in path and "/." not in path and not path.endswith("/"):
        return path if root in ("", "/") else root + path
    return _prefix_root(root, path, trailing=trailing)


def _to_request(client: Any, op: Op) -> Any:
    """The kazoo request record for one op, with the client's chroot applied."""
    root = _chroot(client)
    if isinstance(op, CreateOp):
        path = _full_path(root, op.path, trailing=op.sequence)
        return Create(path, op.data, list(_resolve_acl(client, op.acl)), op.flags)
    if isinstance(op, DeleteOp):
        return Delete(_full_path(root, op.path), op.version)
    if isinstance(op, SetDataOp):
        return SetData(_full_path(root, op.path), op.data, op.version)
    if isinstance(op, CheckOp):
        return CheckVersion(_full_path(root, op.path), op.version)
    raise TypeError(f"not a multi op: {op!r} (use CreateOp, DeleteOp, SetDataOp or CheckOp)")


# ---------------------------------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------------------------------


def _string_size(s: str | None) -> int:
    # kazoo writes an empty or missing string as length -1 with no bytes.
    return 4 + (len(s.encode("utf-8")) if s else 0)


def _acl_size(acl: Sequence[ACL]) -> int:
    return 4 + sum(4 + _string_size(a.id.scheme) + _string_size(a.id.id) for a in acl)


def op_size(op: Op, client: Any = None) -> int:
    """Bytes ``op`` adds to a multi request: its 9-byte op header plus its serialized record.

    ``client`` supplies the chroot (which is part of every path on the wire) and the default ACL.
    """
    return _request_size(_to_request(client, op))


def _request_size(req: Any) -> int:
    """Bytes one built kazoo request record adds to a multi (op header included)."""
    if isinstance(req, Create):
        data = 4 + (len(req.data) if req.data is not None else 0)
        body = _string_size(req.path) + data + _acl_size(req.acl) + 4
    elif isinstance(req, SetData):
        body = _string_size(req.path) + 4 + (len(req.data) if req.data is not None else 0) + 4
    elif isinstance(req, (Delete, CheckVersion)):
        body = _string_size(req.path) + 4
    else:
        raise TypeError(f"not a multi op: {req!r}")
    return MULTI_HEADER_BYTES + body


def multi_request_size(ops: Iterable[Op], client: Any = None) -> int:
    """The packet length (as the server checks it against ``jute.maxbuffer``) of one multi holding ``ops``."""
    return _requests_size([_to_request(client, op) for op in ops])


def _requests_size(requests: Sequence[Any]) -> int:
    return REQUEST_HEADER_BYTES + sum(_request_size(r) for r in requests) + MULTI_HEADER_BYTES


def max_create_data(
    path: str,
    client: Any = None,
    *,
    acl: Sequence[ACL] | None = None,
    sequence: bool = False,
    limit: int | None = None,
) -> int:
    """The largest data length one create of ``path`` can carry when sent alone in a multi.

    Callers compare their framed payload length with this to raise ItemTooLargeError before any I/O.
    ``path`` is what is sent (for a sequential node: the prefix, without the server's 10 digits).
    A negative result means even empty data does not fit.
    """
    empty = CreateOp(path, b"", acl=acl, sequence=sequence)
    return jute_max_buffer(limit) - multi_request_size([empty], client)


def split_ops(
    ops: Iterable[Op],
    client: Any = None,
    *,
    limit: int | None = None,
    max_ops: int = MAX_MULTI_OPS,
) -> list[list[Op]]:
    """Split ``ops`` in order into groups that each fit one multi: at most ``max_ops`` ops and a packet of at
    most :func:`jute_max_buffer` bytes. Each group is its own transaction; atomicity holds within a group only.

    Raises ItemTooLargeError if a single op cannot fit a multi on its own.
    """
    if isinstance(max_ops, bool) or not isinstance(max_ops, int) or max_ops <= 0:
        raise ConfigurationError(f"max_ops must be a positive int, got {max_ops!r}")
    cap = jute_max_buffer(limit)
    budget = cap - REQUEST_HEADER_BYTES - MULTI_HEADER_BYTES
    groups: list[list[Op]] = []
    current: list[Op] = []
    used = 0
    for op in ops:
        size = op_size(op, client)
        if size > budget:
            raise ItemTooLargeError(size + cap - budget, cap, _describe(op))
        if current and (used + size > budget or len(current) >= max_ops):
            groups.append(current)
            current, used = [], 0
        current.append(op)
        used += size
    if current:
        groups.append(current)
    return groups


def _describe(op: Op) -> str:
    return f"{type(op).__name__} of {op.path!r}"


# ---------------------------------------------------------------------------------------------------------------
# Checked multi transaction
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MultiResult:
    """Outcome of one multi transaction.

    ``results`` has one entry per op, in order: the created path (chroot removed) for a create, ``True`` for a
    delete or check, the new ZnodeStat for a set-data; when the transaction failed, exception objects
    (``RolledBackError`` for ops that would have succeeded, the real error at ``failed_index``,
    ``RuntimeInconsistency`` for ops after it). Nothing was changed unless ``ok``.
    """

    ok: bool
    results: list[Any] = field(default_factory=list)
    failed_index: int | None = None
    failure: Exception | None = None

    def raise_for_failure(self) -> MultiResult:
        """Raise ``failure`` (the op's kazoo exception) if the transaction failed; return self otherwise."""
        if not self.ok:
            raise self.failure if self.failure is not None else RuntimeError("multi failed without an error")
        return self

    @classmethod
    def from_results(cls, results: list[Any]) -> MultiResult:
        errors = [i for i, r in enumerate(results) if isinstance(r, Exception)]
        if not errors:
            return cls(True, results, None, None)
        # The op that made the server roll back: the first error that is not a rollback marker.
        index = next(
            (i for i in errors if not isinstance(results[i], (RolledBackError, RuntimeInconsistency))),
            errors[0],
        )
        return cls(False, results, index, results[index])


def _check_ops(ops: Iterable[Op]) -> list[Op]:
    ops = list(ops)
    for op in ops:
        if not isinstance(op, _OP_TYPES):
            raise TypeError(f"not a multi op: {op!r} (use CreateOp, DeleteOp, SetDataOp or CheckOp)")
    return ops


def run_multi_async(client: Any, ops: Iterable[Op], *, limit: int | None = None) -> IAsyncResult:
    """Send ``ops`` as ONE multi transaction; the async result's value is a :class:`MultiResult`.

    Bad ops raise TypeError and an oversized request raises ItemTooLargeError here, before anything is sent.
    Errors of the whole request (ConnectionLoss: outcome unknown; SessionExpiredError; closed client) are set
    as the async result's exception.
    """
    ops = _check_ops(ops)
    if not ops:
        return _ready(client, MultiResult(True, [], None, None))
    requests = [_to_request(client, op) for op in ops]
    size = _requests_size(requests)
    cap = jute_max_buffer(limit)
    if size > cap:
        raise ItemTooLargeError(size, cap, f"multi request of {len(ops)} ops")
    inner = client.handler.async_result()
    client._call(Transaction(requests), inner)
    count = len(ops)

    def combine(values: list[Any]) -> MultiResult:
        results = list(values[0])
        if len(results) != count:
            raise RuntimeError(f"multi returned {len(results)} results for {count} ops")
        return MultiResult.from_results(results)

    return _DerivedResult([inner], combine)


def run_multi(
    client: Any, ops: Iterable[Op], *, limit: int | None = None, timeout: float | None = None
) -> MultiResult:
    """Commit ``ops`` in ONE all-or-nothing multi transaction and return what happened to each op.

    Op failures (node exists, no node, bad version, no auth...) come back in the MultiResult, never hidden.
    Errors of the whole request are raised; after ConnectionLoss the outcome is unknown.
    """
    return send_multi(client, ops, limit=limit).result(timeout)


class PendingMulti:
    """A multi sent by :func:`send_multi`; :meth:`result` waits for its :class:`MultiResult`."""

    __slots__ = ("_count", "_reply")

    def __init__(self, reply: _Reply, count: int) -> None:
        self._reply = reply
        self._count = count

    def result(self, timeout: float | None = None) -> MultiResult:
        """The outcome of every op; raises the error of the whole request (ConnectionLoss: outcome unknown)."""
        results = list(self._reply.get(timeout))
        if len(results) != self._count:
            raise RuntimeError(f"multi returned {len(results)} results for {self._count} ops")
        return MultiResult.from_results(results)


def send_multi(client: Any, ops: Iterable[Op], *, limit: int | None = None) -> PendingMulti:
    """Send ``ops`` as ONE multi transaction without waiting (pipelined with the client's other requests).

    The lighter sibling of :func:`run_multi_async`: no kazoo async result, no completion thread, and the
    request bytes are built straight from the ops (:func:`multi_body`). Bad ops raise TypeError and an oversized
    request raises ItemTooLargeError here, before anything is sent.
    """
    ops = _check_ops(ops)
    if not ops:
        return _no_ops()
    return _send_body(client, multi_body(client, ops), len(ops), limit, f"multi request of {len(ops)} ops")


def _no_ops() -> PendingMulti:
    """An empty multi: answered at once, nothing sent."""
    reply = _Reply()
    reply.set([])
    return PendingMulti(reply, 0)


def _send_body(client: Any, body: bytes, count: int, limit: int | None, what: str) -> PendingMulti:
    """Send a multi ``body`` of ``count`` ops unless its packet exceeds the limit (ItemTooLargeError)."""
    size = REQUEST_HEADER_BYTES + len(body)
    cap = jute_max_buffer(limit)
    if size > cap:
        raise ItemTooLargeError(size, cap, what)
    return PendingMulti(_send(client, _PrebuiltTransaction(body)), count)


_CREATE_HEADER = multiheader_struct.pack(Create.type, False, -1)
_DELETE_HEADER = multiheader_struct.pack(Delete.type, False, -1)
_SET_DATA_HEADER = multiheader_struct.pack(SetData.type, False, -1)
_CHECK_HEADER = multiheader_struct.pack(CheckVersion.type, False, -1)
_MULTI_END = multiheader_struct.pack(-1, True, -1)


def _acl_bytes(acl: Sequence[ACL]) -> bytes:
    out = bytearray(int_struct.pack(len(acl)))
    for a in acl:
        out += int_struct.pack(a.perms) + write_string(a.id.scheme) + write_string(a.id.id)
    return bytes(out)


def _buffer(data: bytes | None) -> bytes:
    return int_struct.pack(-1) if data is None else int_struct.pack(len(data)) + data


def multi_body(client: Any, ops: Sequence[Op]) -> bytes:
    """The body of a ``multi`` request holding ``ops`` (chroot applied): byte for byte what kazoo's
    ``Transaction.serialize`` produces for the same records, without building them."""
    root = _chroot(client)
    pack = int_struct.pack
    acls: dict[int, bytes] = {}  # id(acl list) -> bytes; the lists stay alive in ``ops`` during the call
    out = bytearray()
    for op in ops:
        if isinstance(op, DeleteOp):
            out += _DELETE_HEADER
            out += write_string(_full_path(root, op.path))
            out += pack(op.version)
        elif isinstance(op, CreateOp):
            acl = _resolve_acl(client, op.acl)
            acl_bytes = acls.get(id(acl))
            if acl_bytes is None:
                acl_bytes = acls[id(acl)] = _acl_bytes(acl)
            out += _CREATE_HEADER
            out += write_string(_full_path(root, op.path, trailing=op.sequence))
            out += _buffer(op.data)
            out += acl_bytes
            out += pack(op.flags)
        elif isinstance(op, SetDataOp):
            out += _SET_DATA_HEADER
            out += write_string(_full_path(root, op.path))
            out += _buffer(op.data)
            out += pack(op.version)
        elif isinstance(op, CheckOp):
            out += _CHECK_HEADER
            out += write_string(_full_path(root, op.path))
            out += pack(op.version)
        else:
            raise TypeError(f"not a multi op: {op!r} (use CreateOp, DeleteOp, SetDataOp or CheckOp)")
    out += _MULTI_END
    return bytes(out)


class _PrebuiltTransaction(Transaction):
    """A multi whose body was serialized by the sender (kazoo still treats it as a Transaction: same opcode,
    same reply parsing and chroot removal)."""

    __slots__ = ()

    def serialize(self) -> bytes:
        return self.operations

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list[Any]:
        """The reply, parsed as kazoo's ``Transaction.deserialize`` does (same values, same order) with plain
        struct reads instead of a MultiHeader record per op."""
        unpack_header = multiheader_struct.unpack_from
        header_size = multiheader_struct.size
        unpack_int = int_struct.unpack_from
        results: list[Any] = []
        append = results.append
        while True:
            op_type, done, _ = unpack_header(buf, offset)
            offset += header_size
            if done:
                return results
            if op_type == Create.type:
                length = unpack_int(buf, offset)[0]
                offset += 4
                if length < 0:
                    raise RuntimeError("multi reply: a create result without a path")
                append(buf[offset : offset + length].decode("utf-8"))
                offset += length
            elif op_type == Delete.type or op_type == CheckVersion.type:
                append(True)
            elif op_type == SetData.type:
                append(ZnodeStat._make(stat_struct.unpack_from(buf, offset)))
                offset += stat_struct.size
            elif op_type == _ERROR_OPCODE:
                append(EXCEPTIONS[unpack_int(buf, offset)[0]]())
                offset += 4
            else:
                raise RuntimeError(f"multi reply: unexpected op type {op_type}")


def _create_head_tail(client: Any, op: CreateOp) -> tuple[bytes, bytes]:
    """The bytes of ``op`` in a multi before its data (op header, path) and after it (ACL, flags)."""
    full = _full_path(_chroot(client), op.path, trailing=op.sequence)
    return _CREATE_HEADER + write_string(full), _acl_bytes(_resolve_acl(client, op.acl)) + int_struct.pack(op.flags)


def send_creates(
    client: Any,
    items: Sequence[tuple[str, bytes]],
    *,
    acl: Sequence[ACL] | None = None,
    ephemeral: bool = False,
    sequence: bool = False,
    limit: int | None = None,
) -> PendingMulti:
    """ONE multi creating every ``(path, data)`` of ``items`` with the same ``acl`` and flags, sent without
    waiting: the queue's put path. The bytes on the wire are exactly those of
    ``send_multi(client, [CreateOp(path, data, acl, ephemeral, sequence) ...])``, built with each distinct
    path's and the ACL's serialization done once per call instead of once per item.
    """
    CreateOp("/", b"", acl, ephemeral, sequence)  # a CreateOp's argument checks, even when there are no items
    if not items:
        return _no_ops()
    parts: dict[str, tuple[bytes, bytes]] = {}  # path -> (op header + path, ACL + flags)
    body = bytearray()
    for path, data in items:
        known = parts.get(path)
        if known is None:
            known = parts[path] = _create_head_tail(client, CreateOp(path, b"", acl, ephemeral, sequence))
        if type(data) is not bytes:
            _check_data(data)  # None (written as length -1, as kazoo does) or a TypeError
        body += known[0]
        body += _buffer(data)
        body += known[1]
    body += _MULTI_END
    return _send_body(client, bytes(body), len(items), limit, f"multi request of {len(items)} creates")


# ---------------------------------------------------------------------------------------------------------------
# Direct synchronous requests
# ---------------------------------------------------------------------------------------------------------------


class _Reply:
    """The slot kazoo's connection thread fills with one request's reply (``set``/``set_exception``).

    kazoo's synchronous calls wait through two async results chained on its completion thread (three thread
    hand-offs per request, a ``functools.wraps`` per call); this is one lock released by the connection thread.
    Only the first outcome counts (kazoo may report a closed connection twice for one request).
    """

    __slots__ = ("_done", "_settled", "exception", "value")

    def __init__(self) -> None:
        self._done = threading.Lock()
        self._done.acquire()
        self._settled = False
        self.value: Any = None
        self.exception: BaseException | None = None

    def set(self, value: Any = None) -> None:
        if not self._settled:
            self._settled = True
            self.value = value
            self._release()

    def set_exception(self, exception: BaseException) -> None:
        if not self._settled:
            self._settled = True
            self.exception = exception
            self._release()

    def _release(self) -> None:
        try:
            self._done.release()
        except RuntimeError:  # already released by a racing second outcome
            pass

    def get(self, timeout: float | None = None) -> Any:
        if not self._done.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise KazooTimeoutError(f"no reply within {timeout} seconds")
        self._done.release()
        if self.exception is not None:
            raise self.exception
        return self.value


def call(client: Any, request: Any, *, timeout: float | None = None) -> Any:
    """Send one kazoo request record (``Create``, ``Transaction``, ``MultiRead``...) and wait for its reply.

    The request goes through the client's own queue, in order with every other call; errors are raised as kazoo
    raises them (a request in flight when the connection drops fails with ConnectionLoss). Paths in the reply
    keep the chroot, except a ``Transaction``'s (kazoo removes it). With ``timeout`` a missing reply raises
    ``KazooTimeoutError``; the request may still complete later.
    """
    return _send(client, request).get(timeout)


def _send(client: Any, request: Any) -> _Reply:
    """Queue ``request`` on the client (in order with its other calls); the reply arrives in the returned slot."""
    reply = _Reply()
    client._call(request, reply)
    return reply


def create(client: Any, op: CreateOp, *, timeout: float | None = None) -> str:
    """Create one node (``op``) and return its path (with the server's sequence suffix, without the chroot):
    ``client.create`` through :func:`call`."""
    return client.unchroot(call(client, _to_request(client, op), timeout=timeout))


# ---------------------------------------------------------------------------------------------------------------
# multiRead (opcode 22)
# ---------------------------------------------------------------------------------------------------------------


def _error(code: int) -> Exception:
    if code in EXCEPTIONS:
        return EXCEPTIONS[code]()
    exc = ZookeeperError(f"ZooKeeper error code {code}")
    exc.code = code  # type: ignore[attr-defined]
    return exc


class MultiRead(NamedTuple):
    """A ZooKeeper ``multiRead`` request: ``reads`` is a tuple of (opcode, full path) pairs, opcode
    GetData.type (4) or GetChildren.type (8); paths already carry the chroot.

    kazoo's connection calls :meth:`deserialize` with the reply body. There is no ``watcher`` attribute, so
    kazoo registers no watch, and the server ignores the per-op watch flag in a multiRead anyway.
    """

    reads: tuple[tuple[int, str], ...]

    type = MULTI_READ_OPCODE

    def serialize(self) -> bytes:
        out = bytearray()
        for opcode, path in self.reads:
            out += multiheader_struct.pack(opcode, False, -1)
            out += write_string(path)
            out += b"\x00"  # watch = false
        out += multiheader_struct.pack(-1, True, -1)
        return bytes(out)

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list[Any]:
        results: list[Any] = []
        while True:
            header, offset = MultiHeader.deserialize(buf, offset)
            if header.done:
                return results
            if header.type == GetData.type:
                data, offset = read_buffer(buf, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(buf, offset))
                offset += stat_struct.size
                results.append((b"" if data is None else data, stat))  # null data reads as b""
            elif header.type == GetChildren.type:
                count = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                children = []
                for _ in range(max(count, 0)):
                    child, offset = read_string(buf, offset)
                    children.append(child)
                results.append(children)
            elif header.type == _ERROR_OPCODE:
                code = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                results.append(_error(code))
            else:
                raise ValueError(f"unexpected result type {header.type} in a multiRead reply")


def _read_size(path: str) -> int:
    return MULTI_HEADER_BYTES + _string_size(path) + 1


def _chunk_reads(
    reads: list[tuple[int, str]], limit: int, max_ops: int
) -> list[list[tuple[int, str]]]:
    budget = limit - REQUEST_HEADER_BYTES - MULTI_HEADER_BYTES
    chunks: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    used = 0
    for read in reads:
        size = _read_size(read[1])
        if size > budget:
            raise ItemTooLargeError(size + limit - budget, limit, f"read of {read[1]!r}")
        if current and (used + size > budget or len(current) >= max_ops):
            chunks.append(current)
            current, used = [], 0
        current.append(read)
        used += size
    if current:
        chunks.append(current)
    return chunks


def _read_requests(
    client: Any, paths: Iterable[str], children: bool, max_ops: int, limit: int | None
) -> list[MultiRead]:
    """The multiRead requests (one per chunk, in order) that read ``paths``."""
    if isinstance(max_ops, bool) or not isinstance(max_ops, int) or max_ops <= 0:
        raise ConfigurationError(f"max_ops must be a positive int, got {max_ops!r}")
    paths = list(paths)
    for path in paths:
        _check_path(path)
    opcode = GetChildren.type if children else GetData.type
    root = _chroot(client)
    reads = [(opcode, _full_path(root, path)) for path in paths]
    return [MultiRead(tuple(chunk)) for chunk in _chunk_reads(reads, jute_max_buffer(limit), max_ops)]


def multi_read_async(
    client: Any,
    paths: Iterable[str],
    *,
    children: bool = False,
    max_ops: int = MAX_MULTI_OPS,
    limit: int | None = None,
) -> IAsyncResult:
    """Read many nodes in one ``multiRead`` request; the async result's value is a list, one entry per path,
    in order: ``(data, ZnodeStat)`` (or the child-name list with ``children=True``) or an exception object
    such as ``NoNodeError()`` / ``NoAuthError()``.

    Up to ``max_ops`` paths go in one request; longer lists are sent as several pipelined requests whose
    results are joined in order (so the read is not one atomic snapshot across chunks). Needs ZooKeeper 3.6+.
    Errors of a whole request (ConnectionLoss, SessionExpiredError, closed client) are the result's exception.
    """
    requests = _read_requests(client, paths, children, max_ops, limit)
    if not requests:
        return _ready(client, [])
    parts = []
    for request in requests:
        part = client.handler.async_result()
        client._call(request, part)
        parts.append(part)
    if len(parts) == 1:
        return parts[0]
    return _DerivedResult(parts, lambda values: [r for value in values for r in value])


def multi_read(
    client: Any,
    paths: Iterable[str],
    *,
    children: bool = False,
    max_ops: int = MAX_MULTI_OPS,
    limit: int | None = None,
    timeout: float | None = None,
) -> list[Any]:
    """Synchronous :func:`multi_read_async` (through :func:`call`'s lighter reply slots): per path
    ``(data, ZnodeStat)`` or an exception object. ``timeout`` bounds the whole read."""
    replies = [_send(client, request) for request in _read_requests(client, paths, children, max_ops, limit)]
    deadline = None if timeout is None else time.monotonic() + timeout
    out: list[Any] = []
    for reply in replies:
        out.extend(reply.get(None if deadline is None else deadline - time.monotonic()))
    return out


def _ready(client: Any, value: Any) -> IAsyncResult:
    result = client.handler.async_result()
    result.set(value)
    return result


class _DerivedResult:
    """An IAsyncResult whose value is ``combine([part values])``, or the first part's exception.

    The value is computed in the thread that asks for it, never through kazoo's completion thread: a
    synchronous call made from inside a kazoo callback (which runs on that thread) would otherwise wait for a
    step queued behind itself and deadlock. Only :meth:`rawlink` callbacks go through the completion thread,
    like kazoo's own.
    """

    def __init__(self, parts: list[IAsyncResult], combine: Callable[[list[Any]], Any]) -> None:
        self._parts = parts
        self._combine = combine
        self._lock = threading.Lock()
        self._settled = False
        self._value: Any = None
        self._exception: BaseException | None = None
        self._links: dict[Callable[[Any], None], Callable[[Any], None]] = {}

    def ready(self) -> bool:
        return all(part.ready() for part in self._parts)

    def _settle(self) -> bool:
        if not self.ready():
            return False
        with self._lock:
            if not self._settled:
                failed = next((part for part in self._parts if not part.successful()), None)
                if failed is not None:
                    self._exception = failed.exception
                else:
                    try:
                        self._value = self._combine([part.value for part in self._parts])
                    except Exception as exc:  # noqa: BLE001 - delivered as the result's exception
                        self._exception = exc
                self._settled = True
        return True

    def successful(self) -> bool:
        return self._settle() and self._exception is None

    @property
    def exception(self) -> BaseException | None:
        return self._exception if self._settle() else None

    @property
    def value(self) -> Any:
        return self._value if self._settle() else None

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for part in self._parts:
            part.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.ready()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if block:
            self.wait(timeout)
        if not self._settle():
            raise KazooTimeoutError(f"no reply within {timeout} seconds")
        if self._exception is not None:
            raise self._exception
        return self._value

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def set(self, value: Any = None) -> None:
        raise TypeError("a derived async result is set by its requests")

    def set_exception(self, exception: BaseException) -> None:
        raise TypeError("a derived async result is set by its requests")

    def rawlink(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(self)`` once every part is done (on kazoo's completion thread)."""
        lock = threading.Lock()
        remaining = [len(self._parts)]

        def one_done(_: IAsyncResult) -> None:
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                callback(self)

        self._links[callback] = one_done
        for part in self._parts:
            part.rawlink(one_done)

    def unlink(self, callback: Callable[[Any], None]) -> None:
        linked = self._links.pop(callback, None)
        if linked is not None:
            for part in self._parts:
                part.unlink(linked)


# ---------------------------------------------------------------------------------------------------------------
# Pipelined async calls
# ---------------------------------------------------------------------------------------------------------------

Call: TypeAlias = Callable[[], IAsyncResult] | tuple[Any, ...]


def _start(client: Any, call: Call) -> IAsyncResult:
    if callable(call):
        return call()
    if isinstance(call, tuple) and call:
        fn, *args = call
        if isinstance(fn, str):
            if not fn.endswith("_async"):
                raise ValueError(f"pipeline calls name a *_async client method, got {fn!r}")
            fn = getattr(client, fn)
        if callable(fn):
            return fn(*args)
    raise TypeError(f"not a pipeline call: {call!r}; use a zero-arg callable or (method, *args)")


def _failed_now(client: Any, exc: Exception) -> IAsyncResult:
    result = client.handler.async_result()
    result.set_exception(exc)
    return result


def gather(results: Sequence[IAsyncResult], timeout: float | None = None) -> list[Any]:
    """Wait for every async result, in order; each slot is the value or the exception object.

    With ``timeout`` (seconds, for the whole batch) a slot still pending at the deadline holds a
    ``KazooTimeoutError``; its request may still complete later.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    out: list[Any] = []
    for result in results:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not result.wait(wait):
            out.append(KazooTimeoutError("no reply within the pipeline timeout"))
        elif result.successful():
            out.append(result.value)
        else:
            out.append(result.exception)
    return out


def pipeline(client: Any, calls: Iterable[Call], *, timeout: float | None = None) -> list[Any]:
    """Start every call at once (so their requests share the connection back to back), then gather results in
    order. A call is a zero-arg callable returning an IAsyncResult, or a tuple ``(method, *args)`` where
    method is a callable or the name of a client ``*_async`` method, e.g. ``("delete_async", "/a", 3)``.
    A call that raises when started (bad arguments) yields its exception in its slot.
    """
    started: list[IAsyncResult] = []
    for call in calls:
        try:
            started.append(_start(client, call))
        except Exception as exc:  # noqa: BLE001 - reported per slot, like a failed request
            started.append(_failed_now(client, exc))
    return gather(started, timeout)


def get_many(client: Any, paths: Iterable[str], *, timeout: float | None = None) -> list[Any]:
    """Pipelined ``get`` of each path: ``(data, ZnodeStat)`` or an exception object per path, in order."""
    return pipeline(client, [(client.get_async, path) for path in paths], timeout=timeout)


def create_many(
    client: Any,
    items: Iterable[CreateOp | tuple[Any, ...]],
    *,
    timeout: float | None = None,
) -> list[Any]:
    """Pipelined independent creates (not a transaction): the created path or an exception object per item.

    An item is a :class:`CreateOp`, ``(path, data)`` or ``(path, data, kwargs)`` with ``create_async`` keyword
    arguments (acl, ephemeral, sequence, makepath).
    """
    calls: list[Call] = []
    for item in items:
        if isinstance(item, CreateOp):
            kwargs: dict[str, Any] = {"acl": item.acl, "ephemeral": item.ephemeral, "sequence": item.sequence}
            calls.append(_bind(client.create_async, (item.path, item.data), kwargs))
        elif isinstance(item, tuple) and len(item) in (2, 3):
            kwargs = dict(item[2]) if len(item) == 3 else {}
            calls.append(_bind(client.create_async, (item[0], item[1]), kwargs))
        else:
            calls.append(_bind(_reject, (item,)))
    return pipeline(client, calls, timeout=timeout)


def delete_many(
    client: Any, items: Iterable[str | tuple[str, int]], *, timeout: float | None = None
) -> list[Any]:
    """Pipelined independent deletes: ``True`` or an exception object per item (a path or (path, version))."""
    calls: list[Call] = []
    for item in items:
        if isinstance(item, str):
            calls.append((client.delete_async, item))
        elif isinstance(item, tuple) and len(item) == 2:
            calls.append((client.delete_async, item[0], item[1]))
        else:
            calls.append(_bind(_reject, (item,)))
    return pipeline(client, calls, timeout=timeout)


def _bind(
    fn: Callable[..., IAsyncResult], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
) -> Callable[[], IAsyncResult]:
    return lambda: fn(*args, **(kwargs or {}))


def _reject(item: Any) -> IAsyncResult:
    raise TypeError(f"not a valid item: {item!r}")
