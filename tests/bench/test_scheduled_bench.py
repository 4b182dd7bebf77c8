"""The benchmark's ``scheduled`` row, tiny, on the test ZooKeeper: a trickle of items due 1 s after each put, over
a small backlog of far-future items, through zkqueue (parked and empty) and a Redis sorted-set poller (when
``redis-server`` is there). Asserts the result's shape and that nothing was delivered early; never timings (the
machine decides those)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from rich.console import Console

from benchmarks import report
from benchmarks.scheduled_bench import (
    PARKED,
    TRICKLE,
    ScheduledSettings,
    make_item,
    parking_supported,
    percentile,
    read_item,
    run_section,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FIGURES = ("p50_ms", "p99_ms", "max_ms", "cpu_s_per_s", "cpu_s", "wall_s", "early", "early_all", "received", "sent")


def test_items_carry_their_times_and_percentiles_are_nearest_rank() -> None:
    item = make_item(TRICKLE, 7, 1_700_000_000_123, 100, put_time=1_699_999_999.5)
    assert len(item) == 100
    assert read_item(item) == (TRICKLE, 7, 1_699_999_999.5, 1_700_000_000_123)
    assert read_item(make_item(PARKED, 1, 5, 10))[0] == PARKED
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([3.0], 50) == 3.0
    assert percentile([], 99) is None


def test_scheduled_section_tiny(zk_hosts: str) -> None:
    s = ScheduledSettings(depth=2_000, trickle_seconds=1.0, flat_depth=500, flat_seconds=0.5, producer_threads=2,
                          drain=30.0, warmup_seconds=0.0)
    started = time.monotonic()
    sec: dict[str, Any] = run_section(zk_hosts, s)
    assert sec["status"] == "ok"
    assert sec["depth"] == 2_000 and sec["trickle_rate"] == 50.0 and sec["due_after_s"] == 1.0
    rows = sec["rows"]
    assert set(rows) == {"zkqueue_parked", "zkqueue_empty", "redis_parked", "zkqueue_flat"}
    expected = ["zkqueue_empty", "zkqueue_flat"]
    if parking_supported():
        expected.append("zkqueue_parked")
        assert sec["park_after"] == 60.0
    if rows["redis_parked"].get("status") != "n/a":
        expected.append("redis_parked")
    for key in expected:
        row = rows[key]
        assert row.get("status") != "n/a", (key, row)
        for figure in FIGURES:
            assert row[figure] is not None, (key, figure, row)
        assert row["sent"] == 50 if key != "zkqueue_flat" else row["sent"] == 25
        assert row["complete"] and row["received"] == row["sent"], (key, row)
        assert row["early"] == 0 and row["early_all"] == 0, (key, row)
        assert row["duplicates"] == 0
        assert 0 <= row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
        assert row["cpu_s_per_s"] >= 0
    for key in ("zkqueue_parked", "zkqueue_flat", "redis_parked"):
        if key in expected:
            assert rows[key]["prefill_rate"] > 0, rows[key]
    if "zkqueue_parked" in expected:
        parked = rows["zkqueue_parked"]
        assert parked["layout"] == "parked" and parked["producer_stats"].get("parked") == 2_000, parked
        assert parked["znodes_per_item"] >= 1 and parked["zk_txns_per_item"] > 0
        assert sec["p99_ratio"] is not None and sec["cpu_ratio"] is not None and sec["pass"] in (True, False)
    assert rows["zkqueue_flat"]["layout"] == "flat"
    assert not rows["zkqueue_flat"]["producer_stats"].get("parked")
    assert sec["early_total"] == 0
    assert sec["seconds"] <= time.monotonic() - started + 1

    console = Console(width=200, record=True)
    report.print_table({"mode": "quick", "settings": {"repeats": 1}, "impls": ["zkqueue"], "workloads": [],
                        "scheduled": sec}, console)
    text = console.export_text()
    assert "zkqueue, empty queue" in text and "consumer CPU s/s" in text
    assert "scheduled: zkqueue 2k-parked p99 / empty p99" in text
