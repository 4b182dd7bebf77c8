"""Checked multi transactions: write ops committed all-or-nothing in ONE ``multi`` request, each op's outcome told.

* :func:`run_multi_async` (and :func:`zkqueue.transport.protocol.run_multi`, which sends through :func:`send_multi`) commit write ops (:class:`~zkqueue.transport.ops.CreateOp`,
  ``DeleteOp``, ``SetDataOp``, ``CheckOp``) in one transaction and report which op failed. kazoo's
  ``TransactionRequest.commit`` hides failures in its result list; :class:`MultiResult` does not.
* :func:`send_multi` sends a multi without waiting and returns a :class:`PendingMulti`. Its body is built straight
  from the ops as bytes (:func:`multi_body`, equal to kazoo's ``Transaction.serialize``) and sent as a
  ``PrebuiltTransaction``, whose reply parsing matches kazoo's. :func:`send_creates` is the queue's put path:
  one multi of many creates with the shared parts serialized once.

Failures of a whole request (``ConnectionLoss``, ``SessionExpiredError``, a closed client) are raised by the
synchronous functions and set on the async results. After ``ConnectionLoss`` a multi may or may not have been
committed: the caller must check, never blindly retry a sequential create.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import EXCEPTIONS, RolledBackError, RuntimeInconsistency
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.serialization import (
    CheckVersion,
    Create,
    Delete,
    SetData,
    Transaction,
    int_struct,
    multiheader_struct,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL

from zkqueue.errors import ItemTooLargeError
from zkqueue.transport.ops import (
    _ERROR_OPCODE,
    _OP_TYPES,
    REQUEST_HEADER_BYTES,
    CheckOp,
    CreateOp,
    DeleteOp,
    Op,
    SetDataOp,
    _check_data,
    _chroot,
    full_path,
    _requests_size,
    _resolve_acl,
    to_request,
    jute_max_buffer,
)
from zkqueue.transport.pipeline import DerivedResult, ready_result
from zkqueue.transport.requests import Reply, send_request, enqueue

__all__ = [
    "MultiResult",
    "PendingMulti",
    "multi_body",
    "run_multi_async",
    "send_creates",
    "send_multi",
]

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
        return ready_result(client, MultiResult(True, [], None, None))
    requests = [to_request(client, op) for op in ops]
    size = _requests_size(requests)
    cap = jute_max_buffer(limit)
    if size > cap:
        raise ItemTooLargeError(size, cap, f"multi request of {len(ops)} ops")
    inner = client.handler.async_result()
    enqueue(client, Transaction(requests), inner)
    count = len(ops)

    def combine(values: list[Any]) -> MultiResult:
        results = list(values[0])
        if len(results) != count:
            raise RuntimeError(f"multi returned {len(results)} results for {count} ops")
        return MultiResult.from_results(results)

    return DerivedResult([inner], combine)


class PendingMulti:
    """A multi sent by :func:`send_multi`; :meth:`result` waits for its :class:`MultiResult`."""

    __slots__ = ("_count", "_reply")

    def __init__(self, reply: Reply, count: int) -> None:
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
    reply = Reply()
    reply.set([])
    return PendingMulti(reply, 0)


def _send_body(client: Any, body: bytes, count: int, limit: int | None, what: str) -> PendingMulti:
    """Send a multi ``body`` of ``count`` ops unless its packet exceeds the limit (ItemTooLargeError)."""
    size = REQUEST_HEADER_BYTES + len(body)
    cap = jute_max_buffer(limit)
    if size > cap:
        raise ItemTooLargeError(size, cap, what)
    return PendingMulti(send_request(client, PrebuiltTransaction(body)), count)


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
            out += write_string(full_path(root, op.path))
            out += pack(op.version)
        elif isinstance(op, CreateOp):
            acl = _resolve_acl(client, op.acl)
            acl_bytes = acls.get(id(acl))
            if acl_bytes is None:
                acl_bytes = acls[id(acl)] = _acl_bytes(acl)
            out += _CREATE_HEADER
            out += write_string(full_path(root, op.path, trailing=op.sequence))
            out += _buffer(op.data)
            out += acl_bytes
            out += pack(op.flags)
        elif isinstance(op, SetDataOp):
            out += _SET_DATA_HEADER
            out += write_string(full_path(root, op.path))
            out += _buffer(op.data)
            out += pack(op.version)
        elif isinstance(op, CheckOp):
            out += _CHECK_HEADER
            out += write_string(full_path(root, op.path))
            out += pack(op.version)
        else:
            raise TypeError(f"not a multi op: {op!r} (use CreateOp, DeleteOp, SetDataOp or CheckOp)")
    out += _MULTI_END
    return bytes(out)


class PrebuiltTransaction(Transaction):
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
    full = full_path(_chroot(client), op.path, trailing=op.sequence)
    return _CREATE_HEADER + write_string(full), _acl_bytes(_resolve_acl(client, op.acl)) + int_struct.pack(op.flags)


def send_creates(
    client: Any,
    items: Sequence[tuple[str, bytes]],
    *,
    acl: Sequence[ACL] | None = None,
    ephemeral: bool = False,
    sequence: bool = False,
    limit: int | None = None,
    head: Sequence[Op] = (),
) -> PendingMulti:
    """ONE multi creating every ``(path, data)`` of ``items`` with the same ``acl`` and flags, sent without
    waiting: the queue's put path. The bytes on the wire are exactly those of
    ``send_multi(client, [*head, CreateOp(path, data, acl, ephemeral, sequence) ...])``, built with each distinct
    path's and the ACL's serialization done once per call instead of once per item. ``head`` ops (e.g. a put
    marker's update) come first, and their results lead the reply's.
    """
    CreateOp("/", b"", acl, ephemeral, sequence)  # a CreateOp's argument checks, even when there are no items
    if not items:
        return _no_ops()
    head = _check_ops(head)
    parts: dict[str, tuple[bytes, bytes]] = {}  # path -> (op header + path, ACL + flags)
    body = bytearray(multi_body(client, head)[: -len(_MULTI_END)]) if head else bytearray()
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
    return _send_body(client, bytes(body), len(head) + len(items), limit, f"multi request of {len(items)} creates")
