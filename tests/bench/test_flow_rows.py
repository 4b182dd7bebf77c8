"""The flows, canvas and progress rows of ``python -m benchmarks``, run small on the session's server: every run
completes every flow job, chord and progress job it added (the rows' own completeness checks). BullMQ's side of
the flows and canvas rows is left out here (the jobs-live bench test drives BullMQ); no timing is asserted."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _ours(row: dict) -> dict:
    assert row["status"] == "ok", row
    (run,) = row["runs"]
    assert "error" not in run, run
    return run


@pytest.mark.parametrize("workers", [1, 2])
def test_flows_row_completes_every_flow_job(zk_hosts: str, workers: int) -> None:
    from benchmarks import flows_bench

    run = _ours(flows_bench.run_section(zk_hosts, 30, 1, 60.0, bullmq=False, workers=workers))
    assert run["complete"] and run["jobs"] == run["count"] == 30, run
    assert run["workers"] == workers, run


def test_canvas_row_completes_every_chord(zk_hosts: str) -> None:
    from benchmarks import canvas_bench

    run = _ours(canvas_bench.run_section(zk_hosts, 2, 1, 60.0, bullmq=False))
    assert run["complete"], run


def test_progress_row_completes_every_job(zk_hosts: str) -> None:
    from benchmarks import progress_probe

    row = progress_probe.run_section(zk_hosts, 100, 1)
    assert row["status"] == "ok" and row["complete"], row
