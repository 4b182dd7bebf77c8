"""The Structured Streaming source on a real local SparkSession and a real ZooKeeper: exactly-once restarts,
admission control, one live query per consumer id, queue kinds, and a driver SIGKILLed mid-batch."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from zkqueue import BytesSerializer, QueueBuilder
from zkqueue.server.testing import wait_for

pytestmark = pytest.mark.spark


def fill(client: Any, path: str, items: list[bytes]) -> None:
    with QueueBuilder.builder(client, None, BytesSerializer(), path).build_queue() as q:
        for item in items:
            q.put(item)
        assert q.flush_puts(60)


def source(spark: Any, hosts: str, path: str, consumer: str, **options: Any) -> Any:
    reader = spark.readStream.format("zkqueue").option("zkHosts", hosts).option("consumerId", consumer)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(path)


def parquet_rows(spark: Any, out: Path) -> list[Any]:
    return spark.read.parquet(str(out)).collect() if (out / "_spark_metadata").exists() else []


def test_stopped_and_restarted_query_delivers_every_item_exactly_once(spark, zk_hosts, zk_client, tmp_path) -> None:
    items = [f"item-{i}".encode() for i in range(3000)]  # 8 batches of 400
    fill(zk_client, "/stream/q", items)
    out, chk = tmp_path / "out", tmp_path / "chk"

    def start(trigger: dict[str, Any]) -> Any:
        df = source(spark, zk_hosts, "/stream/q", "etl", maxItemsPerTrigger=400)
        return (df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(chk))
                .trigger(**trigger).start())

    first = start({"processingTime": "0 seconds"})
    try:
        wait_for(lambda: len(first.recentProgress) >= 3 and first.lastProgress["batchId"] >= 2, timeout=180,
                 interval=0.2, message="the first run made no progress")
    finally:
        first.stop()
    done_first = len(parquet_rows(spark, out))
    assert 0 < done_first < len(items)
    second = start({"availableNow": True})
    second.awaitTermination(300)
    rows = parquet_rows(spark, out)
    assert len(rows) == len(items)  # nothing lost, nothing twice
    assert len({r["id"] for r in rows}) == len(items)
    assert sorted(bytes(r["value"]) for r in rows) == sorted(items)
    assert all(r["id"] == f"{r['name']}:{r['idx']}" for r in rows)
    assert zk_client.get_children("/stream/q") == []
    # Spark commits a source's offsets when it plans the next batch: the last batch stays staged until then.
    assert len([c for c in zk_client.get_children("/stream/q-stream/etl") if c != "owner"]) <= 1


def test_max_items_per_trigger_bounds_every_batch(spark, zk_hosts, zk_client, tmp_path) -> None:
    fill(zk_client, "/stream/bounded", [f"{i}".encode() for i in range(1000)])
    df = source(spark, zk_hosts, "/stream/bounded", "bounded", maxItemsPerTrigger=150)
    query = (df.writeStream.format("memory").queryName("bounded_rows")
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    query.awaitTermination(300)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 1000 and max(sizes) <= 150 and len(sizes) >= 7
    assert spark.sql("select count(distinct id) from bounded_rows").collect()[0][0] == 1000


def test_a_second_query_with_the_same_consumer_id_is_refused(spark, zk_hosts, zk_client, tmp_path) -> None:
    fill(zk_client, "/stream/one", [b"x"] * 10)
    first = (source(spark, zk_hosts, "/stream/one", "only-one").writeStream.format("memory").queryName("one_a")
             .option("checkpointLocation", str(tmp_path / "a")).trigger(processingTime="1 second").start())
    try:
        wait_for(lambda: first.lastProgress is not None, timeout=120, message="the first query never ran")
        second = (source(spark, zk_hosts, "/stream/one", "only-one", ownerWait=1).writeStream.format("memory")
                  .queryName("one_b").option("checkpointLocation", str(tmp_path / "b")).start())
        with pytest.raises(Exception, match="another reader"):
            second.awaitTermination(120)
        assert first.isActive
    finally:
        first.stop()


def _batches(spark: Any, df: Any, chk: Path) -> list[list[Any]]:
    seen: list[list[Any]] = []
    query = (df.writeStream.foreachBatch(lambda batch, _id: seen.append(batch.collect()))
             .option("checkpointLocation", str(chk)).trigger(availableNow=True).start())
    query.awaitTermination(300)
    return [b for b in seen if b]


def test_priority_order_holds_across_batches(spark, zk_hosts, zk_client, tmp_path) -> None:
    entries = [(p, f"p{p}-{i}".encode()) for p in (0, 1, 2) for i in range(10)]
    random.Random(3).shuffle(entries)
    with QueueBuilder.builder(zk_client, None, BytesSerializer(), "/stream/prio").build_priority_queue(0) as q:
        for priority, item in entries:
            q.put(item, priority)
        assert q.flush_puts(30)
    df = source(spark, zk_hosts, "/stream/prio", "prio", kind="priority", maxItemsPerTrigger=10)
    batches = _batches(spark, df, tmp_path / "chk")
    assert [sorted({r["priority"] for r in b}) for b in batches] == [[0], [1], [2]]
    assert all(bytes(r["value"]).startswith(f"p{r['priority']}-".encode()) for b in batches for r in b)


def test_delay_queue_streams_only_due_items(spark, zk_hosts, zk_client, tmp_path) -> None:
    now = int(time.time() * 1000)
    # park_after=None: the later items stay in the queue node, where the source must leave them (parked ones would
    # not even be listed)
    with QueueBuilder.builder(zk_client, None, BytesSerializer(), "/stream/delay").build_delay_queue(
            park_after=None) as q:
        for i in range(5):
            q.put(f"due-{i}".encode(), now - 1000 * (i + 1))
            q.put(f"later-{i}".encode(), now + 3_600_000)
        assert q.flush_puts(30)
    df = source(spark, zk_hosts, "/stream/delay", "delay", kind="delay")
    rows = [r for b in _batches(spark, df, tmp_path / "chk") for r in b]
    assert sorted(bytes(r["value"]) for r in rows) == [f"due-{i}".encode() for i in range(5)]
    assert all(r["delay_until"] <= now for r in rows)
    assert len(zk_client.get_children("/stream/delay")) == 5  # the later ones wait in the queue


def test_lock_safe_consumers_never_see_staged_items_and_keep_theirs(spark, zk_hosts, zk_client, tmp_path) -> None:
    """Items a lock-safe consumer holds are not staged (the staging multi checks its lease); staged items are
    outside the queue node, so the consumer never sees them. Every item ends in exactly one of the two."""
    import queue as stdqueue
    import threading

    items = [f"{i}".encode() for i in range(600)]
    fill(zk_client, "/stream/shared", items)
    got: stdqueue.Queue[bytes] = stdqueue.Queue()
    gate = threading.Event()

    def slow(item: bytes) -> None:
        gate.wait(0.01)
        got.put(item)

    consumer = (QueueBuilder.builder(zk_client, slow, BytesSerializer(), "/stream/shared")
                .lock_path("/stream/shared-locks").build_queue())
    with consumer:
        df = source(spark, zk_hosts, "/stream/shared", "shared", lockPath="/stream/shared-locks",
                    maxItemsPerTrigger=100)
        query = (df.writeStream.format("memory").queryName("shared_rows")
                 .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
        query.awaitTermination(300)
        streamed = [bytes(r["value"]) for r in spark.sql("select value from shared_rows").collect()]
        wait_for(lambda: zk_client.get_children("/stream/shared") == [], timeout=120, interval=0.1)
        assert consumer.flush_acks(30)
    consumed = []
    while not got.empty():
        consumed.append(got.get())
    assert streamed and consumed
    assert sorted(streamed + consumed) == sorted(items)  # each exactly once, in one place or the other


def test_driver_killed_mid_batch_then_restarted_delivers_exactly_once(zk_hosts, zk_client, tmp_path) -> None:
    """A driver subprocess is SIGKILLed (with its JVM) while batches run; a new driver with the same checkpoint
    and consumer id drains the rest. The Parquet output (read through its metadata log) holds every item once."""
    from spark_session import start_driver  # type: ignore[import-not-found]

    items = [f"k-{i}".encode() for i in range(800)]  # 4 batches of 200: the kill comes after 2
    fill(zk_client, "/stream/killed", items)
    out, chk = tmp_path / "out", tmp_path / "chk"

    def driver(mode: str) -> subprocess.Popen:
        cfg = {"hosts": zk_hosts, "path": "/stream/killed", "out": str(out), "chk": str(chk), "mode": mode,
               "consumer": "killed", "max": 200, "warehouse": str(tmp_path / "wh")}
        return start_driver("stream_driver.py", cfg, tmp_path / f"{mode}.log", start_new_session=True)

    run = driver("run")
    try:
        commits = chk / "commits"
        wait_for(lambda: commits.exists() and len([p for p in commits.iterdir() if p.name.isdigit()]) >= 2,
                 timeout=240, interval=0.1, message=(tmp_path / "run.log").read_text()[-3000:])
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    staged = [c for c in zk_client.get_children("/stream/killed-stream/killed") if c != "owner"]
    drain = driver("drain")
    assert drain.wait(300) == 0, (tmp_path / "drain.log").read_text()[-3000:]
    result = json.loads((tmp_path / "drain.log").read_text().strip().splitlines()[-1])
    assert result["rows"] == len(items) and result["distinct_ids"] == len(items)
    assert result["values"] == len(set(items))
    assert zk_client.get_children("/stream/killed") == []
    assert len([c for c in zk_client.get_children("/stream/killed-stream/killed") if c != "owner"]) <= 1
    assert staged  # the kill left staged batches behind, which the second driver replayed or committed


def test_large_items_stream_whole_and_corrupt_nodes_go_to_the_quarantine(spark, zk_hosts, zk_client,
                                                                          tmp_path) -> None:
    big = os.urandom(3 * 2**20)
    with (QueueBuilder.builder(zk_client, None, BytesSerializer(), "/stream/mix").large_items()
          .build_queue()) as q:
        q.put(b"first")
        q.put(big)
        assert q.flush_puts(30)
    zk_client.create("/stream/mix/queue-", b"not a frame", sequence=True)
    fill(zk_client, "/stream/mix", [b"last"])
    rows = [r for b in _batches(spark, source(spark, zk_hosts, "/stream/mix", "mix"), tmp_path / "chk") for r in b]
    assert [bytes(r["value"]) for r in sorted(rows, key=lambda r: r["name"])] == [b"first", big, b"last"]
    assert len(zk_client.get_children("/stream/mix-quarantine")) == 1
    assert zk_client.get_children("/stream/mix") == []
