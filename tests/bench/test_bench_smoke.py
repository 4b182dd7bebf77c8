"""CI smoke test of the benchmark harness: ``python -m benchmarks --quick`` runs to completion and writes its
JSON and PNG. Asserts structure only, never timings (the machine decides those)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
IMPLS = ("zkqueue", "curator", "kazoo")
WORKLOADS = ("put_fg_1", "put_fg_16", "put_bg", "put_bg_ceiling", "put_multi", "consume_plain", "consume_lock_1",
             "consume_lock_4", "latency")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("bench")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        # The other sections have tests of their own that check their rows (test_jobs_peers.py,
        # test_aio_peers_bench.py, test_jobs_live_bench.py, test_scheduled_bench.py, test_celery_brokers_bench.py,
        # test_large_items_bench.py, test_flow_rows.py); running them here again only cost the suite time. Smaller
        # than --quick itself (structure, not figures, is checked).
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out), "--no-spark", "--no-jobs", "--no-aio",
         "--no-jobs-live", "--no-scheduled", "--no-celery-brokers", "--no-large", "--no-flows", "--no-canvas",
         "--no-progress", "--count", "80", "--max-seconds", "2", "--latency-seconds", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=400, check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads((out / "latest.json").read_text()), out, done


def test_quick_writes_json_png_and_table(quick_run: tuple[dict, Path, subprocess.CompletedProcess[str]]) -> None:
    report, out, done = quick_run
    stamped = [p for p in out.glob("*.json") if p.name != "latest.json"]
    assert len(stamped) == 1 and json.loads(stamped[0].read_text()) == report
    png = out / "latest.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["mode"] == "quick" and report["settings"]["repeats"] == 1
    for key in ("cores", "ram_gb", "python", "java", "zookeeper", "fsync", "ensemble"):
        assert key in report["machine"]
    assert report["machine"]["zookeeper"]
    assert "zkqueue / Curator" in done.stdout and "put, background" in done.stdout


def test_quick_covers_every_workload_and_implementation(
    quick_run: tuple[dict, Path, subprocess.CompletedProcess[str]],
) -> None:
    report, _, _ = quick_run
    by_name = {w["name"]: w for w in report["workloads"]}
    assert set(by_name) == set(WORKLOADS)
    for name, w in by_name.items():
        assert w["target"]["text"]
        for impl in w["impls"].values():
            assert not impl.get("errors"), f"{name}: {impl.get('errors')}"
        if name == "put_bg_ceiling":  # the reference: only the peer's bare ZooKeeper client runs it
            assert w["impls"]["curator"]["runs"][0]["items"] > 0
            assert set(w["impls"]) == {"curator"}
            assert 0 < by_name["put_bg_ceiling"]["zkqueue_share"]
            continue
        # zkqueue and Curator run every workload; kazoo runs where it has the feature, else says why
        for impl in ("zkqueue", "curator"):
            runs = w["impls"][impl]["runs"]
            assert len(runs) == 1 and runs[0]["items"] > 0, (name, impl, runs)
        kazoo = w["impls"].get("kazoo")
        if name in ("put_bg", "put_multi"):
            assert kazoo["na"], name
        elif name != "latency":
            assert kazoo["runs"][0]["items"] > 0, name
        if w["target"]["kind"] in ("ratio", "latency"):
            assert w["ratio"] is not None and isinstance(w["pass"], bool), name
    # four consumer processes each report their count and memory; lock-safe consumers never deliver more items
    # than were put (a double delivery would push the sum over the count)
    lock4 = by_name["consume_lock_4"]
    run = lock4["impls"]["zkqueue"]["runs"][0]
    assert len(run["per_consumer"]) == 4 and 0 < run["items"] <= lock4["count"]
    assert run["rss_mb_max"] > 0
    latency = by_name["latency"]["impls"]["zkqueue"]["runs"][0]
    assert latency["p50_ms"] <= latency["p99_ms"]
