"""Flows through faults on the 3-node ensemble, with worker processes and exact accounting.

- A leader kill while 300 flow jobs (3 linear steps) run on 4 worker processes: every flow job ends COMPLETED with
  the right results, each step done exactly once in its history, no step job left in any queue, 0 lost.
- A worker SIGKILLed in the middle of a step: the step's lease goes with its session, another worker claims it
  again (attempt 2) and the flow job completes, each step done exactly once.
- Cancels of half of 200 running flow jobs while the leader is killed: each cancel's answer matches the job's end
  state, nothing of a cancelled job starts after its cancel but a step already starting, no queue keeps a step job.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultrun import stop_processes, strike  # type: ignore[import-not-found]

from zkqueue.flows import Flow, FlowState
from zkqueue.server.testing import fresh_chroot, make_client, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.timeout(600)]

JOBS = 300
WORKERS = 4
STEPS = ("a", "b", "c")
HERE = Path(__file__).parent


def _flow(client, path: str) -> Flow:  # noqa: ANN001
    """The test's side of the flow: the same steps as flowworker.py (it only adds and looks)."""
    flow = Flow(client, path)
    for name, nxt in zip(STEPS, (*STEPS[1:], None)):
        flow.step(name, lambda job: None, next=nxt)
    return flow


def _worker(hosts: str, path: str, journal_dir: Path, name: str, **extra) -> subprocess.Popen:  # noqa: ANN003
    cfg = {"hosts": hosts, "path": path, "journal": str(journal_dir / f"{name}.jsonl"), "session_timeout": 4.0,
           "concurrency": 2, "work_seconds": 0.002, **extra}
    log = open(journal_dir / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, str(HERE / "flowworker.py"), json.dumps(cfg)], stdout=log,
                            stderr=subprocess.STDOUT, cwd=HERE)


