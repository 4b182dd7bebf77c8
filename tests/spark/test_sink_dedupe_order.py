"""The sink's dedupe markers keep a digest of their rows: a retry that reaches a marker with the same rows adds
nothing, and one that reaches it with other rows (a plan whose row order is not stable) writes them, so no row is
ever skipped. Runs ``put_partition`` (the sink's write path) on a real ZooKeeper, without Spark."""

from __future__ import annotations

import logging

import pytest

from zkqueue.formats import framing
from zkqueue.spark import put_partition

pytestmark = pytest.mark.spark


def stored(client, path: str) -> list[str]:
    return sorted(p.decode() for n in client.get_children(path)
                  for p in framing.decode_items(client.get(f"{path}/{n}")[0]))


def test_a_retry_with_other_rows_at_a_marker_writes_them(zk_client, zk_hosts, caplog) -> None:
    first = [{"value": f"a{i}"} for i in range(10)]
    other = [{"value": f"b{i}"} for i in range(10)]
    put = dict(partition=0, dedupe_key="retry-1", itemsPerNode=5)
    assert put_partition(first, zk_hosts, "/sink/order", **put).rows == 10
    again = put_partition(first, zk_hosts, "/sink/order", **put)  # a deterministic retry
    assert (again.rows, again.deduped) == (0, 10)
    with caplog.at_level(logging.WARNING, logger="zkqueue.spark.sink"):
        moved = put_partition(other, zk_hosts, "/sink/order", **put)  # same positions, other rows
    assert (moved.rows, moved.deduped) == (10, 0)
    assert any("differ from those an earlier attempt wrote" in r.getMessage() for r in caplog.records)
    repeat = put_partition(other, zk_hosts, "/sink/order", **put)  # and a retry of that is a repeat again
    assert (repeat.rows, repeat.deduped) == (0, 10)
    assert stored(zk_client, "/sink/order") == sorted(r["value"] for r in first + other)


def test_put_partition_without_a_dedupe_key_does_not_dedupe(zk_client, zk_hosts) -> None:
    rows = [{"value": "x"}, {"value": "y"}]
    put_partition(rows, zk_hosts, "/sink/plain", partition=0)
    put_partition(rows, zk_hosts, "/sink/plain", partition=0)
    assert stored(zk_client, "/sink/plain") == ["x", "x", "y", "y"]
    assert zk_client.exists("/sink/plain-dedupe") is None
