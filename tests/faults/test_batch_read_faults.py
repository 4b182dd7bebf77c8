"""The Spark batch read (``claimed_read``) through a ZooKeeper leader kill and through a driver SIGKILLed between
its write and its commit, on the 3-node ensemble, with exact accounting.

The driver subprocess claims 300 items at a time and writes each claim under a directory named by its smallest
row id (mode overwrite, an idempotent sink). After the faults, the output holds every item exactly once, and the
queue and the consumer's staging area are empty.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from faultrun import strike  # type: ignore[import-not-found]

from zkqueue import BytesSerializer, QueueBuilder
from zkqueue.server.testing import fresh_chroot, make_client, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.spark, pytest.mark.timeout(600)]

SPARK_TESTS = Path(__file__).resolve().parent.parent / "spark"
sys.path.insert(0, str(SPARK_TESTS))

from spark_session import start_driver  # type: ignore[import-not-found]  # noqa: E402
ITEMS = 1800  # 6 claims of 300: 3 in the killed run, the kept one and 2 more in the rerun
CLAIM = 300


def _fill(client: Any) -> None:
    with QueueBuilder.builder(client, None, BytesSerializer(), "/q").build_queue() as q:
        for start in range(0, ITEMS, 100):  # 100 items per node
            q.put_multi([f"b-{i}".encode() for i in range(start, start + 100)])
        assert q.flush_puts(60)


def _staged(client: Any) -> list[str]:
    return [c for c in client.get_children("/q-stream/nightly") if c != "owner"]


def test_batch_read_through_a_leader_kill_and_a_driver_killed_before_its_commit(ensemble, journal_dir) -> None:
    pytest.importorskip("pyspark")
    hosts = fresh_chroot(ensemble.connect_string, "/batch-read-faults-")
    client = make_client(hosts, timeout=10.0)
    try:
        _fill(client)
        cfg = {"hosts": hosts, "path": "/q", "out": str(journal_dir / "out"), "consumer": "nightly", "max": CLAIM,
               "warehouse": str(journal_dir / "wh"), "mode": "crash", "signal": str(journal_dir / "two-claims")}
        # 1. The driver is killed inside its third claim: written, not committed.
        log = journal_dir / "crash.log"
        driver = start_driver("batch_read_driver.py", cfg, log)
        try:
            assert driver.wait(300) == -9, log.read_text()[-5000:]
        finally:
            if driver.poll() is None:
                driver.kill()
        assert (journal_dir / "two-claims").exists()
        assert len(_staged(client)) == 1  # the third claim, kept for the rerun
        assert len(client.get_children("/q")) == (ITEMS - 3 * CLAIM) // 100
        # 2. A new driver drains the rest (first the kept claim again) while the ensemble's leader is killed.
        cfg.update(mode="drain", signal=str(journal_dir / "rerun-two-claims"))
        log = journal_dir / "drain.log"
        driver = start_driver("batch_read_driver.py", cfg, log)
        try:
            wait_for(lambda: (journal_dir / "rerun-two-claims").exists() or driver.poll() is not None,
                     timeout=300, interval=0.05, message=log.read_text()[-3000:])
            strike("leader_kill", ensemble)
            assert driver.wait(400) == 0, log.read_text()[-5000:]
        finally:
            if driver.poll() is None:
                driver.kill()
        result = json.loads(log.read_text().strip().splitlines()[-1])
        assert result == {"rows": ITEMS, "distinct_ids": ITEMS, "values": ITEMS}, result
        assert client.get_children("/q") == []
        assert _staged(client) == []
    finally:
        client.stop()
        client.close()
