"""Curator's ``ItemSerializer`` frame: the bytes stored in one queue znode.

Layout (Java ``DataOutputStream``, so big-endian)::

    int32 VERSION = 0x00010001
    per item:  byte ITEM_OPCODE (0x01), int32 length, <length> payload bytes
    byte EOF_OPCODE (0x02)

``put(x)`` stores a one-item frame; ``putMulti`` stores all its items in one frame. An empty frame
(``00 01 00 01 02``) is legal: it decodes to ``[]``.

Trailing bytes: Curator's ``ItemSerializer.deserialize`` stops reading at the EOF opcode and never looks
at what follows, so a node with bytes after EOF is accepted by Curator. :func:`decode_items` does the same
by default (and logs a warning, because no Curator or zkqueue writer produces such nodes); pass
``strict=True`` to reject them with :class:`~zkqueue.errors.CorruptItemError` instead.

Everything here is pure: no I/O, no ZooKeeper.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable

from zkqueue.errors import CorruptItemError, ItemTooLargeError

log = logging.getLogger("zkqueue.formats.framing")

VERSION = 0x00010001
ITEM_OPCODE = 1
EOF_OPCODE = 2

#: Largest payload an int32 length field can describe.
MAX_PAYLOAD = 0x7FFFFFFF
#: Bytes a frame costs beyond its items: the version header and the EOF opcode.
FRAME_OVERHEAD = 5
#: Bytes each item costs beyond its payload: the opcode and the length.
ITEM_OVERHEAD = 5

_HEADER = struct.pack(">i", VERSION)
_EOF = bytes((EOF_OPCODE,))
#: The frame of an empty MultiItem.
EMPTY_FRAME = _HEADER + _EOF
#: The first bytes of a frame whose first item follows: the version and the item opcode.
_ONE_ITEM_HEAD = _HEADER + bytes((ITEM_OPCODE,))

_ITEM_HEAD = struct.Struct(">BI")  # opcode, length (a non-negative int32, so unsigned packing is identical)
_INT32 = struct.Struct(">i")


def _as_bytes(payload: object, index: int) -> bytes:
    if type(payload) is bytes:
        return payload
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload)
    raise TypeError(
        f"item {index}: a queue payload must be bytes, bytearray or memoryview, got {type(payload).__name__} "
        "(did the serializer return the wrong type?)"
    )


def encode_items(payloads: Iterable[bytes]) -> bytes:
    """Frame *payloads* (already serialized) exactly as Curator's ``ItemSerializer.serialize`` does.

    Raises :class:`TypeError` for a payload that is not bytes-like and :class:`ItemTooLargeError` for one
    longer than an int32 length can describe. (The ZooKeeper packet limit is the caller's business; see
    :func:`framed_size`.)
    """
    pack = _ITEM_HEAD.pack
    parts: list[bytes] = [_HEADER]
    append = parts.append
    for index, payload in enumerate(payloads):
        data = _as_bytes(payload, index)
        size = len(data)
        if size > MAX_PAYLOAD:
            raise ItemTooLargeError(size, MAX_PAYLOAD, f"item {index}")
        append(pack(ITEM_OPCODE, size))
        append(data)
    append(_EOF)
    return b"".join(parts)


def framed_size(payload_lengths: Iterable[int]) -> int:
    """Size in bytes of the frame holding payloads of these lengths: ``4 + sum(5 + len) + 1``."""
    count = 0
    total = 0
    for length in payload_lengths:
        if length < 0:
            raise ValueError(f"a payload length cannot be negative, got {length}")
        count += 1
        total += length
    return FRAME_OVERHEAD + ITEM_OVERHEAD * count + total


def count_items(data: bytes | bytearray | memoryview | None) -> int:
    """How many items a frame holds, :class:`CorruptItemError` as :func:`decode_items`. A well-formed one-item
    frame (what ``put`` stores) is recognised from its header without splitting it."""
    if (data is not None and len(data) >= FRAME_OVERHEAD + ITEM_OVERHEAD and data[:5] == _ONE_ITEM_HEAD
            and data[-1] == EOF_OPCODE and int.from_bytes(data[5:9], "big") == len(data) - 10):
        return 1
    return len(decode_items(data))


def decode_items(data: bytes | bytearray | memoryview | None, *, strict: bool = False) -> list[bytes]:
    """Split a Curator frame into its payloads.

    Every malformed input raises :class:`CorruptItemError` whose message gives the reason and the byte
    offset, worded like Curator's own ``IOException`` where Curator has one:

    - missing data (``None``) or fewer than 4 bytes: truncated version;
    - ``Incorrect version. Expected 65537 - Found: ...``;
    - no opcode before the data ends (no EOF opcode);
    - ``Incorrect opcode. Expected 1 - Found: ...`` (found printed as a signed Java byte, plus hex);
    - ``Bad size: ...`` for a negative length;
    - a length larger than the bytes left (Curator: ``EOFException``);
    - with ``strict=True`` only: bytes after the EOF opcode (Curator ignores them; so does the default).
    """
    if data is None:
        raise CorruptItemError("Corrupted queue item: the node has no data (null); expected a Curator frame")
    if not isinstance(data, bytes):
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        else:
            raise TypeError(f"decode_items needs bytes, got {type(data).__name__}")
    end = len(data)
    if end < 4:
        raise CorruptItemError(
            f"Corrupted queue item: truncated version header ({end} bytes, need 4): {data[:16].hex()}"
        )
    (version,) = _INT32.unpack_from(data, 0)
    if version != VERSION:
        raise CorruptItemError(
            f"Incorrect version. Expected {VERSION} - Found: {version} (0x{version & 0xFFFFFFFF:08X})"
        )

    unpack_int = _INT32.unpack_from
    items: list[bytes] = []
    offset = 4
    while True:
        if offset >= end:
            raise CorruptItemError(
                f"Corrupted queue item: truncated after {len(items)} item(s): no EOF opcode (data ends at offset {end})"
            )
        opcode = data[offset]
        if opcode == EOF_OPCODE:
            offset += 1
            break
        if opcode != ITEM_OPCODE:
            signed = opcode - 256 if opcode > 127 else opcode
            raise CorruptItemError(
                f"Incorrect opcode. Expected {ITEM_OPCODE} - Found: {signed} (0x{opcode:02X}) at offset {offset}"
            )
        if offset + 5 > end:
            raise CorruptItemError(
                f"Corrupted queue item: truncated length of item {len(items)} at offset {offset + 1} "
                f"({end - offset - 1} of 4 bytes present)"
            )
        (size,) = unpack_int(data, offset + 1)
        if size < 0:
            raise CorruptItemError(f"Bad size: {size} (item {len(items)} at offset {offset + 1})")
        start = offset + 5
        stop = start + size
        if stop > end:
            raise CorruptItemError(
                f"Corrupted queue item: item {len(items)} declares {size} bytes at offset {start} "
                f"but only {end - start} remain (truncated or oversized length)"
            )
        items.append(data[start:stop])
        offset = stop

    if offset != end:
        extra = end - offset
        if strict:
            raise CorruptItemError(
                f"Corrupted queue item: {extra} trailing byte(s) after the EOF opcode at offset {offset - 1}"
            )
        log.warning(
            "ignoring %d trailing byte(s) after the EOF opcode of a %d-item frame (Curator ignores them too)",
            extra,
            len(items),
        )
    return items
