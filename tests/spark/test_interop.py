"""Curator 5.9.0's own Java consumer reads what the Spark sink wrote."""

from __future__ import annotations

import pytest

from zkqueue.interop import CuratorPeer

pytestmark = [pytest.mark.spark, pytest.mark.interop]


def test_curator_consumer_reads_the_sink_output(spark, zk_hosts, zk_client):
    rows = [(f"{i:03d}".encode(), i % 3) for i in range(60)]
    df = spark.createDataFrame(rows, "value BINARY, priority INT")
    base = df.write.format("zkqueue").mode("append").option("zkHosts", zk_hosts).option("valueColumn", "value")
    base.option("itemsPerNode", "4").save("/plain")
    # One partition, so the rows' write order (FIFO within a priority) is known.
    (df.coalesce(1).write.format("zkqueue").mode("append").option("zkHosts", zk_hosts)
     .option("valueColumn", "value").option("kind", "priority").save("/prio"))

    peer = CuratorPeer(zk_hosts)
    plain = peer.consume("/plain", count=60, timeout=60, lock_path="/plain-locks")
    assert sorted(plain) == sorted(value for value, _ in rows)
    prio = peer.consume("/prio", count=60, timeout=60, kind="priority")
    # Curator's priority queue serves lower priorities first; FIFO within a priority.
    assert prio == [value for value, _ in sorted(rows, key=lambda r: r[1])]
    assert zk_client.get_children("/plain") == [] and zk_client.get_children("/prio") == []
