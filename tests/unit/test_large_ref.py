"""The large-item reference frame and blob packing: pure functions, no ZooKeeper."""

from __future__ import annotations

import os
import random
import struct

import pytest

from zkqueue.errors import CorruptItemError
from zkqueue.formats import framing, large_ref
from zkqueue.formats.large_ref import BlobRef, BlobState


def test_reference_round_trips_and_is_not_a_curator_frame() -> None:
    ref = BlobRef("/q-blobs/b-1", 3, 2_500_000, 2_600_000, 123, "zlib")
    data = large_ref.encode_ref(ref)
    assert large_ref.is_ref(data) and large_ref.decode_ref(data) == ref
    assert struct.unpack(">i", data[:4])[0] == 0x00020001
    with pytest.raises(CorruptItemError, match="Incorrect version"):
        framing.decode_items(data)  # what Curator's ItemSerializer does too
    assert large_ref.node_bytes(data) == 2_600_000
    assert not large_ref.is_ref(framing.encode_items([b"x"])) and not large_ref.is_ref(None)


@pytest.mark.parametrize("bad", [
    b"\x00\x02\x00\x01", b"\x00\x02\x00\x01{", b'\x00\x02\x00\x01{"blob":"/b"}',
    b'\x00\x02\x00\x01{"blob":"rel","chunks":1,"stored":1,"length":1,"crc32":0,"compression":"none"}',
    b'\x00\x02\x00\x01{"blob":"/b","chunks":0,"stored":1,"length":1,"crc32":0,"compression":"none"}',
    b'\x00\x02\x00\x01{"blob":"/b","chunks":1,"stored":1,"length":1,"crc32":0,"compression":"lz4"}',
    b"\x00\x02\x00\x01\xff\xfe",
])
def test_malformed_references_are_corrupt_items(bad: bytes) -> None:
    with pytest.raises(CorruptItemError):
        large_ref.decode_ref(bad)


@pytest.mark.parametrize("payload", [os.urandom(3_000_001), b"abc" * 1_000_000, b"", b"x"])
def test_pack_then_unpack_gives_the_frame_back(payload: bytes) -> None:
    frame = framing.encode_items([payload])
    ref, chunks = large_ref.pack(frame, "/q-blobs/b-x", 1_000_000, "zlib")
    assert ref.chunks == len(chunks) and all(len(c) <= 1_000_000 for c in chunks)
    assert sum(len(c) for c in chunks) == ref.stored
    assert large_ref.unpack(ref, [bytes(c) for c in chunks]) == frame
    if payload[:3] == b"abc":
        assert ref.compression == "zlib" and ref.stored < len(frame) // 100
    if len(payload) > 1000 and payload[:3] != b"abc":
        assert ref.compression == "none"  # random bytes: zlib is skipped after a sample


def test_any_changed_byte_or_chunk_is_caught() -> None:
    rnd = random.Random(7)
    frame = framing.encode_items([rnd.randbytes(2_500_000)])
    ref, chunks = large_ref.pack(frame, "/b", 1_000_000, "none")
    parts = [bytes(c) for c in chunks]
    for _ in range(20):
        i = rnd.randrange(len(parts))
        j = rnd.randrange(len(parts[i]))
        bad = list(parts)
        bad[i] = bad[i][:j] + bytes([bad[i][j] ^ 1]) + bad[i][j + 1:]
        with pytest.raises(CorruptItemError, match="checksum"):
            large_ref.unpack(ref, bad)
    with pytest.raises(CorruptItemError, match="chunk"):
        large_ref.unpack(ref, parts[:-1])
    with pytest.raises(CorruptItemError, match="stored bytes"):
        large_ref.unpack(ref, parts[:-1] + [parts[-1][:-1]])


def test_blob_state_round_trips_and_rejects_garbage() -> None:
    state = BlobState("committed", "/q", item="/q/queue-0000000001", chunks=3)
    assert BlobState.decode(state.encode()) == state
    for bad in (b"", b"{}", b'{"state":"eaten","queue":"/q"}', b"\xff"):
        with pytest.raises(CorruptItemError):
            BlobState.decode(bad)
