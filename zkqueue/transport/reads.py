"""multiRead (opcode 22): many getData or getChildren reads in ONE request, each with its own result.

:func:`multi_read` sends many getData (or getChildren) reads as ONE ``multiRead`` request (ZooKeeper 3.6+).
kazoo does not expose it; :class:`MultiRead` is a small request class over kazoo's protocol layer, queued
through the client's normal request queue so it is pipelined with every other call. Each read gets its own
result or its own error: a failed read does not affect the others. Long path lists go out as several requests,
each under ``jute.maxbuffer`` and ``max_ops``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from kazoo.exceptions import EXCEPTIONS, ZookeeperError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.serialization import (
    GetChildren,
    GetData,
    MultiHeader,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import ZnodeStat

from zkqueue.errors import ConfigurationError, ItemTooLargeError
from zkqueue.transport.ops import (
    _ERROR_OPCODE,
    MAX_MULTI_OPS,
    MULTI_HEADER_BYTES,
    REQUEST_HEADER_BYTES,
    _check_path,
    _chroot,
    full_path,
    _string_size,
    jute_max_buffer,
)
from zkqueue.transport.pipeline import DerivedResult, ready_result
from zkqueue.transport.requests import send_request, enqueue

__all__ = ["MULTI_READ_OPCODE", "MultiRead", "multi_read", "multi_read_async"]

#: Opcode of ZooKeeper's read-only multi (``ZooDefs.OpCode.multiRead``).
MULTI_READ_OPCODE = 22


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
    reads = [(opcode, full_path(root, path)) for path in paths]
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
        return ready_result(client, [])
    parts = []
    for request in requests:
        part = client.handler.async_result()
        enqueue(client, request, part)
        parts.append(part)
    if len(parts) == 1:
        return parts[0]
    return DerivedResult(parts, lambda values: [r for value in values for r in value])


class PendingRead:
    """A multiRead sent and not yet awaited (see :func:`send_multi_read`)."""

    __slots__ = ("_replies",)

    def __init__(self, replies: list[Any]) -> None:
        self._replies = replies

    def result(self, timeout: float | None = None) -> list[Any]:
        """Per path ``(data, ZnodeStat)`` or an exception object; raises what failed a whole request."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out: list[Any] = []
        for reply in self._replies:
            out.extend(reply.get(None if deadline is None else deadline - time.monotonic()))
        return out


def send_multi_read(
    client: Any,
    paths: Iterable[str],
    *,
    children: bool = False,
    max_ops: int = MAX_MULTI_OPS,
    limit: int | None = None,
) -> PendingRead:
    """Send a multiRead of ``paths`` now and wait later (through :func:`call`'s lighter reply slots). Sent after a
    write on the same session, it sees that write: ZooKeeper answers one session's requests in order."""
    return PendingRead([send_request(client, request) for request in _read_requests(client, paths, children, max_ops, limit)])


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
    return send_multi_read(client, paths, children=children, max_ops=max_ops, limit=limit).result(timeout)
