"""The zkqueue data source as a batch sink: formats, kinds, framing, dedupe, backpressure, bad options."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from kazoo.client import KazooClient

from zkqueue import framing, naming
from zkqueue.spark import put_partition, read_queue
from zkqueue.testing import wait_for

pytestmark = pytest.mark.spark


def _items(client: KazooClient, path: str) -> list[tuple[str, list[bytes]]]:
    out = []
    for name in sorted(client.get_children(path)):
        data, _ = client.get(f"{path}/{name}")
        out.append((name, framing.decode_items(data)))
    return out


def test_100k_rows_into_plain_and_id_queues_come_back_exactly(spark, zk_hosts, zk_client):
    n = 100_000
    df = spark.range(n).selectExpr("concat('job-', id % 99991) AS job", "concat('payload-', id) AS value")
    expected_values = Counter(f"payload-{i}".encode() for i in range(n))
    writer = df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).option("valueColumn", "value")
    writer.save("/plain")
    writer.option("kind", "id").option("idColumn", "job").save("/ids")

    plain = read_queue(spark, zk_hosts, "/plain").collect()
    assert Counter(bytes(r.value) for r in plain) == expected_values
    assert all(r.idx == 0 for r in plain)

    by_id = read_queue(spark, zk_hosts, "/ids", kind="id", serializer="str").collect()
    expected_pairs = Counter((f"job-{i % 99991}", f"payload-{i}") for i in range(n))
    assert Counter((r.id, r.value) for r in by_id) == expected_pairs
    assert all(naming.parse_id(r.name)[0] == r.id for r in by_id)
    assert zk_client.get_children("/plain") == [] and zk_client.get_children("/ids") == []
