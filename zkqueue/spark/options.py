"""Options of the ``zkqueue`` Spark sink, parsed once on the driver into a picklable :class:`SinkOptions`.

Spark hands a Python data source its options as a case-insensitive dict of strings (``option("n", 5)`` arrives
as ``"5"``, ``True`` as ``"true"``). :meth:`SinkOptions.from_options` accepts that dict, and also the keyword
arguments of :func:`zkqueue.spark.put_partition` (``id_column=...``): underscores are dropped and names
compared case-insensitively, so ``idColumn``, ``idcolumn`` and ``id_column`` are the same option.

Every invalid value raises :class:`~zkqueue.errors.ConfigurationError` naming the option.

Column conventions (:meth:`SinkOptions.with_conventions`, applied once the DataFrame's schema is known) follow
Spark's Kafka sink, which matches the names ``value`` and ``key`` exactly (case-sensitive):

* no ``valueColumn`` option, and a ``string`` or ``binary`` column named ``value``: that column is the item
  (raw bytes, or UTF-8 text), with serializer ``auto`` (the default), ``bytes`` or ``str``. The other columns
  are not sent, except the kind's key column, which still names the node. A ``value`` column of another type,
  or serializer ``json`` / ``module:Class``, keeps the old behaviour: the whole row goes to the serializer.
* ``kind=id`` with no ``idColumn`` / ``keyColumn`` option: the ``id`` column as before; without one, a
  ``string``, ``binary`` (UTF-8) or integer column named ``key``. Other kinds never use ``key``.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from zkqueue.engine import api
from zkqueue.engine.api import MAX_MULTI_OPS, jute_max_buffer
from zkqueue.formats import large_ref, naming
from zkqueue.errors import ConfigurationError
from zkqueue.spark.clients import DEFAULT_SESSION_TIMEOUT, ZkSettings, parse_auth

log = logging.getLogger("zkqueue.spark.options")

KINDS = ("plain", "priority", "delay", "id")
BUILTIN_SERIALIZERS = ("auto", "bytes", "str", "json")
#: Default of option maxItemBytes (as ``QueueBuilder.large_items``).
DEFAULT_MAX_ITEM_BYTES = api.DEFAULT_MAX_ITEM_BYTES
#: Default key column per queue kind.
DEFAULT_KEY_COLUMN = {"priority": "priority", "delay": "delay_until", "id": "id"}
#: Column names of Spark's Kafka sink that the zkqueue sink follows (see the module docstring).
VALUE_CONVENTION = "value"
KEY_CONVENTION = "key"
#: Spark type names (``DataType.typeName()``) of a ``value`` column that is the item by convention.
CONVENTION_VALUE_TYPES = ("string", "binary")
#: ... and of a ``key`` column that is the id (kind=id) by convention.
CONVENTION_KEY_TYPES = ("string", "binary", "byte", "short", "integer", "long")
#: Serializers that encode one column (bytes / str): only with these is a ``value`` column the item by itself.
_COLUMN_SERIALIZERS = ("auto", "bytes", "str")

#: Option names (lower case, no underscores) and what they mean; the README lists them too.
KNOWN = {
    "zkhosts": "ZooKeeper connect string (required), chroot allowed: 'h1:2181,h2:2181/app'",
    "path": "queue path (save(path) / start(path) set it)",
    "queuepath": "queue path, when not given to save()/start()",
    "kind": "plain (default), priority, delay or id",
    "keycolumn": "column holding the priority / delay epoch / id (default: priority, delay_until, id; for kind=id "
                 "a column 'key' when there is no column 'id')",
    "prioritycolumn": "alias of keyColumn for kind=priority",
    "delaycolumn": "alias of keyColumn for kind=delay",
    "idcolumn": "alias of keyColumn for kind=id",
    "valuecolumn": "binary or string column used as the item; absent: a binary or string column 'value' (as Kafka's "
                   "sink), else the whole row as JSON",
    "serializer": "auto (default), bytes, str, json or 'module:Class' (a QueueSerializer, built with no args)",
    "itemspernode": "items framed into one znode (Curator putMulti), default 1",
    "batchsize": "znodes per multi transaction, default 1000 (also cut by jute.maxbuffer)",
    "inflight": "multi transactions in flight per task, default 4",
    "maxitems": "bounded queue: wait while the queue holds this many item nodes",
    "maxitemstimeout": "seconds to wait for room before failing the task (default 600)",
    "dedupe": "true: idempotent per (query, batch, partition, row) through marker nodes",
    "dedupepath": "where dedupe markers live (default <queue path>-dedupe)",
    "dedupekey": "batch writes: a stable key making re-runs of the same write idempotent",
    "sessiontimeout": f"executor kazoo session timeout in seconds (default {DEFAULT_SESSION_TIMEOUT:g})",
    "connecttimeout": "seconds to wait for a connection (default 30)",
    "chroot": "chroot appended to zkHosts",
    "auth": "'scheme:credential' pairs separated by ',' (e.g. digest:user:secret)",
    "acl": "open (default) or creator (CREATOR_ALL_ACL; needs auth)",
    "jutemaxbuffer": "the server's jute.maxbuffer in bytes (default 1048575 or $ZKQUEUE_JUTE_MAXBUFFER)",
    "largeitems": "true: a row too big for one znode is stored as a large item (blob + reference node) instead "
                  "of failing the task",
    "maxitembytes": f"largeItems: the largest framed row accepted, in bytes (default {DEFAULT_MAX_ITEM_BYTES})",
    "largeitemcompression": "largeItems: zlib (default; skipped for data that does not compress) or none",
}
#: Options Spark itself may pass along; accepted silently.
SPARK_OPTIONS = {"checkpointlocation", "queryname", "outputmode"}


def normalize(options: Mapping[str, Any]) -> dict[str, str]:
    """Lower-case, underscore-free keys; string values (``True`` -> ``"true"``); ``None`` values dropped."""
    out: dict[str, str] = {}
    for key, value in dict(options).items():
        if value is None:
            continue
        name = str(key).replace("_", "").lower()
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[name] = str(value)
    return out


def int_option(opts: Mapping[str, str], name: str, default: int | None, *, minimum: int = 1) -> int | None:
    raw = opts.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigurationError(f"option {name}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigurationError(f"option {name}: must be >= {minimum}, got {value}")
    return value


def float_option(opts: Mapping[str, str], name: str, default: float) -> float:
    raw = opts.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigurationError(f"option {name}: expected a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise ConfigurationError(f"option {name}: must be > 0, got {value}")
    return value


def bool_option(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", ""):
        return False
    raise ConfigurationError(f"option {name}: expected true or false, got {raw!r}")


def zk_settings(opts: Mapping[str, str], hosts: str) -> ZkSettings:
    """The client settings of normalized options (sessionTimeout, connectTimeout, auth, acl, chroot)."""
    return ZkSettings(
        hosts=hosts,
        session_timeout=float_option(opts, "sessiontimeout", DEFAULT_SESSION_TIMEOUT),
        connect_timeout=float_option(opts, "connecttimeout", 30.0),
        auth=parse_auth(opts.get("auth")),
        acl=opts.get("acl", "open").strip().lower(),
        chroot=opts.get("chroot") or None,
    )


def check_plain_name(option: str, value: str) -> None:
    """A name used as one path segment (a dedupe key, a stream consumer id): letters, digits, '-', '_', '.'."""
    if "/" in value or naming.escape_id(value) != value:
        raise ConfigurationError(f"option {option} {value!r}: use letters, digits, '-', '_' or '.'")


def load_serializer(spec: str) -> Any:
    """Build the serializer ``spec`` names: a built-in name, or ``module:Class`` (instantiated with no args)."""
    from zkqueue.formats.serializers import BytesSerializer, JsonSerializer, StrSerializer  # noqa: PLC0415

    if spec == "bytes":
        return BytesSerializer()
    if spec == "str":
        return StrSerializer()
    if spec == "json":
        return JsonSerializer(default=_json_default)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(
            f"option serializer: expected one of {BUILTIN_SERIALIZERS} or 'module:Class', got {spec!r}"
        )
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"option serializer: cannot import {spec!r}: {exc}") from exc
    obj = target() if isinstance(target, type) else target
    if not callable(getattr(obj, "serialize", None)) or not callable(getattr(obj, "deserialize", None)):
        raise ConfigurationError(f"option serializer: {spec!r} has no serialize()/deserialize()")
    return obj


def _json_default(value: Any) -> Any:
    """JSON for Spark values the json module lacks: timestamps/dates (ISO 8601), decimals (string), binary
    (base64), maps/rows already arrive as dicts and lists."""
    import base64  # noqa: PLC0415
    import datetime  # noqa: PLC0415
    import decimal  # noqa: PLC0415

    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


@dataclass(frozen=True)
class SinkOptions:
    """Everything a sink task needs; plain data, safe to pickle into executors."""

    zk: ZkSettings
    path: str
    kind: str = "plain"
    key_column: str | None = None
    value_column: str | None = None
    serializer: str = "auto"
    items_per_node: int = 1
    batch_size: int = MAX_MULTI_OPS
    inflight: int = 4
    max_items: int | None = None
    max_items_timeout: float = 600.0
    dedupe: bool = True
    dedupe_path: str = ""
    dedupe_key: str | None = None
    jute_max_buffer: int = 0
    large_items: bool = False
    max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES
    large_item_compression: str = "zlib"
    key_column_given: bool = False  # keyColumn / <kind>Column was set (then no 'key' fallback for kind=id)

    def large_item_settings(self) -> Any:
        """The engine's :class:`~zkqueue.engine.blobs.LargeItems` for these options (None unless largeItems)."""
        if not self.large_items:
            return None
        from zkqueue.engine.api import LargeItems  # noqa: PLC0415

        return LargeItems(self.max_item_bytes, self.large_item_compression)

    @property
    def nodes_per_multi(self) -> int:
        """Item nodes per multi: batchSize, capped by maxItems so one multi can fit a bounded queue."""
        if self.max_items is not None:
            return max(1, min(self.batch_size, self.max_items))
        return self.batch_size

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, path: str | None = None) -> SinkOptions:
        opts = normalize(options)
        unknown = sorted(k for k in opts if k not in KNOWN and k not in SPARK_OPTIONS)
        if unknown:
            log.warning("ignoring unknown zkqueue sink option(s): %s (known: %s)", unknown, sorted(KNOWN))
        hosts = opts.get("zkhosts") or opts.get("hosts")
        if not hosts:
            raise ConfigurationError("option zkHosts (the ZooKeeper connect string) is required")
        zk = zk_settings(opts, hosts)
        queue_path = path or opts.get("path") or opts.get("queuepath")
        if not queue_path:
            raise ConfigurationError("no queue path: use save('/queues/x') / start('/queues/x') or option queuePath")
        naming.validate_queue_path(queue_path)
        if queue_path == "/":
            raise ConfigurationError("the queue path cannot be the root '/'")
        kind = opts.get("kind", "plain").strip().lower()
        if kind not in KINDS:
            raise ConfigurationError(f"option kind: expected one of {KINDS}, got {kind!r}")
        key_column = None
        key_column_given = False
        if kind != "plain":
            key_column = opts.get("keycolumn") or opts.get(f"{kind}column") or None
            key_column_given = key_column is not None
            key_column = key_column or DEFAULT_KEY_COLUMN[kind]
        serializer = opts.get("serializer", "auto").strip()
        if serializer.lower() in BUILTIN_SERIALIZERS:
            serializer = serializer.lower()
        elif ":" not in serializer:
            raise ConfigurationError(
                f"option serializer: expected one of {BUILTIN_SERIALIZERS} or 'module:Class', got {serializer!r}"
            )
        dedupe = bool_option(opts, "dedupe", True)
        dedupe_path = opts.get("dedupepath") or queue_path + "-dedupe"
        naming.validate_path(dedupe_path)
        if dedupe_path == queue_path or dedupe_path.startswith(queue_path + "/") or queue_path.startswith(
            dedupe_path + "/"
        ):
            raise ConfigurationError(f"option dedupePath {dedupe_path!r} must be outside the queue path")
        dedupe_key = opts.get("dedupekey") or None
        if dedupe_key is not None:
            check_plain_name("dedupeKey", dedupe_key)
        if dedupe_key is not None and not dedupe:
            raise ConfigurationError("option dedupeKey needs dedupe=true")
        limit = int_option(opts, "jutemaxbuffer", None, minimum=4096)
        large_items = bool_option(opts, "largeitems", False)
        max_item_bytes = int_option(opts, "maxitembytes", None)
        compression = opts.get("largeitemcompression")
        if not large_items and (max_item_bytes is not None or compression is not None):
            raise ConfigurationError("options maxItemBytes and largeItemCompression need largeItems=true")
        compression = (compression or "zlib").strip().lower()
        if compression not in large_ref.COMPRESSIONS:
            raise ConfigurationError(
                f"option largeItemCompression: expected one of {large_ref.COMPRESSIONS}, got {compression!r}"
            )
        options = cls(
            zk=zk,
            path=queue_path,
            kind=kind,
            key_column=key_column,
            value_column=opts.get("valuecolumn") or None,
            key_column_given=key_column_given,
            serializer=serializer,
            items_per_node=int_option(opts, "itemspernode", 1) or 1,
            batch_size=int_option(opts, "batchsize", MAX_MULTI_OPS) or MAX_MULTI_OPS,
            inflight=int_option(opts, "inflight", 4) or 4,
            max_items=int_option(opts, "maxitems", None),
            max_items_timeout=float_option(opts, "maxitemstimeout", 600.0),
            dedupe=dedupe,
            dedupe_path=dedupe_path,
            dedupe_key=dedupe_key,
            jute_max_buffer=jute_max_buffer(limit),
            large_items=large_items,
            max_item_bytes=DEFAULT_MAX_ITEM_BYTES if max_item_bytes is None else max_item_bytes,
            large_item_compression=compression,
        )
        try:
            options.large_item_settings()  # the engine's own checks (e.g. the largest maxItemBytes)
        except ConfigurationError as exc:
            raise ConfigurationError(f"option maxItemBytes: {exc}") from None
        return options

    def with_conventions(self, field_types: Mapping[str, str]) -> tuple[SinkOptions, list[str]]:
        """These options with the Kafka sink's column conventions applied to a schema (``field_types``: column ->
        Spark type name, in column order); see the module docstring. Returns the options to write with (``self``
        when no convention applies) and notes on what was chosen, for the caller to log."""
        changes: dict[str, Any] = {}
        notes: list[str] = []
        key_column = self.key_column
        if self.kind == "id" and not self.key_column_given and KEY_CONVENTION in field_types:
            key_type = field_types[KEY_CONVENTION]
            if key_column in field_types:
                notes.append(f"kind=id: column {key_column!r} is the id; column {KEY_CONVENTION!r} is not used "
                             f"(option idColumn={KEY_CONVENTION} picks it)")
            elif key_type in CONVENTION_KEY_TYPES:
                key_column = changes["key_column"] = KEY_CONVENTION
                notes.append(f"kind=id: column {KEY_CONVENTION!r} ({key_type}) is the id (no idColumn option, no "
                             f"column {self.key_column!r})")
        value_type = field_types.get(VALUE_CONVENTION)
        if self.value_column is None and value_type is not None:
            if value_type not in CONVENTION_VALUE_TYPES:
                notes.append(f"column {VALUE_CONVENTION!r} is {value_type}, not string or binary: each row is sent "
                             "as JSON (option valueColumn picks the item column)")
            elif self.serializer not in _COLUMN_SERIALIZERS:
                notes.append(f"serializer {self.serializer} gets each whole row; option valueColumn={VALUE_CONVENTION}"
                             f" sends only column {VALUE_CONVENTION!r}")
            else:
                changes["value_column"] = VALUE_CONVENTION
                unused = [name for name in field_types if name not in (VALUE_CONVENTION, key_column)]
                notes.append(f"column {VALUE_CONVENTION!r} ({value_type}) is the item, as in Kafka's sink (option "
                             f"valueColumn picks another)" + (f"; not sent: {unused}" if unused else ""))
        return (replace(self, **changes) if changes else self), notes

    def check_schema(self, field_types: Mapping[str, str]) -> None:
        """Fail fast on the driver: the key and value columns must exist (``field_types``: name -> type name)."""
        if self.key_column is not None and self.key_column not in field_types:
            hint = "option keyColumn"
            if self.kind == "id" and not self.key_column_given:
                hint = f"option idColumn / keyColumn, or a string, binary or integer column {KEY_CONVENTION!r}"
                if KEY_CONVENTION in field_types:
                    hint += f"; column {KEY_CONVENTION!r} is {field_types[KEY_CONVENTION]}"
            raise ConfigurationError(
                f"kind={self.kind} needs column {self.key_column!r} ({hint}); the DataFrame has {sorted(field_types)}"
            )
        if self.value_column is not None:
            kind = field_types.get(self.value_column)
            if kind is None:
                raise ConfigurationError(
                    f"option valueColumn: no column {self.value_column!r}; the DataFrame has {sorted(field_types)}"
                )
            if self.serializer == "auto" and kind not in ("binary", "string"):
                raise ConfigurationError(
                    f"valueColumn {self.value_column!r} is {kind}: use a binary or string column, or set "
                    "serializer=json (or drop valueColumn to send each row as JSON)"
                )

    def resolve_serializer(self, value_type: str | None) -> str:
        """The serializer actually used: ``auto`` means bytes for binary, str for string, json otherwise."""
        if self.serializer != "auto":
            return self.serializer
        if self.value_column is None:
            return "json"
        return {"binary": "bytes", "string": "str"}.get(value_type or "", "json")
