"""The job layer through a leader kill: 4 worker processes on the 3-node ensemble, exact accounting.

Every added job must end exactly once in the records (completed with the right result, or dead), none left
unfinished, 0 lost; a job's handler may run twice only when an earlier run was on a worker whose session was lost.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from faultcheck import Journal, account, read_journal  # type: ignore[import-not-found]
from faultrun import stop_processes, strike  # type: ignore[import-not-found]

from zkqueue.jobs import JobQueue, JobState, RetryPolicy
from zkqueue.server.testing import fresh_chroot, make_client, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.timeout(600)]

JOBS = 600
WORKERS = 4
HERE = Path(__file__).parent


def test_jobs_through_a_leader_kill(ensemble, journal_dir, record_figures) -> None:
    hosts = fresh_chroot(ensemble.connect_string, "/jobs-faults-")
    path = "/jobs/faults"
    client = make_client(hosts, timeout=10.0)
    procs = []
    try:
        with JobQueue(client, path, retry=RetryPolicy(max_attempts=5)) as jq:
            ids = [f"job-{i:04d}" for i in range(JOBS)]
            assert jq.add_all((job_id, i) for i, job_id in enumerate(ids)) == []
            for w in range(WORKERS):
                cfg = {"hosts": hosts, "path": path, "journal": str(journal_dir / f"w{w}.jsonl"),
                       "session_timeout": 4.0, "max_attempts": 5, "work_seconds": 0.005, "concurrency": 2}
                log = open(journal_dir / f"w{w}.log", "w")  # noqa: SIM115 - closed with the process
                procs.append(subprocess.Popen([sys.executable, str(HERE / "jobworker.py"), json.dumps(cfg)],
                                              stdout=log, stderr=subprocess.STDOUT, cwd=HERE))
            wait_for(lambda: jq.counts()["completed"] >= JOBS // 3, timeout=120)
            # A caller who looks at the queue through the failover: its reads wait the election out, none raises
            looks: list[object] = []
            looking = threading.Event()

            def look() -> None:
                n = 0
                while not looking.is_set():
                    try:
                        looks.append(jq.get(ids[n % JOBS]).id if n % 2 else sum(jq.counts().values()))
                    except Exception as exc:  # noqa: BLE001 - asserted below
                        looks.append(exc)
                    n += 1
                    time.sleep(0.005)

            looker = threading.Thread(target=look, daemon=True)
            looker.start()
            started = time.monotonic()
            strike("leader_kill", ensemble)

            def finished() -> bool:
                counts = jq.counts()
                return counts["completed"] + counts["dead"] >= JOBS

            wait_for(finished, timeout=180, interval=0.2, message=f"jobs left: {jq.counts()}")
            drain_s = time.monotonic() - started
            looking.set()
            looker.join(60)
            counts = jq.counts()
            completed = {j.id: j for j in jq.completed()}
            dead = {j.id: j for j in jq.dead_letters()}
    finally:
        stop_processes(procs)
        client.stop()
        client.close()

    adds = Journal("adds", [{"ev": "ack", "id": job_id} for job_id in ids])
    workers = [read_journal(journal_dir / f"w{w}.jsonl") for w in range(WORKERS)]
    acc = account("jobs_leader_kill", "lock", [adds], workers)
    acc.faults = ["leader_kill"]
    acc.drain_s = round(drain_s, 2)
    record_figures(acc)
    acc.assert_ok()  # every job ran at least once; a second run only after a lost session
    assert counts["queued"] == counts["active"] == counts["retrying"] == 0, counts
    assert set(completed) | set(dead) == set(ids) and not set(completed) & set(dead)  # each ends exactly once
    assert not dead, {j: d.last_error for j, d in list(dead.items())[:5]}
    failed_looks = [x for x in looks if isinstance(x, BaseException)]
    assert len(looks) > 100 and not failed_looks, (len(looks), failed_looks[:3])
    assert all(completed[job_id].result == 2 * i and completed[job_id].state is JobState.COMPLETED
               for i, job_id in enumerate(ids))
