"""Tasks on real ``zkqueue worker`` processes through a ZooKeeper leader kill and a worker SIGKILL, exact accounting.

Two workers on the 3-node ensemble run the app of taskapp.py: ``w0`` with ``--pool thread --concurrency 8`` and
``p0`` with ``--pool process --concurrency 2``. A producer (``task.enqueue_many``, CHUNK jobs at a time, a pause
apart) enqueues JOBS jobs while they run; every 10th fails on its first attempt, a few on every attempt (dead after
MAX_ATTEMPTS). Every run leaves its lines in one record file (taskapp.py). Once w0 has run some jobs, the ZooKeeper
leader is killed (and started again) while both workers run at full speed and the adds go on, and w0's runs start to
hang (its hold file): once its 8 slots hang and it holds jobs claimed ahead besides (its item leases say so), w0 is
SIGKILLed and started again (``w1``). Once every job has ended, the survivors get SIGTERM (a warm shutdown, exit 0).

The accounting, per job: it ends exactly once (completed with ``3 n + 1``, or dead: exactly the always-failing ones,
after MAX_ATTEMPTS); its record's attempt count equals the runs the record file shows, and those runs are attempts
1, 2, ... once each (no attempt ran outside a counted claim, none twice). Attempts count when a job starts: the 8
runs in flight in w0 at its SIGKILL were counted, and ran again at the next attempt after the kill; the jobs w0 held
ahead were not (an attempt counted for a job that never ran shows here as one attempt more than its runs).
Completion records exactly once (a job succeeds twice only when the first success was on the killed worker); every
run ended as planned; the records keep the planned failures that committed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from faultcheck import Journal, account  # type: ignore[import-not-found]
from faultrun import stop_processes, strike  # type: ignore[import-not-found]
from taskapp import (  # type: ignore[import-not-found]
    ALWAYS, FIRST, HOLD_ENV, MAX_ATTEMPTS, NEVER, QUEUE, TASK, RecordingApp, make_app, result_of,
)

from zkqueue.engine.commit import CONNECTION_ERRORS
from zkqueue.formats.naming import BLOCK_PREFIX
from zkqueue.jobs import Job, JobState
from zkqueue.server.embedded import ZooKeeperEnsemble
from zkqueue.server.testing import fresh_chroot, lock_nodes, wait_for
from zkqueue.tasks import Call, Task
from zkqueue.tasks.live import live_workers

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.timeout(300)]

JOBS = 1000
CHUNK = 100
CHUNK_PAUSE = 0.4  # the adds go on for 4 s and more: through the leader kill and the worker kill
THREADS = 8  # the thread-pool worker's concurrency (its prefetch is the same, given with --prefetch)
PROCESSES = 2
#: Every session, the workers' and the producer's: the killed worker's leases come back this long after its SIGKILL,
#: and it must outlive the leader kill's election on a loaded machine (a 4 s session of the process-pool worker once
#: expired there in CI: its failed attempt's end was refused, and the record lacked that error).
SESSION = 10.0
DEADLINE = 120.0  # bounds a failure, never a success
HERE = Path(__file__).parent
APP_MODULE = "faultapp"  # written by the test into its folder, the workers' working directory

IDS = [f"t-{n:04d}" for n in range(JOBS)]
NUMBER = {job_id: n for n, job_id in enumerate(IDS)}
FAIL_ALWAYS = set(IDS[7::250])
FAIL_FIRST = set(IDS[3::10]) - FAIL_ALWAYS


def _mode(job_id: str) -> str:
    return ALWAYS if job_id in FAIL_ALWAYS else FIRST if job_id in FAIL_FIRST else NEVER


def _planned(job_id: str, attempt: int) -> bool:
    """Whether that attempt of the job fails on purpose."""
    return _mode(job_id) == ALWAYS or (_mode(job_id) == FIRST and attempt == 1)


@dataclass(frozen=True)
class Run:
    """One line of the record file: ``kind`` is start, hold, end or fail; ``t`` when it was written."""

    kind: str
    job: str
    attempt: int
    pid: int
    t: float
    result: str | None = None


def read_runs(path: Path) -> list[Run]:
    runs = []
    for line in path.read_text().splitlines():
        kind, job, attempt, pid, *result, t = line.split(" ")
        runs.append(Run(kind, job, int(attempt), int(pid), float(t), result[0] if result else None))
    return runs


class _Workers:
    """The ``zkqueue worker`` processes of the scenario, by name."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.procs: dict[str, subprocess.Popen] = {}
        self.killed: list[str] = []

    def start(self, name: str, pool: str, concurrency: int, *, hold: Path | None = None) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
        env.pop(HOLD_ENV, None)
        if hold is not None:
            env[HOLD_ENV] = str(hold)
        cmd = [sys.executable, "-m", "zkqueue.ops.cli", "worker", f"{APP_MODULE}:app", "--queues", QUEUE,
               "--pool", pool, "--concurrency", str(concurrency), "--prefetch", str(concurrency),
               "--shutdown-timeout", "20", "--quiet"]
        with open(self.dir / f"{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen(cmd, cwd=self.dir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL)

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def log(self, name: str) -> str:
        return (self.dir / f"{name}.log").read_text(errors="replace")

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if name not in self.killed and proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{self.log(name)[-3000:]}")

    def kill(self, name: str) -> float:
        """SIGKILL: no end committed, no lease given back; its session just stops answering."""
        os.kill(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(30)
        self.killed.append(name)
        return time.time()


def _session_of(app: RecordingApp, pid: int) -> int | None:
    """The ZooKeeper session of the registered worker with ``pid``: its registry node's owner."""
    for info in live_workers(app.client, app.workers_path):
        if info.pid == pid:
            stat = app.client.exists(f"{app.workers_path}/{info.name}")
            return stat.ephemeralOwner if stat is not None else None
    return None


def _item_leases(app: RecordingApp, session: int) -> int:
    """The item leases (one per job held) ``session`` owns in the queue's lock path; 0 while disconnected."""
    locks = app.queue(QUEUE).paths.locks
    try:
        stats = [app.client.exists(f"{locks}/{name}") for name in lock_nodes(app.client, locks)
                 if not name.startswith(BLOCK_PREFIX)]
    except CONNECTION_ERRORS:  # the ensemble is electing a leader: look again
        return 0
    return sum(1 for stat in stats if stat is not None and stat.ephemeralOwner == session)


#: Worker log lines that tell why an attempt's end did not commit.
_END_TROUBLE = ("releasing it for redelivery", "was lost", "given back", "session LOST", "lost its reply",
                "committing the ends")


def _lines_about(workers: _Workers, job_id: str) -> dict[str, list[str]]:
    """Each worker's log lines that name ``job_id`` or tell of an end that did not commit: a failure's clues."""
    return {n: [line for line in workers.log(n).splitlines() if job_id in line or any(t in line for t in _END_TROUBLE)]
            for n in workers.procs}


def _on_thread(name: str, call: Callable[..., Any], *args: Any) -> tuple[threading.Thread, list[BaseException]]:
    """``call(*args)`` started on a thread; the list gets what it raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call(*args)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, errors


def _produce(task: Task, handles: list, chunks: list[float]) -> None:
    """Every job by ``task.enqueue_many``, CHUNK at a time, CHUNK_PAUSE apart; ``chunks``: when each was added."""
    for lo in range(0, JOBS, CHUNK):
        if lo:
            time.sleep(CHUNK_PAUSE)  # the pace of the adds is the scenario's shape
        calls = [Call(args=(n, _mode(IDS[n])), job_id=IDS[n]) for n in range(lo, min(lo + CHUNK, JOBS))]
        handles.extend(task.enqueue_many(calls))
        chunks.append(time.time())


@dataclass
class _End:
    """What the run left: the adds' handles, the jobs' records, the runs, and when things happened."""

    handles: list = field(default_factory=list)
    chunks: list[float] = field(default_factory=list)
    times: dict[str, float] = field(default_factory=dict)
    held_leases: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    completed: dict[str, Job] = field(default_factory=dict)
    dead: dict[str, Job] = field(default_factory=dict)
    codes: dict[str, int | None] = field(default_factory=dict)


def _drive(app: RecordingApp, ensemble: ZooKeeperEnsemble, workers: _Workers, record: Path, hold: Path,
           end: _End) -> None:
    """The scenario up to the survivors' exit; ``end`` gets what the accounting needs."""
    jq = app.queue(QUEUE)
    times = end.times
    workers.start("w0", "thread", THREADS, hold=hold)
    workers.start("p0", "process", PROCESSES)

    def registered() -> bool:
        workers.check_alive()
        return len(live_workers(app.client, app.workers_path)) == 2

    def runs_of(name: str, kind: str) -> int:
        workers.check_alive()
        return sum(1 for r in read_runs(record) if r.pid == workers.pid(name) and r.kind == kind)

    def w0_holds_ahead() -> bool:
        workers.check_alive()
        return _item_leases(app, w0_session) >= 2 * THREADS

    def finished() -> bool:
        workers.check_alive()
        try:
            counts = jq.counts()
        except CONNECTION_ERRORS:
            return False
        return counts["completed"] + counts["dead"] >= JOBS

    wait_for(registered, timeout=DEADLINE, interval=0.1, message="the workers did not register")
    w0_session = _session_of(app, workers.pid("w0"))
    assert w0_session, "w0 has no session"
    times["started"] = time.time()
    producer, add_errors = _on_thread("producer", _produce, app.tasks[TASK], end.handles, end.chunks)
    wait_for(lambda: runs_of("w0", "end") >= JOBS // 20, timeout=DEADLINE, interval=0.05,
             message="w0 ran too few jobs")
    times["leader_kill"] = time.time()
    striking, strike_errors = _on_thread("leader-kill", strike, "leader_kill", ensemble)
    hold.touch()  # from now on w0's runs never end
    wait_for(lambda: runs_of("w0", "hold") >= THREADS, timeout=DEADLINE, interval=0.05,
             message="w0 did not fill its slots")
    # Its slots hang and its claimer fills the room left ahead of them from the backlog; a block lease held past a
    # second becomes item leases, one per job held: the running ones and those claimed ahead.
    wait_for(w0_holds_ahead, timeout=DEADLINE, interval=0.1, message="w0 did not claim jobs ahead of its hung slots")
    end.held_leases = _item_leases(app, w0_session)
    times["worker_kill"] = workers.kill("w0")
    workers.start("w1", "thread", THREADS)
    striking.join(DEADLINE)
    assert not striking.is_alive() and not strike_errors, f"the leader kill failed: {strike_errors}"
    times["leader_kill_done"] = time.time()
    producer.join(DEADLINE)
    assert not producer.is_alive() and not add_errors, f"the adds failed: {add_errors}"
    wait_for(finished, timeout=DEADLINE, interval=0.2, message="the jobs did not all end")
    times["ended"] = time.time()
    end.counts = jq.counts()
    end.completed = {j.id: j for j in jq.completed()}
    end.dead = {j.id: j for j in jq.dead_letters()}
    stop_processes([workers.procs["p0"], workers.procs["w1"]])  # SIGTERM: a warm shutdown
    end.codes = {n: workers.procs[n].returncode for n in ("p0", "w1")}


def test_task_workers_through_a_leader_kill_and_a_worker_kill(ensemble, journal_dir, record_figures) -> None:
    hosts = fresh_chroot(ensemble.connect_string, "/task-faults-")
    record = journal_dir / "runs.txt"
    record.touch()
    hold = journal_dir / "hold-w0"
    (journal_dir / f"{APP_MODULE}.py").write_text(
        "from taskapp import make_app\n\n"
        f"app = make_app({hosts!r}, {str(record)!r}, session_timeout={SESSION!r})\n")
    app = make_app(hosts, str(record), session_timeout=SESSION)
    workers = _Workers(journal_dir)
    end = _End()
    try:
        _drive(app, ensemble, workers, record, hold, end)
    finally:
        stop_processes(list(workers.procs.values()))
        with contextlib.suppress(Exception):
            app.close()
    assert end.codes == {"p0": 0, "w1": 0}, (end.codes, workers.log("p0")[-2000:], workers.log("w1")[-2000:])
    # the leader kill reached both workers: every client of the ensemble lost its connection; and no session expired
    # (the accounting below counts on it: a worker whose session ends loses what it held, as the killed one does)
    assert all("connection SUSPENDED" in workers.log(n) for n in ("w0", "p0")), "a worker missed the leader kill"
    expired = {n: [line for line in workers.log(n).splitlines() if "session LOST" in line] for n in workers.procs}
    assert not any(expired.values()), f"a worker's session expired: {expired}"

    # the adds: every job created once, under the id asked for
    assert [h.id for h in end.handles] == IDS and all(h.created for h in end.handles)
    # every job ended exactly once: completed with its result, or dead as designed
    counts, completed, dead = end.counts, end.completed, end.dead
    assert counts["queued"] == counts["active"] == counts["retrying"] == counts["scheduled"] == 0, counts
    assert set(completed) | set(dead) == set(IDS) and not set(completed) & set(dead)
    assert set(dead) == FAIL_ALWAYS, sorted(set(dead) ^ FAIL_ALWAYS)[:5]
    assert all(j.state is JobState.COMPLETED and j.result == result_of(NUMBER[i]) for i, j in completed.items())
    assert all(j.state is JobState.DEAD and j.attempts == MAX_ATTEMPTS for j in dead.values())

    runs = read_runs(record)
    w0, w1 = workers.pid("w0"), workers.pid("w1")
    name_of = {w0: "w0", w1: "w1"}
    children = {r.pid for r in runs} - set(name_of)  # the process pool's children
    assert len(children) == PROCESSES, f"process-pool children that ran jobs: {sorted(children)}"
    assert {r.job for r in runs} <= set(IDS)
    by_job: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by_job[r.job].append(r)
    records = {**completed, **dead}

    # attempts count when jobs start: a record's attempts are exactly its runs, numbered 1, 2, ... once each
    wrong = {job_id: (records[job_id].attempts, [(r.kind, r.attempt, name_of.get(r.pid, "p0")) for r in rs])
             for job_id, rs in ((j, by_job[j]) for j in IDS)
             if sorted(r.attempt for r in rs if r.kind == "start") != list(range(1, records[job_id].attempts + 1))}
    lost_replies = [line for n in workers.procs for line in workers.log(n).splitlines() if "lost its reply" in line]
    assert not wrong, (f"{len(wrong)} job(s) whose attempts are not their runs (record attempts, runs), e.g. "
                       f"{list(wrong.items())[:5]}; lost replies logged: {lost_replies[:5]}")

    # in flight in w0 at its SIGKILL: counted, and run again at the next attempt, after the kill; held ahead: not
    held = {r.job: r.attempt for r in runs if r.kind == "hold"}
    assert len(held) == THREADS and {r.pid for r in runs if r.kind == "hold"} == {w0}, held
    for job_id, attempt in held.items():
        again = [r for r in by_job[job_id] if r.kind == "start" and r.attempt == attempt + 1]
        assert again and again[0].pid != w0 and again[0].t > end.times["worker_kill"], (job_id, by_job[job_id])
    ahead = end.held_leases - THREADS
    assert ahead == THREADS, end.held_leases  # prefetch = concurrency: none of them shows up as an attempt

    # every run ended (or hung in w0) as planned; a completed job's last attempt is its successful run
    for job_id in IDS:
        rec, rs = records[job_id], by_job[job_id]
        assert {r.attempt for r in rs if r.kind in ("end", "fail", "hold")} == set(range(1, rec.attempts + 1)), rs
        assert all(not _planned(job_id, r.attempt) and r.result == str(result_of(NUMBER[job_id]))
                   for r in rs if r.kind == "end"), rs
        assert all(_planned(job_id, r.attempt) for r in rs if r.kind == "fail"), rs
        if job_id in completed:
            assert any(r.kind == "end" and r.attempt == rec.attempts for r in rs), rs
        # the planned failures the record keeps: those that committed (all but ones on the killed worker)
        failed = {r.attempt: r.pid for r in rs if r.kind == "fail"}
        kept = {e.attempt for e in rec.errors if "fails on purpose" in e.error}
        assert kept <= set(failed) and {a for a, pid in failed.items() if pid != w0} <= kept, (
            job_id, rec.errors, rs, _lines_about(workers, job_id))

    # completion records exactly once: a job's successful runs before its last one were on the killed worker
    adds = Journal("adds", [{"ev": "ack", "id": j} for j in IDS if j not in FAIL_ALWAYS])
    successes: dict[str, list[dict]] = defaultdict(list)
    for r in runs:
        if r.kind == "end":
            successes[name_of.get(r.pid, "p0")].append({"ev": "deliver", "id": r.job, "t": r.t})
    acc = account("task_workers_leader+kill", "lock", [adds], [Journal(n, ev) for n, ev in successes.items()],
                  killed=workers.killed)
    acc.faults = ["leader_kill", "task_worker_kill"]
    t = end.times
    acc.drain_s = round(t["ended"] - t["started"], 2)
    record_figures(acc)
    acc.assert_ok()

    starts = defaultdict(int)
    for r in runs:
        if r.kind == "start":
            starts[name_of.get(r.pid, "p0")] += 1
    print(f"\ntask worker faults: {JOBS} jobs, {sum(starts.values())} runs {dict(starts)}, {len(held)} in flight "
          f"and {ahead} held ahead in w0 at its SIGKILL, {acc.duplicates} successful runs repeated, {len(dead)} "
          f"dead; leader kill at {t['leader_kill'] - t['started']:.1f}s (over at "
          f"{t['leader_kill_done'] - t['started']:.1f}s), worker kill at {t['worker_kill'] - t['started']:.1f}s, "
          f"adds done at {end.chunks[-1] - t['started']:.1f}s, all ended at {t['ended'] - t['started']:.1f}s")
