"""Executor consumers (zkqueue.spark.consume) and the bounded driver read (read_queue) on the shared session."""

from __future__ import annotations

from collections import Counter

import pytest

from zkqueue.formats import naming
from zkqueue.errors import ConfigurationError
from zkqueue.spark import consume, put_partition, read_queue

from spark_helpers import FailOn, Recorder, handled

pytestmark = pytest.mark.spark


def _fill(hosts: str, path: str, items: list[bytes], **options) -> None:
    put_partition(({"v": item} for item in items), hosts, path, value_column="v", **options)


def test_executor_consumers_handle_every_item_once(spark, zk_hosts, zk_client, tmp_path):
    items = [f"job-{i}".encode() for i in range(3000)]
    _fill(zk_hosts, "/jobs", items, items_per_node=2)
    result = consume(spark, zk_hosts, "/jobs", Recorder(str(tmp_path)), parallelism=2, lock_path="/jobs-locks",
                     session_timeout=4.0)
    assert Counter(handled(tmp_path)) == Counter(items)
    assert result.processed == len(items) and result.failed == 0
    assert sorted(t.partition for t in result.tasks) == [0, 1]
    assert zk_client.get_children("/jobs") == [] and zk_client.get_children("/jobs-locks") == []


def test_handler_failures_are_counted_and_handled_per_error_mode(spark, zk_hosts, zk_client, tmp_path):
    items = [f"x-{i}".encode() for i in range(50)]
    (tmp_path / "d").mkdir()
    (tmp_path / "r").mkdir()
    _fill(zk_hosts, "/del", items)
    result = consume(spark, zk_hosts, "/del", FailOn(str(tmp_path / "d"), b"x-7"), parallelism=2,
                     on_error="delete", session_timeout=4.0)
    assert (result.processed, result.failed, result.deleted_on_error) == (49, 1, 1)
    assert zk_client.get_children("/del") == []

    _fill(zk_hosts, "/req", items)
    result = consume(spark, zk_hosts, "/req", FailOn(str(tmp_path / "r"), b"x-7"), parallelism=1, until=3.0,
                     session_timeout=4.0)
    assert result.processed == 49 and result.failed >= 1 and result.requeued == result.failed
    left = zk_client.get_children("/req")
    assert len(left) == 1 and zk_client.get(f"/req/{left[0]}")[0].endswith(b"x-7\x02")


def test_consume_rejects_bad_arguments_on_the_driver(spark, zk_hosts):
    with pytest.raises(ConfigurationError, match="parallelism"):
        consume(spark, zk_hosts, "/q", print, parallelism=0)
    with pytest.raises(ConfigurationError, match="until"):
        consume(spark, zk_hosts, "/q", print, until="never")
    with pytest.raises(ConfigurationError, match="serializer"):
        consume(spark, zk_hosts, "/q", print, serializer="pickle")


def test_read_queue_takes_a_bounded_batch_in_queue_order(spark, zk_hosts, zk_client):
    items = [f"r-{i:03d}".encode() for i in range(100)]
    _fill(zk_hosts, "/rq", items, items_per_node=4, batch_size=5)
    first = read_queue(spark, zk_hosts, "/rq", max_items=30, lock_path="/rq-locks").collect()
    # Whole nodes only: 7 nodes of 4 items fit under 30.
    assert [bytes(r.value) for r in first] == items[:28]
    assert [r.idx for r in first[:5]] == [0, 1, 2, 3, 0]
    assert len(zk_client.get_children("/rq")) == 25 - 7
    assert zk_client.get_children("/rq-locks") == []
    rest = read_queue(spark, zk_hosts, "/rq", serializer="str").collect()
    assert [r.value for r in rest] == [i.decode() for i in items[28:]]
    assert zk_client.get_children("/rq") == []
    assert read_queue(spark, zk_hosts, "/rq").count() == 0
    assert read_queue(spark, zk_hosts, "/missing").count() == 0


def test_read_queue_skips_items_a_consumer_holds(spark, zk_hosts, zk_client):
    _fill(zk_hosts, "/held", [b"a", b"b", b"c"])
    names = sorted(zk_client.get_children("/held"))
    zk_client.create("/held-locks/" + naming.lock_name(names[1], "/held"), b"", ephemeral=True, makepath=True)
    got = read_queue(spark, zk_hosts, "/held", lock_path="/held-locks").collect()
    assert [bytes(r.value) for r in got] == [b"a", b"c"]
    assert zk_client.get_children("/held") == [names[1]]
