"""Sink options and the write path without a SparkSession (put_partition on the driver)."""

from __future__ import annotations

import datetime

import pytest

from zkqueue.formats import framing, naming
from zkqueue.errors import ConfigurationError, InvalidPathError, ItemTooLargeError, SerializationError
from zkqueue.spark import put_partition
from zkqueue.spark.options import SinkOptions

pytestmark = pytest.mark.spark


def test_options_are_case_and_underscore_insensitive_strings():
    opts = SinkOptions.from_options({"ZKHOSTS": "h:1", "path": "/q", "Kind": "ID", "id_column": "job",
                                     "itemsPerNode": 3, "dedupe": True, "maxItems": "10", "batchSize": "50"})
    assert (opts.kind, opts.key_column, opts.items_per_node, opts.dedupe) == ("id", "job", 3, True)
    assert opts.dedupe_path == "/q-dedupe"
    assert opts.nodes_per_multi == 10  # one multi must fit a bounded queue
    assert SinkOptions.from_options({"zkHosts": "h:1"}, path="/q").key_column is None


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"zkHosts": "h:1"}, ConfigurationError, "no queue path"),
        ({"zkHosts": "h:1", "path": "q"}, InvalidPathError, "must start with"),
        ({"zkHosts": "h:1", "path": "/a|b"}, InvalidPathError, "must not contain"),
        ({"zkHosts": "h:1", "path": "/q", "batchSize": "many"}, ConfigurationError, "batchsize"),
        ({"zkHosts": "h:1", "path": "/q", "dedupe": "maybe"}, ConfigurationError, "dedupe"),
        ({"zkHosts": "h:1", "path": "/q", "dedupe": "true", "dedupePath": "/q/m"}, ConfigurationError, "outside"),
        ({"zkHosts": "h:1", "path": "/q", "dedupe": "true", "dedupeKey": "a/b"}, ConfigurationError, "dedupeKey"),
        ({"zkHosts": "h:1", "path": "/q", "sessionTimeout": "0"}, ConfigurationError, "sessiontimeout"),
        ({"zkHosts": "h:1", "path": "/q", "acl": "creator"}, ConfigurationError, "needs auth"),
        ({"zkHosts": "h:1", "path": "/q", "serializer": "nosuchmodule:X"}, None, None),
    ],
)
def test_bad_options(options, error, message):
    if error is None:  # a module:Class serializer is only imported where it is used (the executors)
        SinkOptions.from_options(options)
        return
    with pytest.raises(error, match=message):
        SinkOptions.from_options(options)


def test_put_partition_kinds_and_errors(zk_hosts, zk_client):
    due = datetime.datetime(2031, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc)
    stats = put_partition([{"v": "a", "due": due}, {"v": "b", "due": 1_900_000_000_000}], zk_hosts, "/d",
                          kind="delay", delay_column="due", value_column="v")
    assert (stats.rows, stats.nodes, stats.multis) == (2, 2, 1)
    epochs = sorted(naming.parse_delay_epoch(n) for n in zk_client.get_children("/d"))
    assert epochs == [1_900_000_000_000, int(due.timestamp() * 1000)]

    with pytest.raises(SerializationError, match=r"row 1: bad priority value 'high'"):
        put_partition([{"v": "a", "priority": 1}, {"v": "b", "priority": "high"}], zk_hosts, "/p",
                      kind="priority", value_column="v")
    with pytest.raises(SerializationError, match="row 0: the id column 'id' is null"):
        put_partition([{"v": "a", "id": None}], zk_hosts, "/i", kind="id", value_column="v")
    with pytest.raises(ItemTooLargeError):
        put_partition([{"v": b"x" * 5000}], zk_hosts, "/big", value_column="v", jute_max_buffer=4096)
    with pytest.raises(ConfigurationError, match="dedupe_key"):
        put_partition([{"v": "a"}], zk_hosts, "/q", value_column="v", dedupe=True)


def test_put_partition_dedupe_per_batch_id(zk_hosts, zk_client):
    rows = [{"v": f"r{i}"} for i in range(30)]
    for batch_id in (7, 7, 8):
        put_partition(rows, zk_hosts, "/fb", value_column="v", batch_size=4, dedupe=True, dedupe_key="job",
                      batch_id=batch_id)
    payloads = [framing.decode_items(zk_client.get(f"/fb/{n}")[0])[0] for n in zk_client.get_children("/fb")]
    assert len(payloads) == 60 and set(payloads) == {f"r{i}".encode() for i in range(30)}
    assert sorted(zk_client.get_children("/fb-dedupe")) == ["job.7", "job.8"]
