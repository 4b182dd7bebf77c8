"""Large items (over one znode) through the Spark sink, put_partition, executor consumers and read_queue.

Real SparkSession, real ZooKeeper: rows of a few MiB go in as blobs + reference nodes with ``largeItems=true``
and come back byte for byte; without the option the write fails with a clear error.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import Counter

import pytest

from zkqueue import BytesSerializer, QueueBuilder
from zkqueue.errors import ConfigurationError, ItemTooLargeError
from zkqueue.formats import framing, large_ref
from zkqueue.spark import consume, put_partition, read_queue
from zkqueue.spark.options import SinkOptions

from spark_helpers import Recorder, handled

pytestmark = pytest.mark.spark

MiB = 2**20


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _nodes(client, path: str) -> list[bytes]:
    return [client.get(f"{path}/{n}")[0] for n in sorted(client.get_children(path))]


def _rows() -> list[bytes]:
    """Small rows around three big ones: random (incompressible) 2 and 3 MiB, and a compressible 3 MiB."""
    return [b"small-0", os.urandom(2 * MiB), b"small-1", b"small-2", os.urandom(3 * MiB) + b"tail",
            b"z" * (3 * MiB), b"small-3"]


def _frame(spark, rows: list[bytes]):
    return spark.createDataFrame([(i, bytearray(v)) for i, v in enumerate(rows)], "i INT, v BINARY").coalesce(1)


def test_dataframe_with_large_rows_round_trips_byte_for_byte(spark, zk_hosts, zk_client):
    rows = _rows()
    df = _frame(spark, rows).select("v")
    (df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).option("valueColumn", "v")
     .option("itemsPerNode", "2").option("largeItems", "true").save("/big"))

    # Each big row is a reference node of its own, between the framed small rows, in order.
    nodes = _nodes(zk_client, "/big")
    kinds = ["ref" if large_ref.is_ref(d) else framing.decode_items(d) for d in nodes]
    assert kinds == [[b"small-0"], "ref", [b"small-1", b"small-2"], "ref", "ref", [b"small-3"]]
    refs = [large_ref.decode_ref(d) for d in nodes if large_ref.is_ref(d)]
    assert [r.compression for r in refs] == ["none", "none", "zlib"]
    assert len(zk_client.get_children("/big-blobs")) == 3

    got = read_queue(spark, zk_hosts, "/big", lock_path="/big-locks").collect()
    assert [_digest(bytes(r.value)) for r in got] == [_digest(v) for v in rows]
    assert [r.idx for r in got] == [0, 0, 0, 1, 0, 0, 0]
    # The blobs went with their reference nodes (same multi), and nothing else is left.
    assert zk_client.get_children("/big") == []
    assert zk_client.get_children("/big-blobs") == []
    assert zk_client.get_children("/big-locks") == []


def test_without_the_option_large_rows_fail_the_write_clearly(spark, zk_hosts, zk_client):
    df = _frame(spark, [b"a", os.urandom(2 * MiB)]).select("v")
    writer = df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).option("valueColumn", "v")
    with pytest.raises(Exception, match=r"ItemTooLargeError[\s\S]*largeItems=true") as info:
        writer.save("/nobig")
    assert "2097162 bytes framed" in str(info.value)  # 2 MiB + Curator framing (10 bytes)
    assert not zk_client.exists("/nobig-blobs")

    with pytest.raises(ItemTooLargeError, match="row 1 .*largeItems=true"):
        put_partition([{"v": b"a"}, {"v": os.urandom(2 * MiB)}], zk_hosts, "/nobig2", value_column="v")
    with pytest.raises(ItemTooLargeError, match="lower itemsPerNode"):
        put_partition([{"v": os.urandom(600_000)}, {"v": os.urandom(600_000)}], zk_hosts, "/nobig3",
                      value_column="v", items_per_node=2)


def test_executor_consumers_get_large_items_the_sink_wrote(spark, zk_hosts, zk_client, tmp_path):
    rows = _rows()
    df = _frame(spark, rows).select("v")
    (df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).option("valueColumn", "v")
     .option("largeItems", True).option("maxItemBytes", 8 * MiB).save("/jobs"))
    result = consume(spark, zk_hosts, "/jobs", Recorder(str(tmp_path)), parallelism=2, lock_path="/jobs-locks",
                     session_timeout=4.0)
    assert result.processed == len(rows) and result.failed == 0
    assert Counter(_digest(x) for x in handled(tmp_path)) == Counter(_digest(v) for v in rows)
    assert zk_client.get_children("/jobs") == [] and zk_client.get_children("/jobs-blobs") == []


def test_read_queue_takes_large_items_the_engine_put(spark, zk_hosts, zk_client, caplog):
    payloads = [b"first", os.urandom(3 * MiB), b"third", os.urandom(2 * MiB)]
    queue = (QueueBuilder.builder(zk_client, None, BytesSerializer(), "/eng").large_items()
             .put_in_background(False).build_queue())
    with queue:
        for p in payloads:
            queue.put(p)
        assert queue.stats().large_items_put == 2
    # One more reference whose blob is gone: a corrupt node, which read_queue's pull claim (with a lock path)
    # quarantines, as a lock-safe consumer does (without a lock path it would be skipped and left in place).
    names = sorted(zk_client.get_children("/eng"))
    broken = large_ref.decode_ref(zk_client.get(f"/eng/{names[3]}")[0])
    zk_client.delete(broken.blob, recursive=True)

    with caplog.at_level(logging.WARNING, logger="zkqueue.spark.consumers"):
        first = read_queue(spark, zk_hosts, "/eng", max_items=2).collect()
        rest = read_queue(spark, zk_hosts, "/eng", lock_path="/eng-locks").collect()
    assert [_digest(bytes(r.value)) for r in first] == [_digest(p) for p in payloads[:2]]
    assert [bytes(r.value) for r in rest] == [b"third"]
    assert any("1 corrupt node(s) of /eng moved to /eng-quarantine" in r.getMessage() for r in caplog.records)
    assert zk_client.get_children("/eng") == []
    (quarantined,) = zk_client.get_children("/eng-quarantine")  # named after it (maybe with a sequence suffix)
    assert quarantined.startswith(names[3])
    assert zk_client.get_children("/eng-blobs") == []  # the first large item's blob went with it
    assert zk_client.get_children("/eng-locks") == []


def test_put_partition_large_rows_keep_order_and_dedupe(zk_hosts, zk_client):
    big = os.urandom(3 * MiB)
    rows = [{"v": b"a"}, {"v": b"b"}, {"v": big}, {"v": b"c"}]
    for _ in range(2):  # the re-run adds nothing: the large row's marker commits with its reference
        stats = put_partition(rows, zk_hosts, "/pp", value_column="v", items_per_node=4, large_items=True,
                              dedupe=True, dedupe_key="load-1")
    assert (stats.rows, stats.deduped, stats.large_items) == (0, 4, 0)
    nodes = _nodes(zk_client, "/pp")
    assert framing.decode_items(nodes[0]) == [b"a", b"b"] and framing.decode_items(nodes[2]) == [b"c"]
    assert large_ref.is_ref(nodes[1]) and len(nodes) == 3
    assert sorted(zk_client.get_children("/pp-dedupe/load-1")) == ["p0-r0", "p0-r2", "p0-r3"]
    assert len(zk_client.get_children("/pp-blobs")) == 1

    first = put_partition([{"v": big}], zk_hosts, "/pp2", value_column="v", largeItems="true")
    assert (first.rows, first.nodes, first.large_items, first.multis) == (1, 1, 1, 0)

    with pytest.raises(ItemTooLargeError, match="row 0 .*maxItemBytes"):
        put_partition([{"v": big}], zk_hosts, "/pp3", value_column="v", large_items=True, max_item_bytes=MiB)
    assert not zk_client.exists("/pp3-blobs") or zk_client.get_children("/pp3-blobs") == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"maxItemBytes": "1000"}, "need largeItems=true"),
        ({"largeItemCompression": "none"}, "need largeItems=true"),
        ({"largeItems": "yes please"}, "largeitems"),
        ({"largeItems": "true", "maxItemBytes": "lots"}, "maxitembytes"),
        ({"largeItems": "true", "maxItemBytes": str(2**40)}, "maxItemBytes: max_item_bytes is at most"),
        ({"largeItems": "true", "largeItemCompression": "lz4"}, "largeItemCompression"),
    ],
)
def test_large_item_options(options, message):
    with pytest.raises(ConfigurationError, match=message):
        SinkOptions.from_options({"zkHosts": "h:1", "path": "/q", **options})
    opts = SinkOptions.from_options({"zkHosts": "h:1", "path": "/q", "large_items": True, "max_item_bytes": 5 * MiB,
                                     "LargeItemCompression": "NONE"})
    settings = opts.large_item_settings()
    assert (settings.max_item_bytes, settings.compression) == (5 * MiB, "none")
    assert SinkOptions.from_options({"zkHosts": "h:1", "path": "/q"}).large_item_settings() is None


def test_a_large_item_whose_extra_commit_op_fails_adds_nothing(zk_client):
    """Another attempt committed the row between the sink's marker check and the commit: the commit multi fails on
    the marker (an extra op of BlobWriter.put), nothing is added, and the blob just written is deleted."""
    from kazoo.exceptions import NodeExistsError

    from zkqueue import BytesSerializer, QueueBuilder
    from zkqueue.engine.commit import create_op

    zk_client.create("/race-dedupe/s/p0-r0", b"1", makepath=True)
    with QueueBuilder.builder(zk_client, None, BytesSerializer(), "/race").large_items().build_queue() as q:
        q.put(b"small")  # the queue's own nodes exist
        with pytest.raises(NodeExistsError):
            q.producer.blob_writer.put(framing.encode_items([os.urandom(2 * MiB)]), "/race/queue-",
                                       extra_ops=[create_op("/race-dedupe/s/p0-r0", b"1")])
    assert len(zk_client.get_children("/race")) == 1
    assert not zk_client.exists("/race-blobs") or zk_client.get_children("/race-blobs") == []
