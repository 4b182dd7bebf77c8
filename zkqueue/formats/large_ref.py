"""Large items: the reference frame stored in the queue, the blob's state record, and packing a frame into chunks.

An item whose framed bytes do not fit one znode is stored as a *blob*: its frame (a normal Curator frame, see
:mod:`zkqueue.formats.framing`) is compressed when that pays, split into chunks, and written under a blob node
outside the queue. The queue then holds a small *reference* node in a frame of our own::

    int32 REF_VERSION = 0x00020001
    UTF-8 JSON: {"blob": <path>, "chunks": n, "stored": bytes, "length": bytes, "crc32": n, "compression": "zlib"}

Curator's ``ItemSerializer`` checks the version word first and throws ``IOException("Incorrect version...")``,
so a Curator consumer fails loudly on a reference instead of misreading it.

The blob node's own data is a small JSON state record (:class:`BlobState`): ``writing`` while the chunks go in
(an ephemeral ``owner`` child shows the writer is alive), ``committed`` once the reference exists (with the
reference's path as ``item`` when known), ``moving`` while a requeue or move re-creates the reference under a name
not known yet, ``quarantined`` when its reference was moved to the quarantine.

Everything here is pure: no I/O, no ZooKeeper.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import asdict, dataclass
from typing import Iterable

from zkqueue.errors import CorruptItemError

#: Version word of a reference frame (Curator's frames start with 0x00010001).
REF_VERSION = 0x00020001
_HEAD = struct.pack(">i", REF_VERSION)
#: Name of the blob's ephemeral child while its writer is alive.
OWNER = "owner"
#: Prefix of chunk node names: ``c-000000``, ``c-000001``, ...
CHUNK_PREFIX = "c-"
COMPRESSIONS = ("zlib", "none")
#: Bytes of the payload tried first: when zlib does not shrink them below this ratio, the blob is stored raw.
_SAMPLE_BYTES = 64 * 1024
_WORTH_IT = 0.9
_LEVEL = 1

STATES = ("writing", "committed", "moving", "quarantined")


@dataclass(frozen=True)
class BlobRef:
    """What a reference node says about its blob."""

    blob: str
    chunks: int
    stored: int  # bytes of all chunks together
    length: int  # bytes of the frame once decompressed
    crc32: int  # of the stored bytes
    compression: str

    def chunk_paths(self) -> list[str]:
        return [chunk_path(self.blob, i) for i in range(self.chunks)]


def chunk_name(index: int) -> str:
    return f"{CHUNK_PREFIX}{index:06d}"


def chunk_path(blob: str, index: int) -> str:
    return f"{blob}/{chunk_name(index)}"


def is_ref(data: bytes | None) -> bool:
    """Whether ``data`` is a reference frame (not a Curator frame)."""
    return data is not None and data[:4] == _HEAD


def node_bytes(data: bytes | None) -> int:
    """Bytes a node stands for: its own length, or for a reference the length of the frame it refers to."""
    if is_ref(data):
        try:
            return decode_ref(data).length  # type: ignore[arg-type]
        except CorruptItemError:
            pass
    return len(data or b"")


def encode_ref(ref: BlobRef) -> bytes:
    return _HEAD + json.dumps(asdict(ref), separators=(",", ":")).encode()


def decode_ref(data: bytes) -> BlobRef:
    """Parse a reference frame; :class:`CorruptItemError` when it is not a well-formed one."""
    if not is_ref(data):
        raise CorruptItemError("not a large-item reference (wrong version word)")
    try:
        fields = json.loads(bytes(data[4:]).decode("utf-8"))
        ref = BlobRef(
            blob=str(fields["blob"]), chunks=int(fields["chunks"]), stored=int(fields["stored"]),
            length=int(fields["length"]), crc32=int(fields["crc32"]), compression=str(fields["compression"]),
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise CorruptItemError(f"corrupt large-item reference: {exc!r}") from exc
    if not ref.blob.startswith("/") or ref.chunks < 1 or ref.stored < 0 or ref.length < 0:
        raise CorruptItemError(f"corrupt large-item reference: {ref}")
    if ref.compression not in COMPRESSIONS:
        raise CorruptItemError(f"large-item reference with unknown compression {ref.compression!r}")
    return ref


@dataclass(frozen=True)
class BlobState:
    """The blob node's own data."""

    state: str
    queue: str
    item: str | None = None
    chunks: int | None = None

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes | None) -> BlobState:
        try:
            fields = json.loads(bytes(data or b"").decode("utf-8"))
            state = cls(str(fields["state"]), str(fields["queue"]), fields.get("item"), fields.get("chunks"))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise CorruptItemError(f"corrupt blob state record: {exc!r}") from exc
        if state.state not in STATES:
            raise CorruptItemError(f"blob state record with unknown state {state.state!r}")
        return state


def pack(frame: bytes, blob: str, chunk_size: int, compression: str) -> tuple[BlobRef, list[memoryview]]:
    """Compress ``frame`` when that pays (zlib is skipped for data whose first 64 KiB do not shrink) and cut it
    into chunks of at most ``chunk_size`` bytes; returns the reference and the chunks."""
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    stored: bytes = frame
    used = "none"
    if compression == "zlib":
        sample = frame[:_SAMPLE_BYTES]
        if len(zlib.compress(sample, _LEVEL)) < _WORTH_IT * len(sample):
            packed = zlib.compress(frame, _LEVEL)
            if len(packed) < len(frame):
                stored, used = packed, "zlib"
    view = memoryview(stored)
    chunks = [view[i : i + chunk_size] for i in range(0, max(len(stored), 1), chunk_size)]
    ref = BlobRef(blob, len(chunks), len(stored), len(frame), zlib.crc32(stored), used)
    return ref, chunks


def unpack(ref: BlobRef, chunks: Iterable[bytes]) -> bytes:
    """Join, check and decompress the chunks of ``ref``; :class:`CorruptItemError` on any mismatch."""
    parts = list(chunks)
    if len(parts) != ref.chunks:
        raise CorruptItemError(f"blob {ref.blob}: {len(parts)} chunk(s), the reference says {ref.chunks}")
    stored = b"".join(parts)
    if len(stored) != ref.stored:
        raise CorruptItemError(f"blob {ref.blob}: {len(stored)} stored bytes, the reference says {ref.stored}")
    crc = zlib.crc32(stored)
    if crc != ref.crc32:
        raise CorruptItemError(f"blob {ref.blob}: checksum {crc:08x}, the reference says {ref.crc32:08x}")
    if ref.compression == "zlib":
        try:
            frame = zlib.decompress(stored)
        except zlib.error as exc:
            raise CorruptItemError(f"blob {ref.blob}: cannot decompress: {exc}") from exc
    else:
        frame = stored
    if len(frame) != ref.length:
        raise CorruptItemError(f"blob {ref.blob}: {len(frame)} bytes after decompression, the reference says "
                               f"{ref.length}")
    return frame
