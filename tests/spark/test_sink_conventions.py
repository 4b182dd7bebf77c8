"""The sink's Kafka-style column conventions: a string/binary ``value`` column is the item, ``key`` the id."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from kazoo.client import KazooClient

from zkqueue.errors import ConfigurationError
from zkqueue.formats import naming
from zkqueue.spark import put_partition
from zkqueue.spark.options import SinkOptions

from zkqueue.server.testing import queue_frames  # noqa: E402

pytestmark = pytest.mark.spark


def _items(client: KazooClient, path: str) -> list[tuple[str, list[bytes]]]:
    return queue_frames(client, path)


def _payloads(client: KazooClient, path: str) -> list[bytes]:
    return [payload for _, items in _items(client, path) for payload in items]


def _by_id(client: KazooClient, path: str) -> Counter:
    return Counter((naming.parse_id(name)[0], payload) for name, items in _items(client, path) for payload in items)


def _writer(df, hosts: str, **options: str):
    writer = df.write.format("zkqueue").mode("append").option("zkHosts", hosts)
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer


# ------------------------------------------------------------------------------ the rules, without Spark
def _conventions(types: dict[str, str], **options: str) -> tuple[SinkOptions, list[str]]:
    return SinkOptions.from_options({"zkHosts": "h:1", **options}, path="/q").with_conventions(types)


@pytest.mark.parametrize(
    ("types", "options", "value_column", "key_column"),
    [
        ({"value": "string"}, {}, "value", None),
        ({"value": "binary", "n": "long"}, {}, "value", None),
        ({"value": "integer"}, {}, None, None),  # not string/binary: the row as JSON
        ({"value": "struct"}, {}, None, None),
        ({"Value": "string"}, {}, None, None),  # exact name, like Kafka's sink
        ({"value": "string", "v": "string"}, {"valueColumn": "v"}, "v", None),  # the option wins
        ({"value": "string"}, {"serializer": "str"}, "value", None),
        ({"value": "string"}, {"serializer": "json"}, None, None),  # json / custom serializers get the row
        ({"value": "string", "key": "binary"}, {"kind": "id"}, "value", "key"),
        ({"value": "string", "key": "long", "id": "long"}, {"kind": "id"}, "value", "id"),  # 'id' first
        ({"value": "string", "key": "string", "job": "string"}, {"kind": "id", "idColumn": "job"}, "value", "job"),
        ({"value": "string", "key": "double"}, {"kind": "id"}, "value", "id"),  # check_schema then fails
        ({"value": "string", "key": "string", "priority": "integer"}, {"kind": "priority"}, "value", "priority"),
    ],
)
def test_convention_rules(types, options, value_column, key_column):
    resolved, notes = _conventions(types, **options)
    assert (resolved.value_column, resolved.key_column) == (value_column, key_column)
    if "value" in types and "valueColumn" not in options:
        assert any("'value'" in note for note in notes)  # every choice about 'value' is logged


def test_convention_notes_name_the_unused_columns():
    _, notes = _conventions({"key": "binary", "value": "binary", "topic": "string", "partition": "integer"},
                            kind="id")
    assert "column 'key' (binary) is the id" in notes[0]
    assert notes[1].endswith("not sent: ['topic', 'partition']")


def test_id_error_mentions_the_key_column():
    opts, _ = _conventions({"key": "double", "value": "string"}, kind="id")
    with pytest.raises(ConfigurationError, match=r"needs column 'id' .*column 'key' is double"):
        opts.check_schema({"key": "double", "value": "string"})


# ------------------------------------------------------------------------------ through the data source
def test_string_value_column_is_the_item(spark, zk_hosts, zk_client):
    df = spark.range(0, 50, 1, 1).selectExpr("concat('row-', id) as value")
    _writer(df, zk_hosts).save("/strings")
    assert _payloads(zk_client, "/strings") == [f"row-{i}".encode() for i in range(50)]


def test_binary_value_column_is_stored_raw(spark, zk_hosts, zk_client):
    rows = [(bytes([0, 255, i, 10]),) for i in range(20)]
    _writer(spark.createDataFrame(rows, "value BINARY").coalesce(1), zk_hosts).save("/binary")
    assert _payloads(zk_client, "/binary") == [value for (value,) in rows]


def test_value_with_other_columns_sends_only_the_value(spark, zk_hosts, zk_client):
    df = spark.range(0, 30, 1, 1).selectExpr("id as n", "concat('row-', id) as value", "'x' as other",
                                             "cast(id % 3 as int) as priority")
    _writer(df, zk_hosts).save("/mixed")
    assert _payloads(zk_client, "/mixed") == [f"row-{i}".encode() for i in range(30)]
    # Another kind keeps its key column: it names the node, 'value' is the item.
    _writer(df, zk_hosts, kind="priority").save("/prio")
    prio = _items(zk_client, "/prio")
    assert len(prio) == 30
    assert all(naming.parse_priority(name) == int(items[0][4:]) % 3 for name, items in prio)


def test_value_of_another_type_keeps_the_row_as_json(spark, zk_hosts, zk_client):
    df = spark.range(0, 3, 1, 1).selectExpr("id as value", "concat('s', id) as s")
    _writer(df, zk_hosts).save("/ints")
    assert [json.loads(p) for p in _payloads(zk_client, "/ints")] == [{"value": i, "s": f"s{i}"} for i in range(3)]
    structs = spark.range(0, 2, 1, 1).selectExpr("named_struct('a', id) as value")
    _writer(structs, zk_hosts).save("/structs")
    assert [json.loads(p) for p in _payloads(zk_client, "/structs")] == [{"value": {"a": i}} for i in range(2)]
    # The name must match exactly, as in Kafka's sink.
    _writer(spark.createDataFrame([("a",)], "VALUE STRING"), zk_hosts).save("/upper")
    assert [json.loads(p) for p in _payloads(zk_client, "/upper")] == [{"VALUE": "a"}]


def test_null_value_fails_the_task_with_the_row_number(spark, zk_hosts):
    df = spark.createDataFrame([("a",), (None,)], "value STRING").coalesce(1)
    with pytest.raises(Exception, match="row 1: column 'value' is null"):
        _writer(df, zk_hosts).save("/nulls")


def test_kind_id_takes_the_key_column(spark, zk_hosts, zk_client):
    df = spark.range(0, 40, 1, 2).selectExpr("concat('job-', id % 10) as key", "concat('row-', id) as value")
    _writer(df, zk_hosts, kind="id").save("/ids")
    assert _by_id(zk_client, "/ids") == Counter((f"job-{i % 10}", f"row-{i}".encode()) for i in range(40))

    binary = df.selectExpr("cast(key as binary) as key", "value")
    _writer(binary, zk_hosts, kind="id").save("/binary-ids")
    assert _by_id(zk_client, "/binary-ids") == _by_id(zk_client, "/ids")

    ints = spark.range(0, 5, 1, 1).selectExpr("id * 7 as key", "concat('row-', id) as value")
    _writer(ints, zk_hosts, kind="id").save("/int-ids")
    assert _by_id(zk_client, "/int-ids") == Counter((str(i * 7), f"row-{i}".encode()) for i in range(5))


def test_kind_id_prefers_the_id_column_and_the_option(spark, zk_hosts, zk_client):
    df = spark.range(0, 6, 1, 1).selectExpr("id", "concat('k', id) as key", "concat('j', id) as job",
                                            "concat('row-', id) as value")
    _writer(df, zk_hosts, kind="id").save("/by-id")
    assert _by_id(zk_client, "/by-id") == Counter((str(i), f"row-{i}".encode()) for i in range(6))
    _writer(df, zk_hosts, kind="id", idColumn="job").save("/by-option")
    assert _by_id(zk_client, "/by-option") == Counter((f"j{i}", f"row-{i}".encode()) for i in range(6))
    _writer(df.drop("id"), zk_hosts, kind="id").save("/by-key")
    assert _by_id(zk_client, "/by-key") == Counter((f"k{i}", f"row-{i}".encode()) for i in range(6))


def test_kind_id_without_a_usable_key_fails_on_the_driver(spark, zk_hosts):
    df = spark.createDataFrame([(1.5, "a")], "key DOUBLE, value STRING")
    with pytest.raises(Exception, match="needs column 'id'"):
        _writer(df, zk_hosts, kind="id").save("/never")


def test_explicit_options_win(spark, zk_hosts, zk_client):
    df = spark.range(0, 4, 1, 1).selectExpr("concat('row-', id) as value", "concat('payload-', id) as payload")
    _writer(df, zk_hosts, valueColumn="payload").save("/option")
    assert _payloads(zk_client, "/option") == [f"payload-{i}".encode() for i in range(4)]
    _writer(df, zk_hosts, valueColumn="value").save("/same")
    assert _payloads(zk_client, "/same") == [f"row-{i}".encode() for i in range(4)]
    # serializer=json asks for the row: the convention stays out of the way.
    _writer(df, zk_hosts, serializer="json").save("/json")
    assert [json.loads(p) for p in _payloads(zk_client, "/json")] == [
        {"value": f"row-{i}", "payload": f"payload-{i}"} for i in range(4)]


def test_a_kafka_shaped_dataframe(spark, zk_hosts, zk_client):
    df = spark.range(0, 24, 1, 2).selectExpr(
        "cast(concat('user-', id % 4) as binary) as key",
        "cast(concat('event-', id) as binary) as value",
        "'events' as topic",
        "cast(id % 2 as int) as partition",
        "array(named_struct('key', 'source', 'value', cast('test' as binary))) as headers",
    )
    _writer(df, zk_hosts).save("/events")
    assert Counter(_payloads(zk_client, "/events")) == Counter(f"event-{i}".encode() for i in range(24))
    _writer(df, zk_hosts, kind="id").save("/by-user")
    assert _by_id(zk_client, "/by-user") == Counter((f"user-{i % 4}", f"event-{i}".encode()) for i in range(24))


def test_put_partition_follows_the_same_conventions(zk_hosts, zk_client):
    rows = [{"key": f"job-{i % 3}".encode(), "value": f"row-{i}", "topic": "t"} for i in range(9)]
    stats = put_partition(rows, zk_hosts, "/pp-ids", kind="id")
    assert stats.rows == 9
    assert _by_id(zk_client, "/pp-ids") == Counter((f"job-{i % 3}", f"row-{i}".encode()) for i in range(9))
    put_partition(rows, zk_hosts, "/pp-plain")
    assert _payloads(zk_client, "/pp-plain") == [f"row-{i}".encode() for i in range(9)]
    put_partition([{"value": 1, "n": 2}], zk_hosts, "/pp-json")
    assert [json.loads(p) for p in _payloads(zk_client, "/pp-json")] == [{"value": 1, "n": 2}]
