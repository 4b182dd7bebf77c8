"""Write ops and packet limits: the records a multi carries and the sizes that keep requests under the limit.

* :class:`CreateOp`, :class:`DeleteOp`, :class:`SetDataOp` and :class:`CheckOp` are the write ops of a multi
  transaction (:mod:`zkqueue.transport.multi`); each checks its arguments when it is built.
* :func:`jute_max_buffer`, :func:`op_size`, :func:`multi_request_size`, :func:`max_create_data` and
  :func:`split_ops` keep every request under ZooKeeper's packet limit. The server drops the connection (the
  client sees ``ConnectionLoss``) when a request packet is longer than ``jute.maxbuffer``; the functions here
  check before sending and raise :class:`~zkqueue.errors.ItemTooLargeError` instead.

The other request modules share what is here: the argument checks, the chroot and default-ACL handling
(``full_path``, ``to_request``), the string size on the wire and the header sizes of a request and of a multi op.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import CheckVersion, Create, Delete, SetData, multiheader_struct
from kazoo.security import ACL, OPEN_ACL_UNSAFE

from zkqueue.errors import ConfigurationError, ItemTooLargeError

__all__ = [
    "DEFAULT_JUTE_MAXBUFFER",
    "JUTE_MAXBUFFER_ENV",
    "MAX_MULTI_BYTES",
    "MAX_MULTI_OPS",
    "MULTI_HEADER_BYTES",
    "REQUEST_HEADER_BYTES",
    "CheckOp",
    "CreateOp",
    "DeleteOp",
    "Op",
    "SetDataOp",
    "jute_max_buffer",
    "max_create_data",
    "multi_request_size",
    "op_size",
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


def full_path(root: str, path: str, trailing: bool = False) -> str:
    """``path`` with the chroot ``root`` prepended, as kazoo's ``_prefix_root`` makes it.

    Paths the queues send are already normal (absolute, no empty, ``.`` or ``..`` segments), and for those
    plain concatenation is the same string at a fraction of the cost: this runs once per op in every multi.
    """
    if path.startswith("/") and "//" not in path and "/." not in path and not path.endswith("/"):
        return path if root in ("", "/") else root + path
    return _prefix_root(root, path, trailing=trailing)


def to_request(client: Any, op: Op) -> Any:
    """The kazoo request record for one op, with the client's chroot applied."""
    root = _chroot(client)
    if isinstance(op, CreateOp):
        path = full_path(root, op.path, trailing=op.sequence)
        return Create(path, op.data, list(_resolve_acl(client, op.acl)), op.flags)
    if isinstance(op, DeleteOp):
        return Delete(full_path(root, op.path), op.version)
    if isinstance(op, SetDataOp):
        return SetData(full_path(root, op.path), op.data, op.version)
    if isinstance(op, CheckOp):
        return CheckVersion(full_path(root, op.path), op.version)
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
    return _request_size(to_request(client, op))


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
    return _requests_size([to_request(client, op) for op in ops])


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
