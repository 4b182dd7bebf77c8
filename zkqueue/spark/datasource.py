"""The ``zkqueue`` Python data source: a batch and Structured Streaming sink into Curator-compatible queues.

::

    zkqueue.spark.register(spark)
    (df.write.format("zkqueue").mode("append")
       .option("zkHosts", "zk1:2181,zk2:2181").option("kind", "id").option("idColumn", "job_id")
       .save("/queues/jobs"))

How PySpark runs it (see ``pyspark.sql.worker.write_into_data_source``): the driver builds the writer and pickles
it into every task; each task calls ``write()`` once with its partition as Arrow record batches; the commit
messages (counts) travel back and ``commit()`` runs in yet another driver-side Python process. So the writer
holds only options (no client); tasks use their worker process's cached client (:mod:`zkqueue.spark.clients`).

Items are visible to consumers as soon as a task's multi commits, not at job commit: the sink is at-least-once
(a retried task puts its rows again). With ``dedupe=true`` it is exactly-once per (scope, partition, row);
see :mod:`zkqueue.spark.sink` for how the marker nodes work and when they are removed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from zkqueue.errors import ConfigurationError
from zkqueue.spark.options import SinkOptions

log = logging.getLogger("zkqueue.spark.datasource")

#: Local properties Spark sets on micro-batch tasks (StreamExecution.QUERY_ID_KEY, MicroBatchExecution.BATCH_ID_KEY).
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class ZkQueueCommitMessage(WriterCommitMessage):
    """What one task reports to the driver's commit."""

    partition: int
    attempt: int
    rows: int
    nodes: int
    multis: int
    deduped: int
    scope: str | None = None
    query: str | None = None
    large_items: int = 0


@dataclass
class WriteTotals:
    """Totals over a write's (or micro-batch's) successful tasks, as ``commit`` logs them."""

    tasks: int = 0
    failed_tasks: int = 0
    rows: int = 0
    nodes: int = 0
    multis: int = 0
    deduped: int = 0
    large_items: int = 0

    @classmethod
    def of(cls, messages: Sequence[WriterCommitMessage | None]) -> WriteTotals:
        totals = cls()
        for message in messages:
            if not isinstance(message, ZkQueueCommitMessage):
                totals.failed_tasks += 1
                continue
            totals.tasks += 1
            totals.rows += message.rows
            totals.nodes += message.nodes
            totals.multis += message.multis
            totals.deduped += message.deduped
            totals.large_items += message.large_items
        return totals


def _field_types(schema: StructType) -> dict[str, str]:
    return {f.name: f.dataType.typeName() for f in schema.fields}


