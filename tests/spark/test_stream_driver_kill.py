"""The Structured Streaming source with its driver SIGKILLed mid-batch and restarted: every item exactly once.

A module of its own: it starts driver processes of its own (no shared SparkSession), so it runs beside the suites
that share the SparkSession and the fault ensemble rather than after them (see tests/conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from tests.spark.test_stream_source import fill
from zkqueue.server.testing import wait_for

pytestmark = pytest.mark.spark


def test_driver_killed_mid_batch_then_restarted_delivers_exactly_once(zk_hosts, zk_client, tmp_path) -> None:
    """A driver subprocess is SIGKILLed (with its JVM) while batches run; a new driver with the same checkpoint
    and consumer id drains the rest. The Parquet output (read through its metadata log) holds every item once."""
    from spark_session import start_driver  # type: ignore[import-not-found]

    items = [f"k-{i}".encode() for i in range(800)]  # 4 batches of 200: the kill comes after 2
    fill(zk_client, "/stream/killed", items)
    out, chk = tmp_path / "out", tmp_path / "chk"

    def driver(mode: str) -> subprocess.Popen:
        cfg = {"hosts": zk_hosts, "path": "/stream/killed", "out": str(out), "chk": str(chk), "mode": mode,
               "consumer": "killed", "max": 200, "warehouse": str(tmp_path / "wh")}
        return start_driver("stream_driver.py", cfg, tmp_path / f"{mode}.log", start_new_session=True)

    run = driver("run")
    try:
        commits = chk / "commits"
        wait_for(lambda: commits.exists() and len([p for p in commits.iterdir() if p.name.isdigit()]) >= 2,
                 timeout=240, interval=0.1, message=(tmp_path / "run.log").read_text()[-3000:])
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    staged = [c for c in zk_client.get_children("/stream/killed-stream/killed") if c != "owner"]
    drain = driver("drain")
    assert drain.wait(300) == 0, (tmp_path / "drain.log").read_text()[-3000:]
    result = json.loads((tmp_path / "drain.log").read_text().strip().splitlines()[-1])
    assert result["rows"] == len(items) and result["distinct_ids"] == len(items)
    assert result["values"] == len(set(items))
    assert zk_client.get_children("/stream/killed") == []
    assert len([c for c in zk_client.get_children("/stream/killed-stream/killed") if c != "owner"]) <= 1
    assert staged  # the kill left staged batches behind, which the second driver replayed or committed
