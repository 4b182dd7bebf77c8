"""Executor consumers (zkqueue.spark.consume) and the bounded driver read (read_queue) on the shared session."""

from __future__ import annotations

from collections import Counter

import pytest

from zkqueue import BytesSerializer, DistributedQueue
from zkqueue.formats import framing, naming
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


def test_read_queue_leaves_what_a_pull_consumer_holds_and_ends_its_own_leases(spark, zk_hosts, zk_client):
    _fill(zk_hosts, "/pull", [b"a", b"b", b"c", b"d"])
    names = sorted(zk_client.get_children("/pull"))
    other = DistributedQueue(zk_client, None, BytesSerializer(), "/pull", lock_path="/pull-locks",
                             put_in_background=False)
    other.start()
    try:
        (held,) = other.claim_nodes(1, timeout=10.0)  # a lock-safe consumer holds the head node
        assert held.name == names[0]
        theirs = sorted(zk_client.get_children("/pull-locks"))  # its item lock and its session fence
        assert len(theirs) == 2 and len(zk_client.get_children(f"/pull/{names[0]}")) == 1  # + its fence child

        got = read_queue(spark, zk_hosts, "/pull", lock_path="/pull-locks").collect()
        assert [bytes(r.value) for r in got] == [b"b", b"c", b"d"]
        assert zk_client.get_children("/pull") == [names[0]]
        # read_queue's leases and its session's fence are gone with it; the other consumer's are untouched
        assert sorted(zk_client.get_children("/pull-locks")) == theirs
        assert len(zk_client.get_children(f"/pull/{names[0]}")) == 1

        other.complete_nodes([held])  # its lease still holds: its fenced ack commits
    finally:
        other.close()
    assert zk_client.get_children("/pull") == [] and zk_client.get_children("/pull-locks") == []


def test_read_queue_skips_corrupt_nodes_and_with_a_lock_path_quarantines_them(spark, zk_hosts, zk_client):
    _fill(zk_hosts, "/cq", [b"a"])
    bad = zk_client.create("/cq/queue-", b"not a framed item", sequence=True).rsplit("/", 1)[1]
    zk_client.create("/cq/queue-", framing.encode_items([b"z"]), sequence=True)

    got = read_queue(spark, zk_hosts, "/cq", max_items=1).collect()  # no lock path: skipped and left in place
    assert [bytes(r.value) for r in got] == [b"a"]
    assert bad in zk_client.get_children("/cq")
    got = read_queue(spark, zk_hosts, "/cq", lock_path="/cq-locks").collect()  # the pull claim quarantines it
    assert [bytes(r.value) for r in got] == [b"z"]
    assert zk_client.get_children("/cq") == []
    # (named after it; the engine adds a sequence suffix when the quarantine node did not exist yet)
    (quarantined,) = zk_client.get_children("/cq-quarantine")
    assert quarantined.startswith(bad) and zk_client.get(f"/cq-quarantine/{quarantined}")[0] == b"not a framed item"
    assert zk_client.get_children("/cq-locks") == []


def test_read_queue_with_a_lock_path_follows_each_kinds_order(spark, zk_hosts, zk_client):
    import datetime

    rows = [{"v": f"p{p}-{i}".encode(), "priority": p} for i, p in enumerate([3, -1, 2, -1, 0])]
    put_partition(rows, zk_hosts, "/kp", value_column="v", kind="priority")
    got = read_queue(spark, zk_hosts, "/kp", kind="priority", lock_path="/kp-locks", max_items=4).collect()
    assert [(r.priority, bytes(r.value)) for r in got] == [(-1, b"p-1-1"), (-1, b"p-1-3"), (0, b"p0-4"), (2, b"p2-2")]
    assert zk_client.get_children("/kp-locks") == [] and len(zk_client.get_children("/kp")) == 1

    utc = datetime.timezone.utc
    due = [datetime.datetime(2001, 1, 2, tzinfo=utc), datetime.datetime(2999, 1, 1, tzinfo=utc),
           datetime.datetime(2001, 1, 1, tzinfo=utc)]
    put_partition(({"v": f"d{i}".encode(), "delay_until": d} for i, d in enumerate(due)), zk_hosts, "/kd",
                  value_column="v", kind="delay")
    got = read_queue(spark, zk_hosts, "/kd", kind="delay", lock_path="/kd-locks").collect()
    assert [bytes(r.value) for r in got] == [b"d2", b"d0"]  # due ones only, by due time
    assert [r.delay_until for r in got] == [int(d.timestamp() * 1000) for d in (due[2], due[0])]
    assert zk_client.get_children("/kd-locks") == [] and len(zk_client.get_children("/kd")) == 1
