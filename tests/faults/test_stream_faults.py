"""The Spark streaming source through a ZooKeeper leader kill, on the 3-node ensemble, with exact accounting.

A Spark driver subprocess drains 3,000 items with Trigger.AvailableNow in batches of 200 while the ensemble's
leader is killed. The driver's session survives (it reconnects to another node), staging keeps what committed,
and the Parquet output (read through its metadata log) holds every item exactly once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from faultrun import strike  # type: ignore[import-not-found]

from zkqueue import BytesSerializer, QueueBuilder
from zkqueue.server.testing import fresh_chroot, make_client, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.spark, pytest.mark.timeout(600)]

SPARK_TESTS = Path(__file__).resolve().parent.parent / "spark"
sys.path.insert(0, str(SPARK_TESTS))

from spark_session import start_driver  # type: ignore[import-not-found]  # noqa: E402
ITEMS = 1000  # 5 micro-batches of 200: the kill comes after 2 commits, with 3 to run


def test_stream_source_through_a_leader_kill(ensemble, journal_dir) -> None:
    pytest.importorskip("pyspark")
    hosts = fresh_chroot(ensemble.connect_string, "/stream-faults-")
    client = make_client(hosts, timeout=10.0)
    items = [f"s-{i}".encode() for i in range(ITEMS)]
    try:
        with QueueBuilder.builder(client, None, BytesSerializer(), "/q").build_queue() as q:
            for item in items:
                q.put(item)
            assert q.flush_puts(60)
        cfg = {"hosts": hosts, "path": "/q", "out": str(journal_dir / "out"), "chk": str(journal_dir / "chk"),
               "mode": "drain", "consumer": "faults", "max": 200, "warehouse": str(journal_dir / "wh"),
               # the driver's session must outlive the election: 4 s (the driver-kill test's, for a fast takeover)
               # expired in a fresh-clone run where the election and the reconnect took longer on the loaded machine
               "session": 20}
        log = journal_dir / "driver.log"
        driver = start_driver("stream_driver.py", cfg, log)
        try:
            commits = journal_dir / "chk" / "commits"
            wait_for(lambda: commits.exists() and len([p for p in commits.iterdir() if p.name.isdigit()]) >= 2,
                     timeout=240, interval=0.05, message=log.read_text()[-3000:])
            strike("leader_kill", ensemble)
            assert driver.wait(400) == 0, log.read_text()[-5000:]
        finally:
            if driver.poll() is None:
                driver.kill()
        result = json.loads(log.read_text().strip().splitlines()[-1])
        assert result == {"rows": ITEMS, "distinct_ids": ITEMS, "values": ITEMS}, result
        assert client.get_children("/q") == []
        assert len([c for c in client.get_children("/q-stream/faults") if c != "owner"]) <= 1
    finally:
        client.stop()
        client.close()
