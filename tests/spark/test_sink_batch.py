"""The zkqueue data source as a batch sink: formats, kinds, framing, dedupe, backpressure, bad options."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from kazoo.client import KazooClient

from zkqueue.formats import framing, naming
from zkqueue.spark import put_partition, read_queue
from zkqueue.server.testing import wait_for

from zkqueue.server.testing import queue_frames  # noqa: E402

pytestmark = pytest.mark.spark


def _items(client: KazooClient, path: str) -> list[tuple[str, list[bytes]]]:
    return queue_frames(client, path)


def test_20k_rows_into_plain_and_id_queues_come_back_exactly(spark, zk_hosts, zk_client):
    n = 20_000  # 10k rows per task: many chunks and pipelined multis each (scale is the benchmarks' to show)
    df = spark.range(n).selectExpr("concat('job-', id % 19997) AS job", "concat('payload-', id) AS value")
    expected_values = Counter(f"payload-{i}".encode() for i in range(n))
    writer = df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).option("valueColumn", "value")
    writer.save("/plain")
    writer.option("kind", "id").option("idColumn", "job").save("/ids")

    plain = read_queue(spark, zk_hosts, "/plain").collect()
    assert Counter(bytes(r.value) for r in plain) == expected_values
    assert all(r.idx == 0 for r in plain)

    by_id = read_queue(spark, zk_hosts, "/ids", kind="id", serializer="str").collect()
    expected_pairs = Counter((f"job-{i % 19997}", f"payload-{i}") for i in range(n))
    assert Counter((r.id, r.value) for r in by_id) == expected_pairs
    assert all(naming.parse_id(r.name)[0] == r.id for r in by_id)
    assert zk_client.get_children("/plain") == [] and zk_client.get_children("/ids") == []


def test_kinds_and_framing_follow_curator_names(spark, zk_hosts, zk_client):
    import datetime

    rows = [(f"v{i}", i % 2 - 1, datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc), f"id/{i // 2}")
            for i in range(12)]
    df = spark.createDataFrame(rows, "v STRING, p INT, due TIMESTAMP, job STRING").coalesce(1)
    base = df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).option("valueColumn", "v")

    base.option("itemsPerNode", "5").save("/multi")
    assert [items for _, items in _items(zk_client, "/multi")] == [
        [f"v{i}".encode() for i in range(0, 5)], [f"v{i}".encode() for i in range(5, 10)], [b"v10", b"v11"]]

    base.option("kind", "priority").option("priorityColumn", "p").save("/prio")
    prio = _items(zk_client, "/prio")
    assert [naming.parse_priority(name) for name, _ in prio].count(-1) == 6
    assert all(naming.parse_priority(n) == int(items[0][1:]) % 2 - 1 for n, items in prio)

    base.option("kind", "delay").option("delayColumn", "due").save("/delay")
    epoch = int(datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc).timestamp() * 1000)
    assert {naming.parse_delay_epoch(name) for name, _ in _items(zk_client, "/delay")} == {epoch}

    # Consecutive rows with the same id share a node (up to itemsPerNode); '/' in an id is escaped reversibly.
    base.option("kind", "id").option("idColumn", "job").option("itemsPerNode", "2").save("/ids")
    ids = _items(zk_client, "/ids")
    assert [(naming.parse_id(name)[0], items) for name, items in ids] == [
        (f"id/{k}", [f"v{2 * k}".encode(), f"v{2 * k + 1}".encode()]) for k in range(6)]


def test_rows_as_json_by_default(spark, zk_hosts, zk_client):
    import json

    df = spark.sql(
        "SELECT * FROM VALUES (1, 'a', CAST(NULL AS DOUBLE), map('k', array(1, 2)), DATE'2030-01-02', X'00ff'),"
        " (2, 'b', 2.5, map(), DATE'2030-01-03', X'') AS t(n, s, x, m, d, b)"
    ).coalesce(1)
    df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).save("/json")
    assert [json.loads(items[0]) for _, items in _items(zk_client, "/json")] == [
        {"n": 1, "s": "a", "x": None, "m": {"k": [1, 2]}, "d": "2030-01-02", "b": "AP8="},
        {"n": 2, "s": "b", "x": 2.5, "m": {}, "d": "2030-01-03", "b": ""},
    ]


def test_dedupe_key_makes_a_rerun_write_idempotent(spark, zk_hosts, zk_client):
    df = spark.range(500).selectExpr("cast(id AS STRING) AS v")
    writer = (df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).option("valueColumn", "v")
              .option("dedupe", "true").option("dedupeKey", "load-2026-11-21").option("batchSize", "50"))
    writer.save("/once")
    writer.save("/once")
    assert Counter(p for _, items in _items(zk_client, "/once") for p in items) == Counter(
        str(i).encode() for i in range(500))
    # A dedupeKey's markers are kept (so re-runs stay idempotent): one per committed chunk.
    assert len(zk_client.get_children("/once-dedupe/load-2026-11-21")) == 10


def test_max_items_blocks_until_consumers_make_room(spark, zk_hosts, zk_client):
    stop = threading.Event()
    peak = [0]

    def drain() -> None:  # a slow consumer on the driver
        while not stop.is_set():
            names = zk_client.get_children("/bounded") if zk_client.exists("/bounded") else []
            peak[0] = max(peak[0], len(names))
            for name in sorted(names)[:3]:
                zk_client.delete(f"/bounded/{name}")
            stop.wait(0.02)

    consumer = threading.Thread(target=drain, daemon=True)
    consumer.start()
    try:
        df = spark.range(0, 200, 1, 1).selectExpr("cast(id AS STRING) AS v")
        (df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).option("valueColumn", "v")
         .option("maxItems", "20").option("batchSize", "5").save("/bounded"))
        wait_for(lambda: zk_client.get_children("/bounded") == [], message="the consumer never drained the queue")
    finally:
        stop.set()
        consumer.join(5)
    assert 0 < peak[0] <= 20


def test_max_items_timeout_fails_the_write(spark, zk_hosts, zk_client):
    df = spark.range(0, 50, 1, 1).selectExpr("cast(id AS STRING) AS v")
    with pytest.raises(Exception, match="maxItems=12"):
        (df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).option("valueColumn", "v")
         .option("maxItems", "12").option("batchSize", "5").option("maxItemsTimeout", "0.5").save("/full"))
    assert len(zk_client.get_children("/full")) == 10  # two chunks of 5 fit; the third never did


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "zkHosts"),
        ({"zkHosts": "HOSTS", "kind": "fifo"}, "option kind"),
        ({"zkHosts": "HOSTS", "kind": "id"}, "needs column 'id'"),
        ({"zkHosts": "HOSTS", "valueColumn": "n"}, "valueColumn 'n' is"),
        ({"zkHosts": "HOSTS", "itemsPerNode": "0"}, "itemspernode"),
        ({"zkHosts": "HOSTS", "dedupe": "false", "dedupeKey": "k"}, "dedupeKey needs dedupe"),
        ({"zkHosts": "HOSTS", "serializer": "pickle"}, "option serializer"),
    ],
)
def test_bad_options_fail_with_a_clear_message(spark, zk_hosts, options, message):
    df = spark.createDataFrame([(1, "a")], "n INT, s STRING")
    writer = df.write.format("zkqueue").mode("append")
    for key, value in options.items():
        writer = writer.option(key, zk_hosts if value == "HOSTS" else value)
    with pytest.raises(Exception, match=message):
        writer.save("/never")


def test_overwrite_mode_is_refused(spark, zk_hosts):
    df = spark.createDataFrame([("a",)], "s STRING")
    with pytest.raises(Exception, match="only appends"):
        df.write.format("zkqueue").mode("overwrite").option("zkHosts", zk_hosts).save("/never")


def test_bad_rows_fail_the_task_with_the_row_number(spark, zk_hosts):
    df = spark.createDataFrame([("a", 1), (None, 2)], "v STRING, p INT").coalesce(1)
    with pytest.raises(Exception, match="row 1: column 'v' is null"):
        df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).option("valueColumn", "v").save("/q")


def test_put_partition_in_foreach_partition(spark, zk_hosts, zk_client):
    hosts = zk_hosts

    def put(rows):
        put_partition(rows, hosts, "/fp", kind="priority", priority_column="p", value_column="v")

    spark.createDataFrame([(f"v{i}", 3 - i % 4) for i in range(40)], "v STRING, p INT").foreachPartition(put)
    items = _items(zk_client, "/fp")
    assert len(items) == 40
    assert all(naming.parse_priority(name) == 3 - int(payload[0][1:]) % 4 for name, payload in items)


def test_auth_and_creator_acl(spark, zk_hosts, zk_client_factory):
    from kazoo.exceptions import NoAuthError

    df = spark.createDataFrame([("secret",)], "v STRING")
    (df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).option("valueColumn", "v")
     .option("auth", "digest:alice:pw").option("acl", "creator").save("/private"))
    outsider = zk_client_factory()
    with pytest.raises(NoAuthError):  # the queue node and its items belong to their creator
        outsider.get_children("/private")
    alice = zk_client_factory(auth_data=[("digest", "alice:pw")])
    (name,) = alice.get_children("/private")
    assert framing.decode_items(alice.get(f"/private/{name}")[0]) == [b"secret"]
