"""The ordered consumer (zkqueue.progress) through faults on the 3-node ensemble, with exact accounting.

- The active consumer process is SIGKILLed: the standby process takes over from the stored index (the index as
  its session's end left it: the standby is held meanwhile, so that the test reads it before anyone writes again).
- A ZooKeeper leader is killed while two consumer processes run.
- The active consumer's session expires while one of its jobs runs: the standby takes over, and the old leader
  (whose client gets a new session) never writes progress again.

Each run checks: every index ran at least once; the stored index, as a data watch sees it, never moves back; at
every stored value p, every job up to p had finished (no gap); the final stored index is the log's head.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kazoo.recipe.lock import Lock
from kazoo.recipe.watchers import DataWatch

from faultcheck import read_journal  # type: ignore[import-not-found]
from faultrun import stop_processes, strike  # type: ignore[import-not-found]

from zkqueue.errors import ProgressFencedError
from zkqueue.progress import JobLog, ProgressConsumer, RetryPolicy
from zkqueue.server.testing import expire_session, fresh_chroot, make_client, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.timeout(300)]

HERE = Path(__file__).parent
JOBS = 500
LOG, PROGRESS = "/logs/blocks", "/progress/verifier"
HOLDS = "/holds"


class _Stored:
    """Every (time, index, writer) the progress node takes, as a data watch sees it."""

    def __init__(self, client, path: str) -> None:  # noqa: ANN001
        self.values: list[tuple[float, int, str]] = []
        self._lock = threading.Lock()
        DataWatch(client, path, self._seen)

    def _seen(self, data, stat) -> None:  # noqa: ANN001
        if data:
            value = json.loads(data)
            with self._lock:
                self.values.append((time.time(), value["index"], value["by"]))

    def last(self) -> int:
        with self._lock:
            return self.values[-1][1] if self.values else 0


def _prepare(hosts: str) -> tuple:
    client = make_client(hosts, timeout=10.0)
    log = JobLog(client, LOG)
    for lo in range(1, JOBS + 1, 250):
        log.append_many([f"job-{i}".encode() for i in range(lo, min(JOBS, lo + 249) + 1)])
    assert log.head() == JOBS
    return client, log


def _spawn(hosts: str, journal_dir: Path, name: str, work: float = 0.01, hold: str | None = None) -> subprocess.Popen:
    cfg = {"hosts": hosts, "log": LOG, "progress": PROGRESS, "journal": str(journal_dir / f"{name}.jsonl"),
           "session_timeout": 4.0, "work_seconds": work, "max_processing": 4, "max_search_ahead": 50,
           "progress_interval": 0.1, "progress_batch": 10, "name": name, "hold": hold}
    out = open(journal_dir / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, str(HERE / "progressworker.py"), json.dumps(cfg)], stdout=out,
                            stderr=subprocess.STDOUT, cwd=HERE)


def _check(stored: _Stored, done: dict[int, float], head: int) -> None:
    """Exact accounting of one run (see the module docstring)."""
    assert set(done) == set(range(1, head + 1)), f"never finished: {sorted(set(range(1, head + 1)) - set(done))[:10]}"
    indexes = [v[1] for v in stored.values]
    assert indexes == sorted(indexes), f"stored progress moved back: {indexes}"
    for t, p, _by in stored.values:
        gap = [i for i in range(1, p + 1) if done.get(i, float("inf")) > t]
        assert not gap, f"progress {p} stored before jobs {gap[:10]} finished"
    assert indexes[-1] == head


def _done_times(journals: list[list[dict]]) -> dict[int, float]:
    done: dict[int, float] = {}
    for events in journals:
        for e in events:
            if e["ev"] == "done":
                done[e["i"]] = min(done.get(e["i"], e["t"]), e["t"])
    return done


def test_progress_failover_when_the_active_process_is_killed(ensemble, journal_dir) -> None:
    hosts = fresh_chroot(ensemble.connect_string, "/progress-faults-")
    client, log = _prepare(hosts)
    stored = _Stored(client, PROGRESS)
    procs = {name: _spawn(hosts, journal_dir, name, hold=f"{HOLDS}/{name}") for name in ("p0", "p1")}
    try:
        wait_for(lambda: stored.last() >= JOBS // 4, timeout=60, interval=0.05)
        active = stored.values[-1][2]
        survivor = "p1" if active == "p0" else "p0"
        client.create(f"{HOLDS}/{survivor}", makepath=True)  # once elected, its jobs wait: no progress write
        os.kill(procs[active].pid, signal.SIGKILL)
        procs[active].wait(10)
        # The killed process's last write may still commit, and its data-watch notice arrive, after the kill: the
        # stored index it left is the one its session's end leaves (no write of it lands after that), read
        # directly, not from the watch. The held standby cannot have written over it yet.
        contenders = Lock(client, f"{PROGRESS}/leader").contenders
        wait_for(lambda: active not in contenders(), timeout=30, interval=0.05,
                 message=f"the session of the killed {active} never ended")
        data, _stat = client.get(PROGRESS)
        left = json.loads(data)
        assert left["by"] == active, f"progress written by {left['by']} while it was held"
        at_kill = left["index"]
        client.delete(f"{HOLDS}/{survivor}")
        wait_for(lambda: stored.last() == JOBS, timeout=90, interval=0.1,
                 message=f"progress stuck at {stored.last()} after the kill")
    finally:
        stop_processes(list(procs.values()))
        client.stop()
        client.close()
    journals = {n: read_journal(journal_dir / f"{n}.jsonl").events for n in procs}
    _check(stored, _done_times(list(journals.values())), JOBS)
    after = [e["i"] for e in journals[survivor] if e["ev"] == "deliver"]
    assert after and min(after) > at_kill  # the standby resumed above the stored index: nothing at or below it ran again
    assert {v[2] for v in stored.values if v[1] > at_kill} == {survivor}


def test_progress_through_a_zookeeper_leader_kill(ensemble, journal_dir) -> None:
    hosts = fresh_chroot(ensemble.connect_string, "/progress-faults-")
    client, log = _prepare(hosts)
    stored = _Stored(client, PROGRESS)
    procs = [_spawn(hosts, journal_dir, name, work=0.04) for name in ("q0", "q1")]
    try:
        wait_for(lambda: stored.last() >= JOBS // 4, timeout=60, interval=0.05)
        at_kill = stored.last()
        strike("leader_kill", ensemble)  # kills the leader, waits for a new one, then restarts the node and its sync
        # The kill landed mid-run. (Read before the strike: on a busy machine the killed node's restart takes longer
        # than the rest of the jobs, which then finish inside the strike.)
        assert at_kill < JOBS
        wait_for(lambda: stored.last() == JOBS, timeout=120, interval=0.1,
                 message=f"progress stuck at {stored.last()} after the leader kill")
    finally:
        stop_processes(procs)
        client.stop()
        client.close()
    journals = [read_journal(journal_dir / f"{n}.jsonl").events for n in ("q0", "q1")]
    _check(stored, _done_times(journals), JOBS)


def test_progress_old_leader_session_expiry_is_fenced(ensemble, journal_dir) -> None:
    hosts = fresh_chroot(ensemble.connect_string, "/progress-faults-")
    client, log = _prepare(hosts)
    stored = _Stored(client, PROGRESS)
    done: dict[int, float] = {}
    lock = threading.Lock()
    gate = threading.Event()
    held = 100

    def worker(index: int, job: bytes) -> None:
        if index == held:
            gate.wait(60)  # the old leader is inside this job when its session expires
        with lock:
            done.setdefault(index, time.time())

    def consumer(c, name: str) -> ProgressConsumer:  # noqa: ANN001
        return ProgressConsumer(c, jobs=JobLog(c, LOG), progress_path=PROGRESS, worker=worker, max_processing=4,
                                max_search_ahead=50, progress_interval=0.05, progress_batch=5, identifier=name,
                                retry=RetryPolicy(max_attempts=3, backoff=0.05))

    ca, cb = make_client(hosts, timeout=4.0), make_client(hosts, timeout=4.0)
    a = consumer(ca, "old").start()
    b = None
    try:
        wait_for(lambda: a.is_active, timeout=30)
        b = consumer(cb, "new").start()
        wait_for(lambda: stored.last() == held - 1, timeout=60)
        old_fence = a._store.fence
        expire_session(ca)  # the server ends A's session; A's client gets a new one
        wait_for(lambda: b.is_active, timeout=30, message="the standby did not take over")
        gate.set()  # A's held job now returns: its outcome belongs to a term that ended
        wait_for(lambda: stored.last() == JOBS, timeout=60)
        assert not ca.exists(old_fence)
        with pytest.raises(ProgressFencedError):
            a._store.fence = old_fence
            a._store.write(JOBS + 1)  # whatever the old leader still tries, its fence refuses it
        assert not a.is_active and a.stats().elected == 1
    finally:
        gate.set()
        a.stop()
        if b is not None:
            b.stop()
        for c in (ca, cb, client):
            c.stop()
            c.close()
    _check(stored, done, JOBS)
    writers = [by for _t, _p, by in stored.values]
    first_new = writers.index("new")
    assert set(writers[first_new:]) == {"new"}  # after the takeover only the new leader ever wrote
