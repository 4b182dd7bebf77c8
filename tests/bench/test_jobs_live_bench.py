"""The ``jobs_live`` section (issue 28) end to end, small: ``python -m benchmarks --quick --only jobs_live`` (300 jobs
in chunks of 100, one run per row) on the test ZooKeeper writes its JSON and prints its rows. Every row that can run
here completes every job, with every result read back and checked; a row that cannot says why. The section installs
BullMQ with npm itself; its row's check skips, saying why, where Node, npm, the registry or redis-server is missing.
Asserts behaviour only, never a speed (the machine decides those)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import jobs_live
from zkqueue.server.testing import fresh_chroot

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
JOBS, CHUNK, CPU_JOBS = 300, 100, 40


@pytest.fixture(scope="module")
def live_run(zk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    hosts = fresh_chroot(zk_server.connect_string)
    out = tmp_path_factory.mktemp("bench-live")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "jobs_live", "--no-spark", "--connect", hosts,
         "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=560, check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads((out / "latest.json").read_text())
    assert report["mode"] == "quick" and report["workloads"] == []
    return report["jobs_live"], done.stdout


def _check_complete(section: dict[str, Any], row: str, count: int) -> None:
    (run,) = section["runs"][row]
    assert "error" not in run, run
    assert run["complete"] and run["ok"] == run["count"] == count, run
    assert run["rate"] > 0 and 0 < run["enqueue_seconds"] <= run["seconds"], run
    assert section["summary"][row]["n"] == 1 and section["medians"][row] == run["rate"]


def test_raw_row_completes_every_job_and_the_report_has_every_row(live_run: tuple[dict[str, Any], str]) -> None:
    section, stdout = live_run
    assert section["status"] == "ok"
    assert section["settings"]["jobs"] == JOBS and section["settings"]["chunk"] == CHUNK
    assert section["settings"]["cpu_jobs"] == CPU_JOBS and section["settings"]["repeats"] == 1
    assert "raw" not in section["na"]
    _check_complete(section, "raw", JOBS)
    assert section["runs"]["raw"][0]["concurrency"] == 8
    assert set(section["ratios"]) == set(section["pass"]) == {"raw_bullmq", "task_raw", "process_thread"}
    assert section["targets"] == {"raw_bullmq": 1.0, "task_raw": 0.9, "process_thread": 1.6}
    for line in ("zkqueue raw path", "BullMQ 6.7.0", "zkqueue task path", "--pool thread", "--pool process",
                 "ratio zkqueue raw / BullMQ", "ratio task path / raw path", "ratio process pool / thread pool"):
        assert line in stdout, line
    for row, reason in section["na"].items():
        assert reason, row
        assert f"n/a ({' '.join(reason.split())})" in " ".join(stdout.split()), (row, reason)


def test_bullmq_row_completes_every_job(live_run: tuple[dict[str, Any], str]) -> None:
    section, _ = live_run
    if "bullmq" in section["na"]:
        pytest.skip(f"the BullMQ row could not run here: {section['na']['bullmq']}")
    _check_complete(section, "bullmq", JOBS)
    run = section["runs"]["bullmq"][0]
    assert run["version"] == jobs_live.BULLMQ_VERSION and run["completed"] == JOBS
    assert section["versions"]["redis"]
    ratio = section["ratios"]["raw_bullmq"]
    assert ratio == round(section["medians"]["raw"] / section["medians"]["bullmq"], 2)
    assert section["pass"]["raw_bullmq"] is (ratio >= 1.0)


def test_task_rows_run_once_the_task_api_exists_and_say_why_not_before(
    live_run: tuple[dict[str, Any], str],
) -> None:
    section, _ = live_run
    missing = jobs_live.task_api_missing()
    if missing is not None:  # zkqueue.App or the `zkqueue worker` command is not there yet
        for row in jobs_live.TASK_ROWS:
            assert section["na"][row] == missing and section["runs"][row] == []
        assert section["ratios"]["task_raw"] is None and section["pass"]["task_raw"] is None
        assert section["ratios"]["process_thread"] is None and section["pass"]["process_thread"] is None
        return
    _check_complete(section, "task", JOBS)
    for row in ("cpu_thread", "cpu_process"):
        _check_complete(section, row, CPU_JOBS)
        run = section["runs"][row][0]
        assert run["pool"] == row.removeprefix("cpu_") and run["concurrency"] == 2
        assert run["cpu_ms_per_job"] > 0
    for name in ("task_raw", "process_thread"):
        assert isinstance(section["ratios"][name], float) and isinstance(section["pass"][name], bool)
