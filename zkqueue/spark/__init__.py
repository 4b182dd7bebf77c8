"""PySpark integration: the ``zkqueue`` data source (sink), executor consumers and a bounded batch read.

::

    import zkqueue.spark as zks

    zks.register(spark)                          # format("zkqueue") for df.write / df.writeStream
    df.write.format("zkqueue").mode("append").option("zkHosts", hosts).save("/queues/jobs")
    zks.consume(spark, hosts, "/queues/jobs", handler, parallelism=8, lock_path="/queues/jobs-locks")
    items = zks.read_queue(spark, hosts, "/queues/jobs", max_items=10_000)
    stream = spark.readStream.format("zkqueue").option("zkHosts", hosts).option("consumerId", "etl").load(path)
    with zks.claimed_read(spark, "/queues/jobs", zkHosts=hosts, consumerId="nightly") as df:  # commits on exit
        df.write.parquet(out)

Needs ``pip install zkqueue[spark]`` (pyspark >= 4.0 and pyarrow). Worker processes must be able to import
``zkqueue`` (and your handler's module): install it on every executor.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from zkqueue._extras import require

require("pyspark", what="zkqueue.spark")

if TYPE_CHECKING:  # pragma: no cover
    from zkqueue.spark.consumers import ConsumeResult, consume, read_queue
    from zkqueue.spark.datasource import ZkQueueDataSource
    from zkqueue.spark.sink import SinkStats

_EXPORTS = {
    "consume": "zkqueue.spark.consumers",
    "read_queue": "zkqueue.spark.consumers",
    "ConsumeResult": "zkqueue.spark.consumers",
    "TaskCounts": "zkqueue.spark.consumers",
    "ZkQueueDataSource": "zkqueue.spark.datasource",
    "claimed_read": "zkqueue.spark.batch_source",
    "commit_read": "zkqueue.spark.batch_source",
    "SinkOptions": "zkqueue.spark.options",
    "SinkStats": "zkqueue.spark.sink",
    "QueueFullError": "zkqueue.errors",
    "SessionLostError": "zkqueue.spark.clients",
}

__all__ = sorted([*_EXPORTS, "register", "put_partition"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'zkqueue.spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def register(spark: Any) -> None:
    """Register the ``zkqueue`` data source with ``spark`` (a SparkSession)."""
    from zkqueue.spark.datasource import ZkQueueDataSource  # noqa: PLC0415

    spark.dataSource.register(ZkQueueDataSource)


def put_partition(
    rows: Iterable[Any],
    hosts: str,
    path: str,
    *,
    partition: int | None = None,
    batch_id: int | str | None = None,
    **options: Any,
) -> "SinkStats":
    """Put ``rows`` (pyspark Rows or dicts) into the queue at ``path``, as the sink does for one partition.

    For ``df.foreachPartition`` and ``foreachBatch`` users. ``options`` are the sink's options in either
    spelling (``kind="id", id_column="job"`` or ``idColumn="job"``). ``partition`` defaults to the running
    task's partition id (0 outside Spark). Dedupe is on when a ``dedupe_key`` is given; with ``dedupe=True`` a
    ``dedupe_key`` is required: the scope is
    ``dedupe_key`` (plus ``.<batch_id>`` when given), so in ``foreachBatch`` pass the batch id for a re-run batch
    to add no copies. ``large_items=True`` (optionally ``max_item_bytes=...``) stores rows too big for one znode
    as large items instead of raising :class:`~zkqueue.errors.ItemTooLargeError`. Returns the counts
    (:class:`SinkStats`).
    """
    from zkqueue.errors import ConfigurationError  # noqa: PLC0415
    from zkqueue.spark.clients import get_client  # noqa: PLC0415
    from zkqueue.spark.options import SinkOptions  # noqa: PLC0415
    from zkqueue.spark.sink import Encoder, row_pairs, write_pairs  # noqa: PLC0415

    opts = SinkOptions.from_options({**options, "zkhosts": hosts}, path=path)
    if opts.dedupe and opts.dedupe_key is None and not any(k.replace("_", "").lower() == "dedupe" for k in options):
        opts = dataclasses.replace(opts, dedupe=False)  # the sink's default; here it needs a stable dedupe_key
    if partition is None:
        partition = 0
        try:
            from pyspark import TaskContext  # noqa: PLC0415

            ctx = TaskContext.get()
            if ctx is not None:
                partition = ctx.partitionId()
        except ImportError:  # pragma: no cover
            pass
    scope = None
    if opts.dedupe:
        if opts.dedupe_key is None:
            raise ConfigurationError("put_partition with dedupe=True needs dedupe_key (stable across retries)")
        scope = opts.dedupe_key if batch_id is None else f"{opts.dedupe_key}.{batch_id}"
    rows = iter(rows)
    first = next(rows, None)
    if first is None:
        from zkqueue.spark.sink import SinkStats  # noqa: PLC0415

        return SinkStats()
    value_type = None
    if opts.value_column is not None:
        record = first.asDict() if hasattr(first, "asDict") else dict(first)
        value = record.get(opts.value_column)
        value_type = "binary" if isinstance(value, (bytes, bytearray)) else "string" if isinstance(value, str) else "other"
    encoder = Encoder(opts, value_type)

    def chained() -> Iterable[Any]:
        yield first
        yield from rows

    return write_pairs(get_client(opts.zk), opts, row_pairs(chained(), encoder), scope=scope, partition=partition)
