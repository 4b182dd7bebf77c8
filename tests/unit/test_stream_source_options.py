"""Options and schema of the Spark streaming source (pure: no Spark session, no ZooKeeper)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from zkqueue.errors import ConfigurationError  # noqa: E402
from zkqueue.errors import CorruptItemError  # noqa: E402
from zkqueue.spark.staging import (  # noqa: E402
    batch_name, batch_number, decode_segment, encode_segment, item_count, stream_root,
)
from zkqueue.spark.staged_reads import SourceOptions, source_schema  # noqa: E402
from zkqueue.formats import framing, large_ref  # noqa: E402


def test_options_parse_and_require_a_consumer_id() -> None:
    o = SourceOptions.from_options({"zkHosts": "h:1", "path": "/q", "consumerId": "etl", "maxItemsPerTrigger": "50",
                                    "kind": "Priority", "lockPath": "/q-locks", "sessionTimeout": "4"})
    assert (o.consumer_id, o.max_items_per_trigger, o.kind, o.lock_path) == ("etl", 50, "priority", "/q-locks")
    assert o.owner_wait == 9.0
    for bad in ({"path": "/q", "consumerId": "a"}, {"zkHosts": "h:1", "consumerId": "a"},
                {"zkHosts": "h:1", "path": "/q"}, {"zkHosts": "h:1", "path": "/q", "consumerId": "a/b"},
                {"zkHosts": "h:1", "path": "/q", "consumerId": "a", "kind": "fifo"},
                {"zkHosts": "h:1", "path": "/q", "consumerId": "a", "maxItemsPerTrigger": "0"}):
        with pytest.raises(ConfigurationError):
            SourceOptions.from_options(bad)


def test_schema_per_kind() -> None:
    assert source_schema("plain") == "id string, name string, idx int, value binary"
    assert source_schema("priority").endswith("priority int")
    assert source_schema("delay").endswith("delay_until bigint")
    assert source_schema("id").endswith("item_id string")


def test_batch_names_sort_by_number_and_items_count_rows() -> None:
    assert batch_name(7) == "b0000000007" and batch_number("b0000000007") == 7
    assert batch_number("owner") is None and batch_number("bx") is None
    assert sorted([batch_name(10), batch_name(9)]) == [batch_name(9), batch_name(10)]
    assert stream_root("/q", "etl") == "/q-stream/etl"
    assert item_count(framing.encode_items([b"a", b"b", b"c"])) == 3
    ref = large_ref.BlobRef("/q-blobs/b-1", 2, 10, 10, 0, "none")
    assert item_count(large_ref.encode_ref(ref)) == 1
    assert item_count(b"junk") == 0  # quarantined instead of staged


def test_segments_round_trip_and_reject_odd_frames() -> None:
    entries = [("queue-0000000001", framing.encode_items([b"a"])), ("queue-0000000002", b"")]
    assert decode_segment(encode_segment(entries)) == entries
    with pytest.raises(CorruptItemError):
        decode_segment(framing.encode_items([b"only-a-name"]))
    with pytest.raises(CorruptItemError):
        decode_segment(b"junk")
