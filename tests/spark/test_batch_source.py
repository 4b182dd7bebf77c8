"""The batch read ``spark.read.format("zkqueue")`` on a real local SparkSession and a real ZooKeeper: durable
claims read on the executors, the same rows again until the claim is committed, commits by ``claimed_read`` and
``commit_read``, and one kind of reader per consumer id."""

from __future__ import annotations

from typing import Any

import pytest

from zkqueue import BytesSerializer, QueueBuilder
from zkqueue.errors import ConfigurationError
from zkqueue.spark import claimed_read, commit_read
from zkqueue.spark.staging import Stage

pytestmark = pytest.mark.spark


def fill(client: Any, path: str, items: list[bytes]) -> None:
    with QueueBuilder.builder(client, None, BytesSerializer(), path).build_queue() as q:
        q.put_multi(items)
        assert q.flush_puts(60)


def queued_items(client: Any, path: str) -> int:
    return len(client.get_children(path))


def staged_batches(client: Any, path: str, consumer: str) -> list[str]:
    root = f"{path}-stream/{consumer}"
    return sorted(c for c in client.get_children(root) if c != "owner") if client.exists(root) else []


def values(df: Any) -> list[bytes]:
    return [bytes(r["value"]) for r in df.orderBy("name", "idx").collect()]


def test_claimed_read_commits_on_a_clean_exit(spark, zk_hosts, zk_client) -> None:
    items = [f"order-{i:05d}".encode() for i in range(3000)]
    for start in range(0, 3000, 500):  # six nodes of 500 items each
        fill(zk_client, "/read/orders", items[start : start + 500])
    with claimed_read(spark, "/read/orders", zkHosts=zk_hosts, consumerId="nightly", maxItems=1000) as df:
        first = values(df)
        again = values(df)  # a second action reads the same claim
        assert staged_batches(zk_client, "/read/orders", "nightly") != []
        assert queued_items(zk_client, "/read/orders") == 4  # 1000 items (two nodes) left the queue
    assert first == again == items[:1000]
    assert staged_batches(zk_client, "/read/orders", "nightly") == []  # committed
    rows = []
    for _ in range(2):
        with claimed_read(spark, "/read/orders", zkHosts=zk_hosts, consumerId="nightly", maxItems=1000) as df:
            rows.extend(df.collect())
    assert sorted(bytes(r["value"]) for r in rows) == items[1000:]
    assert len({r["id"] for r in rows}) == 2000
    assert all(r["id"] == f"{r['name']}:{r['idx']}" for r in rows)


def test_a_failed_job_keeps_its_claim_and_the_next_read_returns_the_same_rows(spark, zk_hosts, zk_client) -> None:
    items = [f"row-{i}".encode() for i in range(400)]
    fill(zk_client, "/read/retry", items)
    fill(zk_client, "/read/retry", [b"later"])
    with pytest.raises(RuntimeError, match="the sink failed"):
        with claimed_read(spark, "/read/retry", zkHosts=zk_hosts, consumerId="etl", maxItems=400) as df:
            seen = values(df)
            raise RuntimeError("the sink failed")
    assert sorted(seen) == sorted(items)
    assert len(staged_batches(zk_client, "/read/retry", "etl")) == 1  # kept for the rerun
    assert zk_client.exists("/read/retry-stream/etl/owner") is None  # but the reader is gone
    # A bare read with the same consumer id returns the claimed rows again (not the item put later).
    df = spark.read.format("zkqueue").option("zkHosts", zk_hosts).option("consumerId", "etl").load("/read/retry")
    assert values(df) == seen
    assert values(df) == seen  # every action, until committed
    assert commit_read("/read/retry", zkHosts=zk_hosts, consumerId="etl") == 1
    assert staged_batches(zk_client, "/read/retry", "etl") == []
    assert commit_read("/read/retry", zkHosts=zk_hosts, consumerId="etl") == 0
    with claimed_read(spark, "/read/retry", zkHosts=zk_hosts, consumerId="etl") as df:
        assert values(df) == [b"later"]
    assert queued_items(zk_client, "/read/retry") == 0


def test_the_rows_are_read_by_executor_tasks(spark, zk_hosts, zk_client) -> None:
    items = [bytes([i % 251]) * 300 + str(i).encode() for i in range(12_000)]  # about 3.6 MB: several segments
    for start in range(0, len(items), 1000):
        fill(zk_client, "/read/wide", items[start : start + 1000])
    with claimed_read(spark, "/read/wide", zkHosts=zk_hosts, consumerId="wide", partitions=3) as df:
        assert df.rdd.getNumPartitions() == 3
        per_task = df.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
        assert sum(per_task) == len(items) and all(n > 0 for n in per_task)
        assert sorted(values(df)) == sorted(items)


def test_an_empty_queue_reads_no_rows_and_leaves_no_batch(spark, zk_hosts, zk_client) -> None:
    zk_client.ensure_path("/read/empty")
    with claimed_read(spark, "/read/empty", zkHosts=zk_hosts, consumerId="idle") as df:
        assert df.count() == 0
        assert df.columns == ["id", "name", "idx", "value"]
    assert staged_batches(zk_client, "/read/empty", "idle") == []


def test_kinds_give_their_key_columns_in_queue_order(spark, zk_hosts, zk_client) -> None:
    with QueueBuilder.builder(zk_client, None, BytesSerializer(), "/read/prio").build_priority_queue(0) as q:
        for priority in (5, -3, 9, 0):
            q.put(f"p{priority}".encode(), priority)
        assert q.flush_puts(30)
    with claimed_read(spark, "/read/prio", zkHosts=zk_hosts, consumerId="p", kind="priority") as df:
        rows = df.orderBy("priority").collect()
    assert [(r["priority"], bytes(r["value"])) for r in rows] == [(-3, b"p-3"), (0, b"p0"), (5, b"p5"), (9, b"p9")]


def test_a_consumer_id_serves_one_kind_of_reader_and_one_live_claim(spark, zk_hosts, zk_client) -> None:
    fill(zk_client, "/read/shared", [b"x"])
    Stage(zk_client, "/read/shared", "streamer").acquire(5.0)  # a streaming query's consumer id
    with pytest.raises(ConfigurationError, match="need different consumerIds"):
        with claimed_read(spark, "/read/shared", zkHosts=zk_hosts, consumerId="streamer"):
            pass
    df = spark.read.format("zkqueue").option("zkHosts", zk_hosts).option("consumerId", "streamer").load("/read/shared")
    with pytest.raises(Exception, match="need different consumerIds"):
        df.collect()
    with claimed_read(spark, "/read/shared", zkHosts=zk_hosts, consumerId="reader") as df:
        with pytest.raises(Exception, match="another reader"):  # a second live claim of the same id
            with claimed_read(spark, "/read/shared", zkHosts=zk_hosts, consumerId="reader", ownerWait=1):
                pass
        assert values(df) == [b"x"]
    assert queued_items(zk_client, "/read/shared") == 0


def test_options_are_checked(spark, zk_hosts) -> None:
    with pytest.raises(ConfigurationError, match="consumerId is required"):
        with claimed_read(spark, "/read/x", zkHosts=zk_hosts):
            pass
    with pytest.raises(ConfigurationError, match="option batches"):
        with claimed_read(spark, "/read/x", zkHosts=zk_hosts, consumerId="c", batches="1,two"):
            pass
