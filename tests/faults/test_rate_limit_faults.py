"""A rate-limited job queue through a leader kill: 3 worker processes on the 3-node ensemble under 40 jobs/s.

Every job ends exactly once (completed with the right result), none lost; a handler runs twice only after a lost
session; and no window of one second holds more than the limit (plus 10% for handler threads starting a moment
after their job's admission and count),
through the kill and the workers' retries of the rate node (zkqueue.jobs.rate).
"""

from __future__ import annotations

import bisect
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultcheck import Journal, account, read_journal  # type: ignore[import-not-found]
from faultrun import stop_processes, strike  # type: ignore[import-not-found]

from zkqueue.jobs import JobQueue, JobState
from zkqueue.server.testing import fresh_chroot, make_client, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.timeout(300)]

MAX_JOBS = 40
JOBS = 6 * MAX_JOBS
WORKERS = 3
HERE = Path(__file__).parent


def most_in_a_second(starts: list[float]) -> int:
    starts = sorted(starts)
    return max((bisect.bisect_left(starts, s + 1.0) - i for i, s in enumerate(starts)), default=0)


def test_rate_limited_jobs_through_a_leader_kill(ensemble, journal_dir, record_figures) -> None:
    hosts = fresh_chroot(ensemble.connect_string, "/rate-faults-")
    path = "/jobs/rated"
    client = make_client(hosts, timeout=10.0)
    procs = []
    try:
        with JobQueue(client, path) as jq:  # adds and looks; the workers run in the processes
            ids = [f"job-{i:04d}" for i in range(JOBS)]
            for w in range(WORKERS):
                cfg = {"hosts": hosts, "path": path, "journal": str(journal_dir / f"w{w}.jsonl"),
                       "session_timeout": 4.0, "max_attempts": 5, "work_seconds": 0.005, "concurrency": 2,
                       "max_jobs": MAX_JOBS}
                log = open(journal_dir / f"w{w}.log", "w")  # noqa: SIM115 - closed with the process
                procs.append(subprocess.Popen([sys.executable, str(HERE / "jobworker.py"), json.dumps(cfg)],
                                              stdout=log, stderr=subprocess.STDOUT, cwd=HERE))
            # The jobs come once every worker runs: claimed while a process still starts (its first handler
            # thread, its first count), the first window's jobs would start late, beside the next window's.
            journals = [journal_dir / f"w{w}.jsonl" for w in range(WORKERS)]
            wait_for(lambda: all(j.exists() and read_journal(j).of("ready") for j in journals), timeout=60)
            assert jq.add_all((job_id, i) for i, job_id in enumerate(ids)) == []
            wait_for(lambda: jq.counts()["completed"] >= 2 * MAX_JOBS, timeout=120)
            started = time.monotonic()
            strike("leader_kill", ensemble)

            def finished() -> bool:
                counts = jq.counts()
                return counts["completed"] + counts["dead"] >= JOBS

            wait_for(finished, timeout=180, interval=0.2, message=f"jobs left: {jq.counts()}")
            drain_s = time.monotonic() - started
            counts = jq.counts()
            completed = {j.id: j for j in jq.completed()}
            dead = {j.id: j for j in jq.dead_letters()}
    finally:
        stop_processes(procs)
        client.stop()
        client.close()

    adds = Journal("adds", [{"ev": "ack", "id": job_id} for job_id in ids])
    workers = [read_journal(journal_dir / f"w{w}.jsonl") for w in range(WORKERS)]
    acc = account("jobs_rate_limit_leader_kill", "lock", [adds], workers)
    acc.faults = ["leader_kill"]
    acc.drain_s = round(drain_s, 2)
    record_figures(acc)
    acc.assert_ok()  # every job ran at least once; a second run only after a lost session
    assert counts["queued"] == counts["active"] == counts["retrying"] == 0, counts
    assert set(completed) == set(ids) and not dead, {j: d.last_error for j, d in list(dead.items())[:5]}
    assert all(completed[job_id].result == 2 * i and completed[job_id].state is JobState.COMPLETED
               for i, job_id in enumerate(ids))
    starts = [e["t"] for j in workers for e in j.of("deliver")]  # every run, a second one too, counts
    assert most_in_a_second(starts) <= MAX_JOBS * 1.10, most_in_a_second(starts)
    stats = [e for j in workers for e in j.of("stats")]
    slices = sum(s["rate_slices"] for s in stats)
    assert len(stats) == WORKERS and slices <= len(starts) / 2, stats  # writes per slice of jobs, not per job
    print(f"rate limit through a leader kill: {len(starts)} starts, {slices} slices, at most "
          f"{most_in_a_second(starts)} in a second, ZooKeeper errors retried: {sum(s['rate_errors'] for s in stats)}")
