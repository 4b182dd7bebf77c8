"""Item codecs: Curator's ``QueueSerializer<T>`` (``byte[] serialize(T)`` / ``T deserialize(byte[])``).

Any object with ``serialize`` and ``deserialize`` methods works; the built-ins below raise
:class:`~zkqueue.errors.SerializationError` (with the cause chained) for every item or payload they cannot
handle, never a bare ``TypeError``/``ValueError``.
"""

from __future__ import annotations

import codecs
import json
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from zkqueue.errors import ConfigurationError, SerializationError

log = logging.getLogger("zkqueue.formats.serializers")

T = TypeVar("T")

_BytesLike = (bytes, bytearray, memoryview)


@runtime_checkable
class QueueSerializer(Protocol[T]):
    """Turns queue items into bytes and back. ``deserialize(serialize(x))`` should equal ``x``."""

    def serialize(self, item: T) -> bytes: ...

    def deserialize(self, data: bytes) -> T: ...


def _type_name(value: object) -> str:
    return type(value).__name__


def _require_bytes(data: object, who: str) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, _BytesLike):
        return bytes(data)
    raise SerializationError(f"{who}.deserialize needs bytes, got {_type_name(data)}")


class BytesSerializer:
    """Identity codec for raw ``bytes`` items (bytearray and memoryview accepted on the way in)."""

    def serialize(self, item: bytes | bytearray | memoryview) -> bytes:
        if isinstance(item, bytes):
            return item
        if isinstance(item, _BytesLike):
            return bytes(item)
        raise SerializationError(
            f"BytesSerializer can only serialize bytes, bytearray or memoryview, got {_type_name(item)}: "
            f"{item!r:.80}"
        )

    def deserialize(self, data: bytes) -> bytes:
        return _require_bytes(data, "BytesSerializer")

    def __repr__(self) -> str:
        return "BytesSerializer()"


class StrSerializer:
    """``str`` items encoded with *encoding* (default UTF-8) and *errors* (default ``strict``)."""

    def __init__(self, encoding: str = "utf-8", errors: str = "strict") -> None:
        try:
            codecs.lookup(encoding)
        except (LookupError, TypeError) as exc:
            raise ConfigurationError(f"StrSerializer: unknown encoding {encoding!r}") from exc
        try:
            codecs.lookup_error(errors)
        except (LookupError, TypeError) as exc:
            raise ConfigurationError(f"StrSerializer: unknown error handler {errors!r}") from exc
        self.encoding = encoding
        self.errors = errors

    def serialize(self, item: str) -> bytes:
        if not isinstance(item, str):
            raise SerializationError(f"StrSerializer can only serialize str, got {_type_name(item)}: {item!r:.80}")
        try:
            return item.encode(self.encoding, self.errors)
        except UnicodeError as exc:
            raise SerializationError(f"StrSerializer: cannot encode item as {self.encoding}: {exc}") from exc

    def deserialize(self, data: bytes) -> str:
        raw = _require_bytes(data, "StrSerializer")
        try:
            return raw.decode(self.encoding, self.errors)
        except UnicodeError as exc:
            raise SerializationError(f"StrSerializer: payload is not valid {self.encoding}: {exc}") from exc

    def __repr__(self) -> str:
        return f"StrSerializer(encoding={self.encoding!r}, errors={self.errors!r})"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class JsonSerializer:
    """JSON items as compact UTF-8 (``separators=(",", ":")``, ``ensure_ascii=False``, keys in insertion
    order). NaN and infinities are refused both ways: they are not JSON and Java parsers reject them.

    *default* is passed to :func:`json.dumps` to encode otherwise unsupported objects.
    """

    def __init__(self, *, default: Callable[[Any], Any] | None = None) -> None:
        self._encoder = json.JSONEncoder(
            separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=False, default=default
        )
        self._decoder = json.JSONDecoder(parse_constant=_reject_constant)

    def serialize(self, item: Any) -> bytes:
        try:
            return self._encoder.encode(item).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            raise SerializationError(f"JsonSerializer: cannot encode {_type_name(item)} as JSON: {exc}") from exc

    def deserialize(self, data: bytes) -> Any:
        raw = _require_bytes(data, "JsonSerializer")
        try:
            return self._decoder.decode(raw.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise SerializationError(f"JsonSerializer: payload is not UTF-8 JSON: {exc}") from exc

    def __repr__(self) -> str:
        return "JsonSerializer()"

