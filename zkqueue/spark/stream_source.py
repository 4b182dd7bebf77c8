"""``spark.readStream.format("zkqueue")``: a Structured Streaming source with durable claims.

::

    zkqueue.spark.register(spark)
    stream = (spark.readStream.format("zkqueue")
              .option("zkHosts", "zk1:2181").option("consumerId", "orders-etl")
              .option("maxItemsPerTrigger", 10_000)
              .load("/queues/orders"))

How a micro-batch goes (see :mod:`zkqueue.spark.staging`):

- ``latestOffset`` (driver) moves up to the limit of due items into a new staging batch ``b<n>`` under
  ``<queue>-stream/<consumerId>``; each item's copy is created and the original deleted (under its version, and
  only if no lock-safe consumer holds it) in one multi. The offset is ``{"batch": n}``. Staged batches that
  Spark has not committed (after a restart) are offered again first, so a replay returns the same rows.
- ``partitions`` hands the executors the staged paths; ``read`` reads them (large items from their blobs) and
  never deletes anything.
- ``commit`` deletes the staged batches up to the committed offset.
- One live query per consumer id: an ephemeral owner node fences it; a second query fails with a clear error.

Rows: ``id`` (``<node name>:<index in node>``, stable across replays, for idempotent sinks), ``name``, ``idx``,
``value`` (binary), plus ``priority`` / ``delay_until`` / ``item_id`` for those queue kinds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader

try:  # PySpark 4.2+: Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older PySpark: every trigger reads what is due at each batch
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

from zkqueue.spark.staged_reads import SourceOptions, StagedPartition, split_segments, stage_for, staged_rows

log = logging.getLogger("zkqueue.spark.stream_source")


def _offset(batch: int) -> dict[str, int]:
    return {"batch": int(batch)}


class ZkQueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """The streaming source's reader (see the module docs). Its driver side holds a client and the owner node."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._stage: Any = None
        self._last: int | None = None  # PySpark < 4.2 calls latestOffset() without the start offset
        self._available_now: set[str] | None = None

    # ------------------------------------------------------------------------------------------ driver side
    def _staging(self) -> Any:
        if self._stage is None:
            stage = stage_for(self.options)
            stage.acquire(self.options.owner_wait)
            self._stage = stage
        return self._stage

    def initialOffset(self) -> dict:  # noqa: N802 - Spark API
        """Before the oldest staged batch not committed yet (a query whose checkpoint is new still gets it),
        else batch 0."""
        pending = self._staging().batches()
        start = pending[0] - 1 if pending else 0
        self._last = start
        return _offset(start)

    def getDefaultReadLimit(self) -> Any:  # noqa: N802 - Spark API
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: PLC0415

        limit = self.options.max_items_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark API (SupportsTriggerAvailableNow)
        """Trigger.AvailableNow: drain what is due now (and what is already staged), nothing put later."""
        stage = self._staging()
        self._available_now = set(stage.due(stage.client.get_children(stage.queue_path)))

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:  # noqa: N802 - Spark API
        stage = self._staging()
        current = int(start["batch"]) if start is not None else (self._last or 0)
        pending = [n for n in stage.batches() if n > current]
        if pending:
            end = pending[0]  # staged before a restart: offered again, one batch at a time
        else:
            end = current + 1
            if stage.stage(end, self._max_rows(limit), only=self._available_now) == 0:
                end = current
        self._last = end
        return _offset(end)

    def _max_rows(self, limit: Any) -> int | None:
        if limit is None:  # PySpark < 4.2: no admission control passed in; the option applies
            return self.options.max_items_per_trigger
        max_rows = getattr(limit, "max_rows", None)
        if max_rows is None:
            max_rows = getattr(limit, "maxRows", None)
        return None if max_rows is None else int(max_rows)

    def partitions(self, start: dict, end: dict) -> list[StagedPartition]:
        stage = self._staging()
        segments = [p for n in range(int(start["batch"]) + 1, int(end["batch"]) + 1) for p in stage.staged(n)]
        return split_segments(segments, self.options.partitions)

    def commit(self, end: dict) -> None:
        deleted = self._staging().commit(int(end["batch"]))
        log.debug("committed staged batches up to %s (%d deleted)", end, deleted)

    def stop(self) -> None:
        if self._stage is not None:
            try:
                self._stage.release()
            except Exception:  # noqa: BLE001 - the owner is ephemeral anyway
                log.debug("could not release the stream owner node", exc_info=True)

    # ------------------------------------------------------------------------------------------ executor side
    def read(self, partition: StagedPartition) -> Iterator[Any]:
        """The rows of one task's segments, as Arrow record batches; never deletes anything."""
        return staged_rows(self.options, partition)
