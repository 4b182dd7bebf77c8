"""The zkqueue data source as a Structured Streaming sink (trigger availableNow, checkpoints, dedupe)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from zkqueue.formats import framing

pytestmark = pytest.mark.spark

SCHEMA = "k STRING, n BIGINT"


def _add_file(directory: Path, index: int, rows: int) -> list[str]:
    values = [f"f{index}-{i}" for i in range(rows)]
    lines = [json.dumps({"k": v, "n": i}) for i, v in enumerate(values)]
    (directory / f"part-{index:03d}.json").write_text("\n".join(lines) + "\n")
    return values


def _run(spark, source: Path, checkpoint: Path, hosts: str, path: str, **options: str) -> list[int]:
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    writer = (
        stream.writeStream.format("zkqueue")
        .option("zkHosts", hosts)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.start(path)
    try:
        assert query.awaitTermination(120), "the availableNow query did not finish"
        assert query.exception() is None
        return [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()


def _queued(client: KazooClient, path: str) -> Counter:
    out: Counter = Counter()
    for name in client.get_children(path):
        for payload in framing.decode_items(client.get(f"{path}/{name}")[0]):
            out[payload] += 1
    return out


def test_three_batches_then_restart_from_checkpoint(spark, zk_hosts, zk_client, tmp_path):
    source, checkpoint = tmp_path / "in", tmp_path / "cp"
    source.mkdir()
    expected = []
    for i in range(3):
        expected += _add_file(source, i, 40)

    batches = _run(spark, source, checkpoint, zk_hosts, "/stream", valueColumn="k")
    assert batches == [0, 1, 2]
    assert _queued(zk_client, "/stream") == Counter(v.encode() for v in expected)

    # Restart: committed batches are not written again; only the new file is.
    expected += _add_file(source, 3, 25)
    assert _run(spark, source, checkpoint, zk_hosts, "/stream", valueColumn="k") == [3]
    assert _queued(zk_client, "/stream") == Counter(v.encode() for v in expected)


def test_dedupe_makes_a_rerun_batch_add_no_copies(spark, zk_hosts, zk_client, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    values = _add_file(source, 0, 30) + _add_file(source, 1, 30)
    rows_as_json = Counter(json.dumps({"k": v, "n": i % 30}, separators=(",", ":")).encode()
                           for i, v in enumerate(values))

    for path, dedupe in (("/dedupe", "true"), ("/plain", "false")):
        checkpoint = tmp_path / f"cp{path.replace('/', '-')}"
        assert _run(spark, source, checkpoint, zk_hosts, path, dedupe=dedupe, batchSize="7") == [0, 1]
        assert _queued(zk_client, path) == rows_as_json
        # The driver "died" after the sink committed batch 1 but before Spark recorded it: Spark re-runs
        # batch 1 with the same query id and batch id.
        for name in ("1", ".1.crc"):
            (checkpoint / "commits" / name).unlink(missing_ok=True)
        assert _run(spark, source, checkpoint, zk_hosts, path, dedupe=dedupe, batchSize="7") == [1]

    assert _queued(zk_client, "/dedupe") == rows_as_json  # exactly once
    # Without dedupe the sink is at-least-once: the re-run batch (one whole file) was added again.
    copies = _queued(zk_client, "/plain") - rows_as_json
    files = [Counter(p for p in rows_as_json if f'"k":"f{i}-'.encode() in p) for i in (0, 1)]
    assert copies in files
    # Markers of batches that can no longer re-run are gone; those of the last batch stay.
    scopes = zk_client.get_children("/dedupe-dedupe")
    assert [s.rsplit(".", 1)[1] for s in scopes] == ["1"]