def _journal(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@contextlib.contextmanager
def _flow_on(ensemble, prefix: str, path: str) -> Iterator[tuple[str, Flow, list[subprocess.Popen]]]:  # noqa: ANN001
    """(hosts, the started flow, a list for worker processes) in a fresh chroot; the processes are stopped and
    the client closed afterwards."""
    hosts = fresh_chroot(ensemble.connect_string, prefix)
    client = make_client(hosts, timeout=10.0)
    procs: list[subprocess.Popen] = []
    try:
        with _flow(client, path) as flow:
            yield hosts, flow, procs
    finally:
        stop_processes(procs)
        client.stop()
        client.close()


def _running(flow: Flow) -> int:
    return sum(1 for j in flow.jobs() if j.state is FlowState.RUNNING)


def test_flows_through_a_leader_kill(ensemble, journal_dir) -> None:
    path = "/flows/faults"
    with _flow_on(ensemble, "/flow-faults-", path) as (hosts, flow, procs):
        ids = [f"flow-{i:04d}" for i in range(JOBS)]
        assert [flow.add({"value": str(i)}, job_id=job_id) for i, job_id in enumerate(ids)] == ids
        procs.extend(_worker(hosts, path, journal_dir, f"w{w}") for w in range(WORKERS))
        wait_for(lambda: JOBS - _running(flow) >= JOBS // 3, timeout=120, interval=0.2)
        killed_at = time.monotonic()
        strike("leader_kill", ensemble)
        wait_for(lambda: _running(flow) == 0, timeout=180, interval=0.5,
                 message=f"flow jobs still running: {_running(flow)}")
        drain_s = time.monotonic() - killed_at
        jobs = {j.id: j for j in flow.jobs()}
        counts = flow.counts()

    runs = [e for w in range(WORKERS) for e in _journal(journal_dir / f"w{w}.jsonl") if e["ev"] == "deliver"]
    lost_sessions = sum(1 for w in range(WORKERS) for e in _journal(journal_dir / f"w{w}.jsonl") if e["ev"] == "lost")
    print(f"\nflows leader kill: {JOBS} flow jobs, {len(runs)} step runs ({len(runs) - 3 * JOBS} again after a "
          f"lost reply or session; {lost_sessions} sessions lost), drained {drain_s:.1f}s after the kill")
    assert set(jobs) == set(ids)  # 0 lost, none extra
    assert counts["completed"] == JOBS and counts["running"] == counts["failed"] == 0, counts
    assert all(c == {"queued": 0, "active": 0, "retrying": 0} for c in counts["steps"].values()), counts
    for i, job_id in enumerate(ids):
        job = jobs[job_id]
        assert job.state is FlowState.COMPLETED and job.pending == [], job
        assert job.results == {"a": f"{i}a", "b": f"{i}ab", "c": f"{i}abc"}, job
        assert [(h.step, h.status) for h in job.history] == [(s, "done") for s in STEPS], job.history
    ran = {(e["id"], e["step"]) for e in runs}
    assert ran == {(job_id, s) for job_id in ids for s in STEPS}  # every step ran; nothing ran that was not added
    # The hand-offs went through the kill under block leases (their batches give the blocks back in their multis).
    assert any(e["ev"] == "block_leases" for w in range(WORKERS) for e in _journal(journal_dir / f"w{w}.jsonl"))


def test_a_worker_killed_mid_step_is_retried_and_the_flow_job_completes(ensemble, journal_dir) -> None:
    path = "/flows/kill"
    with _flow_on(ensemble, "/flow-kill-", path) as (hosts, flow, procs):
        ids = ["victim", *(f"other-{i}" for i in range(9))]
        for job_id in ids:
            flow.add({"value": job_id}, job_id=job_id)
        victim = _worker(hosts, path, journal_dir, "victim", hang=["victim", "b"])
        procs.append(victim)
        wait_for(lambda: any(e["ev"] == "hanging" for e in _journal(journal_dir / "victim.jsonl")), timeout=60)
        assert flow.get("victim").pending == ["b"]
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(30)
        procs.append(_worker(hosts, path, journal_dir, "rescuer"))
        jobs = [flow.wait(job_id, timeout=120) for job_id in ids]
        counts = flow.counts()

    for job in jobs:
        assert job.state is FlowState.COMPLETED, job
        assert job.results["c"] == f"{job.id}abc"
        assert [(h.step, h.status) for h in job.history] == [(s, "done") for s in STEPS], job.history
    victim_job = jobs[0]
    assert [h.attempts for h in victim_job.history] == [1, 2, 1]  # b: the killed attempt, then the rescuer's
    rescued = [e for e in _journal(journal_dir / "rescuer.jsonl") if e["ev"] == "deliver" and e["id"] == "victim"]
    assert [(e["step"], e["attempt"]) for e in rescued] == [("b", 2), ("c", 1)]
    assert counts["completed"] == len(ids) and counts["running"] == 0


def test_flow_cancels_through_a_leader_kill(ensemble, journal_dir) -> None:
    """Half of 200 running flow jobs are cancelled while the leader is killed. Exact accounting: every flow job is
    there; each cancel that said True left its job CANCELLED, each that said False found it finished (COMPLETED);
    every other job COMPLETED with every step done once; no step of a cancelled job ran twice, its steps that ran
    are a prefix of a, b, c, and at most one of them started after its cancel returned (a step whose start had
    read the flow record before the cancel committed); no step job is left in any queue."""
    path = "/flows/cancels"
    jobs_n = 200
    with _flow_on(ensemble, "/flow-cancels-", path) as (hosts, flow, procs):
        ids = [f"flow-{i:04d}" for i in range(jobs_n)]
        assert [flow.add({"value": str(i)}, job_id=job_id) for i, job_id in enumerate(ids)] == ids
        procs.extend(_worker(hosts, path, journal_dir, f"w{w}", work_seconds=0.1) for w in range(WORKERS))
        wait_for(lambda: jobs_n - _running(flow) >= jobs_n // 5, timeout=120, interval=0.2)
        # Newest first: the steps run in the order the flow jobs were added, and no step can end while the ensemble
        # has no leader to commit it, so the first cancels meet jobs with seconds of work still ahead of them
        # however fast the workers are (in oldest-first order, fast workers had finished all 100 before the cancels
        # came through the election).
        to_cancel = ids[1::2][::-1]
        said: dict[str, tuple[bool, float]] = {}

        def cancel_all() -> None:
            for job_id in to_cancel:
                said[job_id] = (flow.cancel(job_id), time.time())

        canceller = threading.Thread(target=cancel_all, name="canceller")
        canceller.start()
        strike("leader_kill", ensemble)
        canceller.join(180)
        assert not canceller.is_alive()
        wait_for(lambda: _running(flow) == 0, timeout=180, interval=0.5,
                 message=f"flow jobs still running: {_running(flow)}")
        jobs = {j.id: j for j in flow.jobs()}
        counts = flow.counts()

    runs = [e for w in range(WORKERS) for e in _journal(journal_dir / f"w{w}.jsonl") if e["ev"] == "deliver"]
    by_job: dict[str, list[dict]] = {}
    for e in sorted(runs, key=lambda e: e["t"]):
        by_job.setdefault(e["id"], []).append(e)
    cancelled = [job_id for job_id, (ok, _t) in said.items() if ok]
    print(f"\nflow cancels through a leader kill: {len(cancelled)} of {len(to_cancel)} cancelled while running, "
          f"{len(to_cancel) - len(cancelled)} had finished; {len(runs)} step runs")
    assert set(jobs) == set(ids) and set(said) == set(to_cancel)  # 0 lost, every cancel answered
    assert cancelled, "no cancel met a running flow job: the scenario proved nothing"
    for job_id in ids:
        job = jobs[job_id]
        steps_run = [e["step"] for e in by_job.get(job_id, [])]
        if job_id in said and said[job_id][0]:
            assert job.state is FlowState.CANCELLED, job
            assert len(steps_run) == len(set(steps_run)) and steps_run == list(STEPS[:len(steps_run)]), steps_run
            after = [e for e in by_job.get(job_id, []) if e["t"] > said[job_id][1]]
            assert len(after) <= 1, (job_id, after)
            done = [h.step for h in job.history if h.status == "done"]
            assert done == list(STEPS[:len(done)]) and set(done) <= set(steps_run), job.history
        else:
            assert job.state is FlowState.COMPLETED, job
            i = ids.index(job_id)
            assert job.results == {"a": f"{i}a", "b": f"{i}ab", "c": f"{i}abc"}, job
            assert [(h.step, h.status) for h in job.history] == [(s, "done") for s in STEPS], job.history
    assert counts["cancelled"] == len(cancelled) and counts["running"] == counts["failed"] == 0, counts
    assert counts["completed"] == jobs_n - len(cancelled), counts
    assert all(c == {"queued": 0, "active": 0, "retrying": 0} for c in counts["steps"].values()), counts
