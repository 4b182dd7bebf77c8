"""``spark.read.format("zkqueue")``: a batch read that claims due items durably, read on the executors.

::

    zkqueue.spark.register(spark)
    with zkqueue.spark.claimed_read(spark, "/queues/orders", zkHosts=hosts, consumerId="nightly",
                                    maxItems=100_000) as df:
        df.write.mode("append").parquet("/data/orders")
    # a clean exit commits the claim; an exception keeps it, and the next read as "nightly" returns the same rows

It has the streaming source's claim/commit shape (see :mod:`zkqueue.spark.staging`): the claim moves up to
``maxItems`` due items into a staged batch under ``<queue>-stream/<consumerId>`` (each item's copy created and the
original deleted in one multi), executor tasks read the staged segments, and the commit deletes the batch.

PySpark's Python ``DataSourceReader`` has no commit callback (only streaming readers and writers have one), so the
commit is the caller's, made when its job completed: :func:`claimed_read` commits on a clean exit of its block;
with a bare ``spark.read.format("zkqueue")``, call :func:`commit_read` once the job that used the rows succeeded.
Until then, every read with that consumer id returns the same claimed rows again (a second action on the same
DataFrame, or a rerun after a failure), so a job that failed halfway loses nothing and an idempotent sink keyed on
``id`` gets each item once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql.datasource import DataSourceReader

from zkqueue.spark.staged_reads import SourceOptions, StagedPartition, split_segments, stage_for, staged_rows

log = logging.getLogger("zkqueue.spark.batch_source")


@contextmanager
def _owning(options: SourceOptions) -> Iterator[Any]:
    """The consumer id's staging area, held as its one live batch reader for the block."""
    from zkqueue.spark.staging import READ_MODE  # noqa: PLC0415

    stage = stage_for(options)
    stage.acquire(options.owner_wait, READ_MODE)
    try:
        yield stage
    finally:
        stage.release()


def _claim(stage: Any, options: SourceOptions) -> list[int]:
    """The consumer's claimed batches not committed yet, or else a new claim of up to ``max_items`` due items.
    The caller holds the owner node."""
    pending = stage.batches()
    if pending:
        log.info("reading %d claimed batch(es) of %s as %r again (not committed yet)", len(pending),
                 options.path, options.consumer_id)
        return pending
    number = stage.next_number()
    return [number] if stage.stage(number, options.max_items) else []


class ZkQueueBatchReader(DataSourceReader):
    """The batch read: ``partitions`` claims (planning, driver side); ``read`` reads staged segments (executors)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[StagedPartition]:
        numbers = self.options.batches
        if numbers is None:
            with _owning(self.options) as stage:
                numbers = tuple(_claim(stage, self.options))
        else:  # pinned by claimed_read, whose process holds the owner node
            stage = stage_for(self.options)
        segments = [path for n in numbers for path in stage.staged(n)]
        return split_segments(segments, self.options.partitions)

    def read(self, partition: StagedPartition) -> Iterator[Any]:
        return staged_rows(self.options, partition)


def _reader_options(path: str, options: dict[str, Any]) -> SourceOptions:
    return SourceOptions.from_options({**{k: str(v) for k, v in options.items()}, "path": path})


@contextmanager
def claimed_read(spark: Any, path: str, **options: Any) -> Iterator[Any]:
    """Claim due items of the queue at ``path`` for the consumer ``consumerId`` and yield them as a DataFrame;
    commit the claim when the block exits cleanly.

    ``options`` are the reader's options (``zkHosts``, ``consumerId``, ``maxItems``, ``kind``, ``lockPath``,
    ``auth``, ...). While the block runs, this process is the consumer id's one live reader: another claim with
    the same id waits ``ownerWait`` seconds and is then refused. An exception leaves the claim staged; the next
    read with the same consumer id returns the same rows."""
    from zkqueue.spark import register  # noqa: PLC0415

    source = _reader_options(path, options)
    with _owning(source) as stage:
        numbers = _claim(stage, source)
        register(spark)
        reader = spark.read.format("zkqueue")
        for key, value in options.items():
            reader = reader.option(key, value)
        df = reader.option("batches", ",".join(str(n) for n in numbers)).load(path)
        yield df
        if numbers:
            deleted = stage.commit(max(numbers))
            log.info("committed the read of %s as %r: %d batch(es) deleted", path, source.consumer_id, deleted)


def commit_read(path: str, **options: Any) -> int:
    """Commit every claimed batch of consumer ``consumerId`` of the queue at ``path`` (the same options as the
    read): call it when the job that used a ``spark.read.format("zkqueue")`` DataFrame succeeded. Returns how many
    batches were deleted."""
    with _owning(_reader_options(path, options)) as stage:
        pending = stage.batches()
        return stage.commit(pending[-1]) if pending else 0