class _WriterBase:
    def __init__(self, options: SinkOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ConfigurationError(
                "the zkqueue sink only appends (mode('append') / outputMode('append' or 'update')): a queue "
                "cannot be overwritten"
            )
        types = _field_types(schema)
        # Kafka's column conventions (a string/binary 'value' is the item; 'key' is the id): decided here, once.
        options, notes = options.with_conventions(types)
        options.check_schema(types)
        for note in notes:
            log.info("zkqueue sink to %s: %s", options.path, note)
        self.options = options
        self.value_type = types.get(options.value_column) if options.value_column else None

    def _write(self, batches: Iterator[Any], scope: str | None, query: str | None) -> ZkQueueCommitMessage:
        from pyspark import TaskContext  # noqa: PLC0415

        from zkqueue.spark.clients import get_client  # noqa: PLC0415
        from zkqueue.spark.sink import Encoder, arrow_pairs, write_pairs  # noqa: PLC0415

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        encoder = Encoder(self.options, self.value_type)
        client = get_client(self.options.zk)
        stats = write_pairs(client, self.options, arrow_pairs(batches, encoder), scope=scope, partition=partition)
        log.debug("partition %d attempt %d wrote %s", partition, attempt, stats)
        return ZkQueueCommitMessage(
            partition, attempt, stats.rows, stats.nodes, stats.multis, stats.deduped, scope, query, stats.large_items
        )


class ZkQueueWriter(_WriterBase, DataSourceArrowWriter):
    """Batch writes. With dedupe, the scope is ``dedupeKey`` or a random key drawn once per write."""

    def __init__(self, options: SinkOptions, schema: StructType, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite)
        self.scope = None
        if options.dedupe:
            self.scope = options.dedupe_key or f"write-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[Any]) -> ZkQueueCommitMessage:
        return self._write(iterator, self.scope, None)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        totals = WriteTotals.of(messages)
        log.info("zkqueue sink wrote %d row(s) in %d node(s) to %s (%d task(s), %d deduped, %d large)", totals.rows,
                 totals.nodes, self.options.path, totals.tasks, totals.deduped, totals.large_items)
        self._forget_random_scope()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        totals = WriteTotals.of(messages)
        log.warning(
            "zkqueue write to %s aborted: %d task(s) failed; %d row(s) from successful tasks are already in the "
            "queue (at-least-once: nothing is rolled back)", self.options.path, totals.failed_tasks, totals.rows,
        )
        self._forget_random_scope()

    def _forget_random_scope(self) -> None:
        # A random scope can never be written again once the job is over: its markers are garbage. A dedupeKey
        # scope is kept so that re-running the same write stays idempotent (delete it when done).
        if self.scope is None or self.options.dedupe_key is not None:
            return
        _delete_scopes(self.options, [self.scope])


class ZkQueueStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """Micro-batch writes. With dedupe, the scope is ``<query id>.<batch id>``: stable across restarts from the
    same checkpoint, so a batch that Spark re-runs (same id) adds no copies."""

    def write(self, iterator: Iterator[Any]) -> ZkQueueCommitMessage:
        from pyspark import TaskContext  # noqa: PLC0415

        ctx = TaskContext.get()
        query = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        scope = None
        if self.options.dedupe:
            if not query or batch is None:
                raise ConfigurationError("dedupe: this task carries no streaming query id / batch id")
            scope = f"{query}.{batch}"
        return self._write(iterator, scope, query)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark API
        totals = WriteTotals.of(messages)
        log.info("zkqueue sink batch %d: %d row(s) in %d node(s) to %s (%d deduped)", batchId, totals.rows,
                 totals.nodes, self.options.path, totals.deduped)
        if not self.options.dedupe:
            return
        queries = {m.query for m in messages if isinstance(m, ZkQueueCommitMessage) and m.query}
        if queries:
            # Batch N is being committed, so batch N-1 is in the commit log and will never re-run: its markers
            # (and older ones) can go. Batch N's own markers stay until N+1 commits (Spark re-runs N if the
            # driver dies before recording it).
            _delete_old_batches(self.options, queries, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        totals = WriteTotals.of(messages)
        log.warning("zkqueue sink batch %d aborted: %d task(s) failed, %d row(s) already in %s (at-least-once)",
                    batchId, totals.failed_tasks, totals.rows, self.options.path)


def _delete_scopes(options: SinkOptions, scopes: list[str]) -> None:
    from zkqueue.spark.clients import close_all, get_client  # noqa: PLC0415
    from zkqueue.spark.sink import delete_scopes  # noqa: PLC0415

    try:
        delete_scopes(get_client(options.zk), options.dedupe_path, scopes)
    except Exception:  # noqa: BLE001 - garbage collection only; the write itself succeeded
        log.warning("could not delete dedupe markers %s under %s", scopes, options.dedupe_path, exc_info=True)
    finally:
        close_all()


def _delete_old_batches(options: SinkOptions, queries: set[str], batch_id: int) -> None:
    from kazoo.exceptions import NoNodeError  # noqa: PLC0415

    from zkqueue.spark.clients import close_all, get_client  # noqa: PLC0415
    from zkqueue.spark.sink import delete_scopes  # noqa: PLC0415

    try:
        client = get_client(options.zk)
        try:
            children = client.get_children(options.dedupe_path)
        except NoNodeError:
            return
        old = []
        for name in children:
            query, _, batch = name.rpartition(".")
            if query in queries and batch.isdigit() and int(batch) < batch_id:
                old.append(name)
        if old:
            delete_scopes(client, options.dedupe_path, old)
    except Exception:  # noqa: BLE001 - garbage collection only
        log.warning("could not delete old dedupe markers under %s", options.dedupe_path, exc_info=True)
    finally:
        close_all()


class ZkQueueDataSource(DataSource):
    """``format("zkqueue")``: a sink (batch and streaming) into a Curator-compatible ZooKeeper queue, a
    Structured Streaming source and a batch read."""

    @classmethod
    def name(cls) -> str:
        return "zkqueue"

    def _sink_options(self) -> SinkOptions:
        return SinkOptions.from_options(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> ZkQueueWriter:
        return ZkQueueWriter(self._sink_options(), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> ZkQueueStreamWriter:  # noqa: N802 - Spark API
        return ZkQueueStreamWriter(self._sink_options(), schema, overwrite)

    def schema(self) -> str:
        """The rows of the streaming source and the batch read (see :mod:`zkqueue.spark.staged_reads`): they
        depend on the queue kind."""
        from zkqueue.spark.staged_reads import source_schema  # noqa: PLC0415

        kind = str(self.options.get("kind", "plain")).strip().lower()
        return source_schema(kind)

    def reader(self, schema: StructType) -> Any:
        """``spark.read.format("zkqueue")``: a durable claim read on the executors; see
        :mod:`zkqueue.spark.batch_source` for how it commits."""
        from zkqueue.spark.batch_source import ZkQueueBatchReader  # noqa: PLC0415
        from zkqueue.spark.staged_reads import SourceOptions  # noqa: PLC0415

        return ZkQueueBatchReader(SourceOptions.from_options(self.options))

    def streamReader(self, schema: StructType) -> Any:  # noqa: N802 - Spark API
        """``spark.readStream.format("zkqueue")``: durable claims into staging batches, exactly-once restarts."""
        from zkqueue.spark.staged_reads import SourceOptions  # noqa: PLC0415
        from zkqueue.spark.stream_source import ZkQueueStreamReader  # noqa: PLC0415

        return ZkQueueStreamReader(SourceOptions.from_options(self.options))
