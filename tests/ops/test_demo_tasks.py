"""``zkqueue demo`` (the task demo), run as a user runs it: a subprocess with its own 3-node ensemble, two
``zkqueue worker`` processes, a ZooKeeper node killed while jobs are added and a worker SIGKILLed mid-run. The
accounting table must balance: nothing lost, every job completed or dead."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ZKQUEUE = [sys.executable, "-m", "zkqueue.ops.cli"]


def _table(stdout: str) -> dict[str, str]:
    """The rows of the accounting table: figure -> value (the first line of a wrapped row holds both)."""
    rows: dict[str, str] = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) >= 4 and cells[0] == "" and cells[1] and cells[1] not in rows:
            rows[cells[1]] = cells[2]
    return rows


@pytest.mark.slow
@pytest.mark.faults
def test_task_demo_loses_nothing_through_a_node_kill_and_a_worker_sigkill() -> None:
    out = subprocess.run([*ZKQUEUE, "demo", "--jobs", "200"], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    rows = _table(out.stdout)
    added, completed, dead = int(rows["added"]), int(rows["completed"]), int(rows["dead"])
    assert added == 200, rows
    assert rows["lost"] == "0" and rows["still pending"] == "0", rows
    assert completed + dead == added, rows
    assert dead == 1 and "dead: img-00004 by design, after 3 attempts" in out.stdout, out.stdout[-3000:]
    assert int(rows["retried"]) >= 2, rows  # the dead job and the flaky notifications that failed once
    assert rows["ZooKeeper node killed"].startswith("node "), rows
    assert rows["worker SIGKILLed"].startswith("pid "), rows
    runs, attempts = (int(n) for n in rows["handler runs / attempts"].split(" / "))
    assert runs >= added and attempts >= added, rows

    # "run twice" is measured from the side log, and each such job is named with its cause: a run the SIGKILL cut
    # (one of the jobs named in progress at the kill), a run that finished on the killed worker before its outcome
    # was committed, or another
    killed = re.search(r"with (\d+) handler run\(s\) in progress \(([^)]*)\)", out.stdout)
    assert killed is not None, out.stdout[-3000:]
    in_progress = set(re.findall(r"(?:img|msg)-\d{5}", killed.group(2)))
    explained = {x.split(":")[0]: set(re.findall(r"(?:img|msg)-\d{5}", x.split(":")[1]))
                 for x in out.stdout.splitlines() if x.startswith("run twice")}
    assert explained.get("run twice", set()) <= in_progress, (explained, in_progress)
    assert sum(len(jobs) for jobs in explained.values()) == int(rows["run twice"]), (rows, explained)
    if explained:
        assert "Handlers run at least once; what is exactly once is each job's recorded outcome" in out.stdout
    assert "nothing lost, nothing left" in out.stdout
    assert "zkqueue workers zkqueue.ops.demo_app:app" in out.stdout  # where to look next


def test_demo_refuses_task_options_with_queue() -> None:
    out = subprocess.run([*ZKQUEUE, "demo", "--queue", "--jobs", "50"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2, out.stderr
    assert "--jobs: options of the task demo, not of --queue" in out.stderr
