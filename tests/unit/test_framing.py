"""Curator ItemSerializer framing: exact bytes, every corruption path, and fuzzing."""

from __future__ import annotations

import logging
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zkqueue.formats import framing
from zkqueue.errors import CorruptItemError
from zkqueue.formats.framing import EMPTY_FRAME, decode_items, encode_items, framed_size

ABC_FRAME = bytes.fromhex("00010001" "01" "00000003" "616263" "02")


def test_constants_match_curator() -> None:
    assert (framing.VERSION, framing.ITEM_OPCODE, framing.EOF_OPCODE) == (0x00010001, 1, 2)


def test_put_abc_bytes_match_reference() -> None:
    assert encode_items([b"abc"]) == ABC_FRAME
    assert decode_items(ABC_FRAME) == [b"abc"]


def test_empty_multi_item() -> None:
    assert encode_items([]) == bytes.fromhex("0001000102") == EMPTY_FRAME
    assert decode_items(bytes.fromhex("0001000102")) == []


def test_multi_item_layout_and_empty_payload() -> None:
    frame = encode_items([b"", b"\x00\x02", b"x"])
    assert frame == bytes.fromhex("00010001" "0100000000" "0100000002" "0002" "0100000001" "78" "02")
    assert decode_items(frame) == [b"", b"\x00\x02", b"x"]


def test_encode_accepts_bytes_like_and_generators() -> None:
    frame = encode_items(p for p in (bytearray(b"ab"), memoryview(b"cd")))
    assert decode_items(frame) == [b"ab", b"cd"]
    assert decode_items(bytearray(frame)) == [b"ab", b"cd"]
    assert decode_items(memoryview(frame)) == [b"ab", b"cd"]


@pytest.mark.parametrize("bad", ["text", 5, None, [1, 2]])
def test_encode_rejects_non_bytes(bad: object) -> None:
    with pytest.raises(TypeError, match="item 1: a queue payload must be bytes"):
        encode_items([b"ok", bad])  # type: ignore[list-item]


def test_decode_rejects_non_bytes_type() -> None:
    with pytest.raises(TypeError, match="needs bytes"):
        decode_items("0001000102")  # type: ignore[arg-type]


def test_framed_size() -> None:
    assert framed_size([]) == len(EMPTY_FRAME) == 5
    assert framed_size([3]) == len(ABC_FRAME) == 13
    lengths = [0, 1, 100, 7]
    assert framed_size(lengths) == len(encode_items(b"x" * n for n in lengths))
    assert framed_size(iter(lengths)) == 4 + sum(5 + n for n in lengths) + 1
    with pytest.raises(ValueError, match="negative"):
        framed_size([1, -1])


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (None, "no data"),
        (b"", r"truncated version header \(0 bytes"),
        (b"\x00\x01\x00", r"truncated version header \(3 bytes"),
        (b"\x00\x01\x00\x02\x02", "Incorrect version. Expected 65537 - Found: 65538"),
        (b"\xff\xff\xff\xff\x02", "Incorrect version. Expected 65537 - Found: -1"),
        (b"\x00\x01\x00\x01", "no EOF opcode"),
        (ABC_FRAME[:-1], "no EOF opcode"),
        (b"\x00\x01\x00\x01\x03", r"Incorrect opcode. Expected 1 - Found: 3 \(0x03\) at offset 4"),
        (b"\x00\x01\x00\x01\xff", r"Incorrect opcode. Expected 1 - Found: -1 \(0xFF\)"),
        (b"\x00\x01\x00\x01\x00\x00\x00\x00\x00\x02", "Found: 0"),
        (b"\x00\x01\x00\x01\x01\x00\x00", "truncated length of item 0"),
        (b"\x00\x01\x00\x01\x01\xff\xff\xff\xfe\x02", "Bad size: -2"),
        (b"\x00\x01\x00\x01\x01\x80\x00\x00\x00\x02", "Bad size: -2147483648"),
        (b"\x00\x01\x00\x01\x01\x7f\xff\xff\xff\x02", "declares 2147483647 bytes .* only 1 remain"),
        (ABC_FRAME[:-2], "declares 3 bytes at offset 9 but only 2 remain"),
    ],
)
def test_decode_rejects_corruption_with_reason(data: bytes | None, reason: str) -> None:
    with pytest.raises(CorruptItemError, match=reason):
        decode_items(data)


