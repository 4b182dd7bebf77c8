"""Built-in item codecs: round trips, exact bytes, and typed errors for every bad input."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkqueue.errors import ConfigurationError, SerializationError
from zkqueue.formats.serializers import BytesSerializer, JsonSerializer, QueueSerializer, StrSerializer


class Upper:
    """A user serializer that never heard of zkqueue: the protocol is structural."""

    def serialize(self, item: str) -> bytes:
        return item.upper().encode()

    def deserialize(self, data: bytes) -> str:
        return data.decode()


@pytest.mark.parametrize("serializer", [BytesSerializer(), StrSerializer(), JsonSerializer(), Upper()])
def test_protocol_is_runtime_checkable(serializer: object) -> None:
    assert isinstance(serializer, QueueSerializer)


class OnlySerialize:
    def serialize(self, item: object) -> bytes:
        return b""


@pytest.mark.parametrize("not_serializer", [object(), b"bytes", OnlySerialize()])
def test_protocol_rejects_objects_without_both_methods(not_serializer: object) -> None:
    assert not isinstance(not_serializer, QueueSerializer)


# ------------------------------------------------------------------------------------------------- bytes


def test_bytes_serializer() -> None:
    s = BytesSerializer()
    assert s.serialize(b"\x00abc") == b"\x00abc"
    out = s.serialize(bytearray(b"xy"))
    assert out == b"xy" and type(out) is bytes
    assert s.serialize(memoryview(b"mv")) == b"mv"
    assert s.deserialize(b"raw") == b"raw"
    assert type(s.deserialize(bytearray(b"raw"))) is bytes


@pytest.mark.parametrize("bad", ["text", 1, None, [1], {"a": 1}])
def test_bytes_serializer_rejects_wrong_types(bad: object) -> None:
    with pytest.raises(SerializationError, match="BytesSerializer can only serialize bytes"):
        BytesSerializer().serialize(bad)  # type: ignore[arg-type]


def test_deserialize_rejects_non_bytes() -> None:
    for s in (BytesSerializer(), StrSerializer(), JsonSerializer()):
        with pytest.raises(SerializationError, match="needs bytes, got str"):
            s.deserialize("text")  # type: ignore[arg-type]


@given(st.binary())
def test_bytes_round_trip(data: bytes) -> None:
    s = BytesSerializer()
    assert s.deserialize(s.serialize(data)) == data


# --------------------------------------------------------------------------------------------------- str


def test_str_serializer_utf8_default() -> None:
    s = StrSerializer()
    assert s.serialize("héllo") == b"h\xc3\xa9llo"
    assert s.deserialize(b"h\xc3\xa9llo") == "héllo"


def test_str_serializer_other_encoding() -> None:
    s = StrSerializer("latin-1")
    assert s.serialize("é") == b"\xe9"
    assert s.deserialize(b"\xe9") == "é"
    assert StrSerializer("utf-16-be").serialize("A") == b"\x00A"


def test_str_serializer_errors() -> None:
    with pytest.raises(SerializationError, match="can only serialize str, got bytes"):
        StrSerializer().serialize(b"abc")  # type: ignore[arg-type]
    with pytest.raises(SerializationError, match="cannot encode item as ascii"):
        StrSerializer("ascii").serialize("é")
    with pytest.raises(SerializationError, match="cannot encode"):
        StrSerializer().serialize("\ud800")  # lone surrogate
    with pytest.raises(SerializationError, match="not valid utf-8"):
        StrSerializer().deserialize(b"\xff\xfe")
    assert StrSerializer(errors="replace").deserialize(b"a\xff") == "a\ufffd"


def test_str_serializer_bad_configuration() -> None:
    with pytest.raises(ConfigurationError, match="unknown encoding"):
        StrSerializer("no-such-codec")
    with pytest.raises(ConfigurationError, match="unknown error handler"):
        StrSerializer(errors="no-such-handler")


@given(st.text())
def test_str_round_trip(text: str) -> None:
    s = StrSerializer()
    assert s.deserialize(s.serialize(text)) == text


# -------------------------------------------------------------------------------------------------- json


def test_json_is_compact_utf8_and_keeps_key_order() -> None:
    s = JsonSerializer()
    assert s.serialize({"b": 1, "a": [1, 2.5, None, True], "é": "日本"}) == (
        '{"b":1,"a":[1,2.5,null,true],"é":"日本"}'.encode()
    )
    assert s.serialize("x") == b'"x"'


def test_json_deserialize() -> None:
    s = JsonSerializer()
    assert s.deserialize(b' {"a": [1, "\xc3\xa9"]} \n') == {"a": [1, "é"]}


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ({1, 2}, "cannot encode set"),
        (object(), "cannot encode object"),
        (b"bytes", "cannot encode bytes"),
        (math.nan, "cannot encode float"),
        ({"x": math.inf}, "cannot encode dict"),
        ({(1, 2): "tuple key"}, "cannot encode dict"),
        ("\udc80", "cannot encode str"),  # lone surrogate: not UTF-8
    ],
)
def test_json_serialize_errors(item: object, reason: str) -> None:
    with pytest.raises(SerializationError, match=reason):
        JsonSerializer().serialize(item)


def test_json_circular_reference() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(SerializationError, match="JsonSerializer"):
        JsonSerializer().serialize(loop)


@pytest.mark.parametrize("payload", [b"", b"{", b"[1] x", b"NaN", b"[Infinity]", b"\xff", b"\xef\xbb\xbf{}", b"'a'"])
def test_json_deserialize_errors(payload: bytes) -> None:
    with pytest.raises(SerializationError, match="not UTF-8 JSON"):
        JsonSerializer().deserialize(payload)


def test_json_default_hook() -> None:
    s = JsonSerializer(default=sorted)
    assert s.serialize({"s": {3, 1, 2}}) == b'{"s":[1,2,3]}'


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_json_round_trip(value: object) -> None:
    s = JsonSerializer()
    assert s.deserialize(s.serialize(value)) == value
