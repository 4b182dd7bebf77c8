"""Repeating jobs across processes: two job queue processes contend for the scheduler of one ``every=1`` repeat
(``catch_up="all"``); the active one is SIGKILLed and the standby goes on. Each fire time must be added exactly
once (a second firing of a completed job would run again as a fresh attempt 1), with no gaps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from faultcheck import read_journal  # type: ignore[import-not-found]
from faultrun import stop_processes  # type: ignore[import-not-found]

from zkqueue.jobs import JobQueue
from zkqueue.server.testing import wait_for

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

HERE = Path(__file__).parent
PATH = "/jobs/repeat-faults"
SESSION_TIMEOUT = 3.0


def _spawn(hosts: str, journal_dir: Path, name: str) -> subprocess.Popen:
    cfg = {"hosts": hosts, "path": PATH, "journal": str(journal_dir / f"{name}.jsonl"),
           "session_timeout": SESSION_TIMEOUT}
    out = open(journal_dir / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, str(HERE / "repeatworker.py"), json.dumps(cfg)], stdout=out,
                            stderr=subprocess.STDOUT, cwd=HERE)


def _fire_ms(job_id: str) -> int:
    name, stamp = job_id.rsplit("@", 1)
    assert name == "tick", job_id
    return int(datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp() * 1000)


def _fired(jq: JobQueue) -> set[int]:
    """The fire times of every job the repeat added: completed (run) or still in records/ (queued or running)."""
    ids = [j.id for j in jq.completed()] + jq.client.get_children(jq.paths.records)
    return {_fire_ms(i) for i in ids}


def _pid_of(contender: str) -> int:
    return int(contender.split(":")[-2])  # "<host>:<pid>:<hex>", the scheduler's identifier


def test_two_scheduler_processes_fire_each_time_once_through_a_kill(zk_hosts, zk_client, journal_dir) -> None:
    with JobQueue(zk_client, PATH) as jq:
        first_ms = int(jq.repeat("tick", {"n": 1}, every=1, catch_up="all").next_fire.timestamp() * 1000)
    reader = JobQueue(zk_client, PATH)  # not started: reads only, never contends
    election = zk_client.Election(f"{PATH}/scheduler")
    procs = {name: _spawn(zk_hosts, journal_dir, name) for name in ("p0", "p1")}
    try:
        wait_for(lambda: len(election.contenders()) == 2, timeout=60, interval=0.1)
        both_ms = int(time.time() * 1000)
        wait_for(lambda: max(_fired(reader), default=0) >= both_ms + 3000, timeout=30, interval=0.2)
        active = _pid_of(election.contenders()[0])
        victim = next(name for name, p in procs.items() if p.pid == active)
        survivor = "p1" if victim == "p0" else "p0"
        os.kill(procs[victim].pid, signal.SIGKILL)
        procs[victim].wait(10)
        killed_ms = int(time.time() * 1000)
        wait_for(lambda: [_pid_of(c) for c in election.contenders()] == [procs[survivor].pid], timeout=30,
                 interval=0.1, message="the killed scheduler's election node outlived its session")
        wait_for(lambda: max(_fired(reader)) >= killed_ms + 4000, timeout=30, interval=0.2,
                 message="no new fire times after the kill")
    finally:
        stop_processes(list(procs.values()))
    fired = sorted(_fired(reader))
    journals = {name: read_journal(journal_dir / f"{name}.jsonl").events for name in procs}
    first_runs = Counter(e["id"] for events in journals.values() for e in events
                         if e["ev"] == "ran" and e["attempt"] == 1)
    assert first_runs and max(first_runs.values()) == 1, [i for i, n in first_runs.items() if n > 1][:5]
    assert fired == list(range(fired[0], fired[-1] + 1000, 1000)), "a fire time was left out"
    assert fired[0] == first_ms and fired[-1] >= killed_ms + 4000
    after_kill = [_fire_ms(e["id"]) for e in journals[survivor] if e["ev"] == "ran"]
    assert max(after_kill) > killed_ms  # the standby's queue went on firing and running them
    assert journals[survivor][-1]["ev"] == "done"  # SIGTERM: its scheduler and workers stopped, the process ended