def test_corruption_after_good_items_reports_position() -> None:
    data = encode_items([b"a", b"b"])[:-1] + b"\x07"
    with pytest.raises(CorruptItemError, match="Found: 7 .* at offset 16"):
        decode_items(data)


def test_trailing_bytes_ignored_like_curator(caplog: pytest.LogCaptureFixture) -> None:
    # Curator's deserialize stops at EOF and never reads further: such a node is consumed normally.
    data = ABC_FRAME + b"\x01junk"
    with caplog.at_level(logging.WARNING, logger="zkqueue.formats.framing"):
        assert decode_items(data) == [b"abc"]
    assert "ignoring 5 trailing byte(s)" in caplog.text


def test_trailing_bytes_rejected_when_strict() -> None:
    with pytest.raises(CorruptItemError, match="1 trailing byte"):
        decode_items(EMPTY_FRAME + b"\x00", strict=True)
    assert decode_items(ABC_FRAME, strict=True) == [b"abc"]


def test_many_items_round_trip() -> None:
    payloads = [i.to_bytes(4, "big") * (i % 7) for i in range(20_000)]
    frame = encode_items(payloads)
    assert len(frame) == framed_size(len(p) for p in payloads)
    assert decode_items(frame) == payloads


def _reference_encode(payloads: list[bytes]) -> bytes:
    """Straightforward transcription of the layout, independent of the optimised encoder."""
    out = bytearray(struct.pack(">i", 0x00010001))
    for p in payloads:
        out += b"\x01" + struct.pack(">i", len(p)) + p
    out += b"\x02"
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_round_trip(payloads: list[bytes]) -> None:
    frame = encode_items(payloads)
    assert frame == _reference_encode(payloads)
    assert len(frame) == framed_size(map(len, payloads))
    assert decode_items(frame) == payloads
    assert decode_items(frame, strict=True) == payloads


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=64), st.booleans())
def test_arbitrary_bytes_decode_or_raise_corrupt(data: bytes, strict: bool) -> None:
    try:
        items = decode_items(data, strict=strict)
    except CorruptItemError:
        return
    assert all(isinstance(i, bytes) for i in items)
    if strict:  # a strictly valid frame is exactly the encoding of what it decodes to
        assert encode_items(items) == data


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=16), max_size=5), st.data())
def test_mutated_frames_decode_or_raise_corrupt(payloads: list[bytes], data: st.DataObject) -> None:
    """Near-valid input reaches the deep branches: flip, cut or extend a real frame."""
    frame = bytearray(encode_items(payloads))
    action = data.draw(st.sampled_from(["flip", "cut", "extend"]))
    if action == "flip":
        index = data.draw(st.integers(0, len(frame) - 1))
        frame[index] = data.draw(st.integers(0, 255))
    elif action == "cut":
        del frame[data.draw(st.integers(0, len(frame) - 1)) :]
    else:
        frame += data.draw(st.binary(min_size=1, max_size=8))
    try:
        items = decode_items(bytes(frame))
    except CorruptItemError:
        return
    assert all(isinstance(i, bytes) for i in items)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=5))
def test_count_items_agrees_with_decode(payloads: list[bytes]) -> None:
    assert framing.count_items(encode_items(payloads)) == len(payloads)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=40), st.builds(lambda p, t: encode_items([p]) + t, st.binary(max_size=20),
                                                     st.binary(max_size=3))))
def test_count_items_decides_as_decode_does(data: bytes) -> None:
    try:
        expected = len(decode_items(data))
    except CorruptItemError:
        with pytest.raises(CorruptItemError):
            framing.count_items(data)
        return
    assert framing.count_items(data) == expected
