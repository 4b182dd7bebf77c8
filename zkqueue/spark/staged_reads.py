"""What the streaming source and the batch read share: their options, their rows, and how staged segments are
split into Spark tasks and read back on the executors (see :mod:`zkqueue.spark.staging` for the staging area)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from zkqueue._extras import require
from zkqueue.errors import ConfigurationError
from zkqueue.formats import naming
from zkqueue.spark.clients import DEFAULT_SESSION_TIMEOUT, ZkSettings
from zkqueue.spark.options import KINDS, check_plain_name, float_option, int_option, normalize, zk_settings

log = logging.getLogger("zkqueue.spark.staged_reads")

#: The key column of each queue kind in the source's rows.
KEY_COLUMNS = {"priority": ("priority", "int"), "delay": ("delay_until", "bigint"), "id": ("item_id", "string")}
SOURCE_OPTIONS = {
    "zkhosts", "path", "queuepath", "consumerid", "maxitemspertrigger", "maxitems", "batches", "kind", "lockpath",
    "auth", "acl", "chroot", "sessiontimeout", "connecttimeout", "ownerwait", "jutemaxbuffer", "partitions",
}


@dataclass(frozen=True)
class SourceOptions:
    """Options of the streaming source and the batch read; plain data, safe to pickle into executors.

    ``max_items`` bounds one batch read's claim; ``batches`` pins a batch read to staged batches that
    :func:`zkqueue.spark.claimed_read` claimed on the driver."""

    zk: ZkSettings
    path: str
    consumer_id: str
    kind: str = "plain"
    lock_path: str | None = None
    max_items_per_trigger: int | None = None
    max_items: int | None = None
    batches: tuple[int, ...] | None = None
    jute_max_buffer: int | None = None
    partitions: int = 4
    owner_wait: float = DEFAULT_SESSION_TIMEOUT + 5.0

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SourceOptions:
        opts = normalize(options)
        unknown = sorted(k for k in opts if k not in SOURCE_OPTIONS)
        if unknown:
            log.warning("ignoring unknown zkqueue source option(s): %s (known: %s)", unknown, sorted(SOURCE_OPTIONS))
        hosts = opts.get("zkhosts")
        if not hosts:
            raise ConfigurationError("option zkHosts (the ZooKeeper connect string) is required")
        zk = zk_settings(opts, hosts)
        path = opts.get("path") or opts.get("queuepath")
        if not path:
            raise ConfigurationError("no queue path: use load('/queues/x') or option queuePath")
        naming.validate_queue_path(path)
        consumer_id = opts.get("consumerid", "").strip()
        if not consumer_id:
            raise ConfigurationError(
                "option consumerId is required: a name for this consumer, stable across restarts (it names the "
                "staging area that makes restarts exactly-once); for a look without claiming use read_queue")
        check_plain_name("consumerId", consumer_id)
        kind = opts.get("kind", "plain").strip().lower()
        if kind not in KINDS:
            raise ConfigurationError(f"option kind: expected one of {KINDS}, got {kind!r}")
        lock_path = opts.get("lockpath") or None
        if lock_path is not None:
            naming.validate_path(lock_path)
        return cls(
            zk=zk, path=path, consumer_id=consumer_id, kind=kind, lock_path=lock_path,
            max_items_per_trigger=int_option(opts, "maxitemspertrigger", None),
            max_items=int_option(opts, "maxitems", None),
            batches=_batch_list(opts.get("batches")),
            jute_max_buffer=int_option(opts, "jutemaxbuffer", None, minimum=4096),
            partitions=int_option(opts, "partitions", 4) or 4,
            owner_wait=float_option(opts, "ownerwait", zk.session_timeout + 5.0),
        )


def _batch_list(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        raise ConfigurationError(f"option batches: expected comma-separated batch numbers, got {text!r}")
    return tuple(int(p) for p in parts)


def stage_for(options: SourceOptions) -> Any:
    """The staging area of ``options``' consumer id (driver side), on this process's cached client."""
    from zkqueue.spark.clients import get_client  # noqa: PLC0415
    from zkqueue.spark.staging import Stage  # noqa: PLC0415

    return Stage(get_client(options.zk), options.path, options.consumer_id, kind=options.kind,
                 lock_path=options.lock_path, limit=options.jute_max_buffer)


def source_schema(kind: str) -> str:
    """The rows' schema (DDL) for a queue kind."""
    columns = ["id string", "name string", "idx int", "value binary"]
    if kind in KEY_COLUMNS:
        column, sql_type = KEY_COLUMNS[kind]
        columns.append(f"{column} {sql_type}")
    return ", ".join(columns)


@dataclass
class StagedPartition(InputPartition):
    """The staging segments one Spark task reads."""

    paths: list[str]


def split_segments(segments: list[str], tasks: int) -> list[StagedPartition]:
    """Segments (about 1 MB of queue nodes each) spread over at most ``tasks`` Spark tasks, in order: a task costs
    tens of milliseconds, so a few big tasks beat many small ones."""
    count = min(tasks, len(segments))
    bounds = [len(segments) * i // count for i in range(count + 1)] if count else []
    return [StagedPartition(segments[a:b]) for a, b in zip(bounds, bounds[1:])]


def staged_rows(options: SourceOptions, partition: StagedPartition) -> Iterator[Any]:
    """The rows of one task's segments, as one Arrow record batch (Spark takes it without converting row by row).
    Executor side; reads only."""
    pa = require("pyarrow", what="zkqueue.spark")

    from zkqueue.spark.clients import get_client  # noqa: PLC0415
    from zkqueue.spark.consumers import key_of  # noqa: PLC0415
    from zkqueue.spark.staging import decode_staged  # noqa: PLC0415

    paths = getattr(partition, "paths", None)
    if not paths:  # PySpark hands a plain InputPartition to a read that planned no partitions
        return
    kind = options.kind
    client = get_client(options.zk)
    ids: list[str] = []
    names: list[str] = []
    indexes: list[int] = []
    values: list[bytes] = []
    keys: list[Any] = []
    for name, index, payload in decode_staged(client, paths):
        ids.append(f"{name}:{index}")
        names.append(name)
        indexes.append(index)
        values.append(payload)
        if kind in KEY_COLUMNS:
            keys.append(key_of(name, kind))
    if not ids:
        return
    columns = [pa.array(ids, pa.string()), pa.array(names, pa.string()), pa.array(indexes, pa.int32()),
               pa.array(values, pa.binary())]
    fields = ["id", "name", "idx", "value"]
    if kind in KEY_COLUMNS:
        column, sql_type = KEY_COLUMNS[kind]
        columns.append(pa.array(keys, {"int": pa.int32(), "bigint": pa.int64(), "string": pa.string()}[sql_type]))
        fields.append(column)
    yield pa.RecordBatch.from_arrays(columns, names=fields)
