"""The asyncio job layer (zkqueue.aio) through a worker SIGKILL and a leader kill, with exact accounting.

An async producer (``AsyncJobQueue.add`` from one event loop, its adds coalesced into batches) adds 3,000 jobs, a
backlog first and then in waves, while 2 worker processes run ``AsyncJobQueue.work`` with coroutine handlers
(jobworker.py with ``"async": true``, concurrency 50). Every 10th job fails on its first attempt; a few fail on
every attempt. One worker process is SIGKILLed with every slot busy and jobs claimed ahead (a replacement starts),
then the ZooKeeper leader is killed while waves of adds are still coming.

The accounting, per job: it ends exactly once (completed with params * 2, or dead: exactly the always-failing ones,
after MAX_ATTEMPTS); no attempt number runs twice (a claim is exclusive); its record's attempt count is the
number of its last run, and every attempt number up to it is explained: a run that failed on purpose, a run on the
killed process (or one whose session was lost) that never committed, or a claim such a process held without
running it; the jobs in flight in the killed process ran again at a later attempt; successful runs are at least
once, completion records exactly once (faultcheck's rule: a job succeeds again only after its earlier success was
on a killed process or a lost session); the records keep exactly the committed planned failures; the surviving
workers' own counts match their journals; nothing is left queued, active or retrying.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultcheck import Journal, account, read_journal  # type: ignore[import-not-found]
from faultrun import stop_processes, strike  # type: ignore[import-not-found]

from zkqueue.aio import AsyncJobQueue
from zkqueue.jobs import JobState, RetryPolicy
from zkqueue.server.testing import fresh_chroot, make_client

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.timeout(300)]

JOBS = 3000
FIRST_WAVE = 1500  # a backlog, so that the worker to be killed fills its slots and claims ahead
WAVES = 6  # the rest in waves, WAVE_PAUSE apart: the adds go on through both faults
WAVE_PAUSE = 0.5
MAX_ATTEMPTS = 4
CONCURRENCY = 50
SESSION = 4.0
DEADLINE = 120.0
HERE = Path(__file__).parent

IDS = [f"job-{i:04d}" for i in range(JOBS)]
FAIL_FIRST = IDS[5::10]  # fail on their first attempt, succeed on the next one
FAIL_ALWAYS = IDS[7::500]  # fail on every attempt: dead after MAX_ATTEMPTS


def _worker(hosts: str, path: str, journal_dir: Path, name: str) -> subprocess.Popen:
    cfg = {"async": True, "hosts": hosts, "path": path, "journal": str(journal_dir / f"{name}.jsonl"),
           "session_timeout": SESSION, "max_attempts": MAX_ATTEMPTS, "work_seconds": 0.02,
           "concurrency": CONCURRENCY, "fail_first": FAIL_FIRST, "fail_always": FAIL_ALWAYS,
           "hold_file": str(journal_dir / f"hold-{name}")}
    (journal_dir / f"{name}.jsonl").touch()
    log = open(journal_dir / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
    try:
        return subprocess.Popen([sys.executable, str(HERE / "jobworker.py"), json.dumps(cfg)], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=HERE)
    finally:
        log.close()


class _Run:
    """The worker processes of the scenario and what their journals say so far."""

    def __init__(self, hosts: str, path: str, journal_dir: Path) -> None:
        self.hosts, self.path, self.dir = hosts, path, journal_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.killed: list[str] = []

    def start(self, name: str) -> None:
        self.procs[name] = _worker(self.hosts, self.path, self.dir, name)

    def journal(self, name: str) -> Journal:
        return read_journal(self.dir / f"{name}.jsonl")

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if name not in self.killed and proc.poll() not in (None, 0):
                tail = (self.dir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{tail}")

    def kill(self, name: str) -> float:
        """SIGKILL: no end committed, no lease given back; its session just stops answering."""
        os.kill(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(30)
        self.killed.append(name)
        return time.time()

    async def until(self, predicate, message: str, timeout: float = DEADLINE) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout
        while not await predicate():
            self.check_alive()
            assert time.monotonic() < deadline, message
            await asyncio.sleep(0.1)


async def _add_in_waves(jq: AsyncJobQueue, waves_done: list[float]) -> list[object]:
    """Every job added by ``jq.add`` (one call per job, coalesced by the queue): FIRST_WAVE at once, the rest in
    WAVES waves WAVE_PAUSE apart; what each add returned (its id) or raised. ``waves_done``: when each wave was."""
    out: list[object] = []
    size = (JOBS - FIRST_WAVE) // WAVES
    bounds = [0, FIRST_WAVE, *(FIRST_WAVE + w * size for w in range(1, WAVES)), JOBS]
    for w, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if w:
            await asyncio.sleep(WAVE_PAUSE)
        out.extend(await asyncio.gather(*(jq.add(i, job_id=IDS[i]) for i in range(lo, hi)), return_exceptions=True))
        waves_done.append(time.time())
    return out


async def _drive(run: _Run, client, ensemble) -> dict:  # noqa: ANN001
    """Adds, the faults, and the wait for every job to end; what the queue holds at the end."""
    times: dict[str, float] = {}
    waves_done: list[float] = []
    async with AsyncJobQueue(client, run.path, retry=RetryPolicy(max_attempts=MAX_ATTEMPTS)) as jq:
        for name in ("w0", "w1"):
            run.start(name)

        async def ready() -> bool:
            return all(run.journal(n).of("ready") for n in run.procs)

        async def w0_ran() -> bool:
            return len(run.journal("w0").of("deliver")) >= JOBS // 20

        async def w0_full() -> bool:  # every slot holds a job (and the claim loop claims ahead meanwhile)
            return len(run.journal("w0").of("holding")) >= CONCURRENCY

        async def finished() -> bool:
            counts = await jq.counts()
            return counts["completed"] + counts["dead"] >= JOBS

        await run.until(ready, "the workers did not start")
        started = time.monotonic()
        times["started"] = time.time()
        adding = asyncio.create_task(_add_in_waves(jq, waves_done))
        await run.until(w0_ran, "w0 ran too few jobs")
        (run.dir / "hold-w0").touch()  # from now on w0's handlers never end: it is killed mid-batch
        await run.until(w0_full, "w0 did not fill its slots")
        await asyncio.sleep(0.2)
        times["worker_kill"] = run.kill("w0")
        run.start("w2")
        await asyncio.to_thread(strike, "leader_kill", ensemble)  # the loop goes on adding meanwhile
        times["leader_kill_done"] = time.time()
        added = await adding
        times["added"] = time.time()
        await run.until(finished, f"jobs did not finish: {await jq.counts()}")
        times["drain_s"] = time.monotonic() - started
        return {"added": added, "counts": await jq.counts(), "times": times, "waves_done": waves_done,
                "completed": {j.id: j for j in await jq.completed()},
                "dead": {j.id: j for j in await jq.dead_letters()}}


def test_async_jobs_through_a_worker_kill_and_a_leader_kill(ensemble, journal_dir, record_figures) -> None:
    hosts = fresh_chroot(ensemble.connect_string, "/aio-faults-")
    run = _Run(hosts, "/jobs/aio", journal_dir)
    client = make_client(hosts, timeout=10.0)
    try:
        end = asyncio.run(_drive(run, client, ensemble))
    finally:
        stop_processes(list(run.procs.values()))
        client.stop()
        client.close()
    run.check_alive()  # the survivors stopped cleanly on SIGTERM (exit code 0)
    survivors = [n for n in run.procs if n not in run.killed]
    journals = {n: run.journal(n) for n in run.procs}
    assert all(journals[n].of("done") for n in survivors), "a surviving worker did not stop cleanly"

    # the adds: every one acknowledged with its id (the exactly-once add rides out the leader kill)
    assert end["added"] == IDS, [a for a in end["added"] if a not in IDS][:5]
    counts, completed, dead = end["counts"], end["completed"], end["dead"]
    assert counts["queued"] == counts["active"] == counts["retrying"] == counts["scheduled"] == 0, counts
    assert set(completed) | set(dead) == set(IDS) and not set(completed) & set(dead)  # each ends exactly once
    assert set(dead) == set(FAIL_ALWAYS), sorted(set(dead) ^ set(FAIL_ALWAYS))[:5]
    assert counts["completed"] == JOBS - len(FAIL_ALWAYS) and counts["dead"] == len(FAIL_ALWAYS), counts

    # every run: (job, attempt) at most once anywhere (claims are exclusive), of a job that was added
    runs = [(e, n) for n, j in journals.items() for e in j.of("deliver")]
    pairs = [(e["id"], e["attempt"]) for e, _n in runs]
    assert len(pairs) == len(set(pairs)), "an attempt ran twice"
    assert {e["id"] for e, _n in runs} <= set(IDS)
    lossy = set(run.killed) | {n for n, j in journals.items() if j.of("lost")}
    # The SIGKILL of w0 is no loss that may leave an attempt counted without a run: its slots were all held by
    # running jobs (they journaled "holding"), and the jobs it claimed ahead had no attempt counted (attempts
    # count when a job starts). Only a session or reply lost elsewhere may.
    losses = [e["t"] for j in journals.values() for e in j.of("lost")]

    # completion records exactly once: a job's successful runs before its last one were on lossy processes
    adds = Journal("adds", [{"ev": "ack", "id": i} for i in IDS if i not in FAIL_ALWAYS])
    succeeded = [Journal(n, [e for e in j.events if e["ev"] == "lost" or (e["ev"] == "deliver" and not e["fails"])])
                 for n, j in journals.items()]
    acc = account("aio_kill+leader_kill", "lock", [adds], succeeded, killed=run.killed)
    acc.faults = ["async_worker_kill", "leader_kill"]
    acc.drain_s = round(end["times"]["drain_s"], 2)
    record_figures(acc)
    acc.assert_ok()

    # per job: the record's attempts, result and errors; every attempt number explained
    by_job: dict[str, dict[int, tuple[dict, str]]] = {}
    for e, n in runs:
        by_job.setdefault(e["id"], {})[e["attempt"]] = (e, n)
    rerun = gaps = 0
    for i, job_id in enumerate(IDS):
        record = completed.get(job_id) or dead[job_id]
        got = by_job.get(job_id, {})
        last = record.attempts
        assert got and max(got) <= last, (job_id, last, sorted(got))
        if job_id in dead:
            assert record.state is JobState.DEAD and last == MAX_ATTEMPTS, record
        else:
            assert record.state is JobState.COMPLETED and record.result == 2 * i, record
            assert last in got and not got[last][0]["fails"], (job_id, last, got)  # its last run completed it
        for attempt in range(1, last + 1):
            if attempt not in got:  # claimed and never run: by a process that was killed (or lost its session)
                gaps += 1
                before = max((got[a][0]["t"] for a in got if a < attempt), default=0.0)
                after = min((got[a][0]["t"] for a in got if a > attempt), default=float("inf"))
                assert any(before <= t <= after for t in losses), (job_id, attempt, sorted(got))
                continue
            e, name = got[attempt]
            planned = job_id in FAIL_ALWAYS or (job_id in FAIL_FIRST and attempt == 1)
            assert e["fails"] == planned, (job_id, attempt, e)
            if attempt < last and not e["fails"]:  # succeeded, yet ran again: it never committed
                assert name in lossy, (job_id, attempt, name)
                rerun += 1
        # the failures the record keeps: the planned ones that committed (a lossy process's may not have)
        failed = {a for a, (e, _n) in got.items() if e["fails"]}
        kept = {err.attempt for err in record.errors if "fails on purpose" in err.error}
        assert kept <= failed and {a for a in failed if got[a][1] not in lossy} <= kept, (job_id, record.errors)
    held = {e["id"]: e["attempt"] for e in journals["w0"].of("holding")}  # in flight when w0 was SIGKILLed
    assert len(held) >= CONCURRENCY and all((completed.get(j) or dead[j]).attempts > a for j, a in held.items())

    # the surviving workers' own counts agree with their journals
    for n in survivors:
        stats = journals[n].of("stats")[-1]["worker"]
        ran = journals[n].of("deliver")
        assert stats["completed"] == sum(1 for e in ran if not e["fails"]), (n, stats)
        assert stats["failed"] == sum(1 for e in ran if e["fails"]), (n, stats)
        assert stats["in_flight"] == stats.get("prefetched", 0) == stats["released"] == 0, (n, stats)
    t = end["times"]
    print(f"\naio faults: {JOBS} jobs, {len(runs)} runs ({len(held)} in flight in the killed worker, {rerun} "
          f"successful runs repeated, {gaps} attempts claimed and never run), {len(dead)} dead; worker kill at "
          f"{t['worker_kill'] - t['started']:.1f}s, leader kill over at {t['leader_kill_done'] - t['started']:.1f}s, "
          f"waves of adds done at {[round(w - t['started'], 1) for w in end['waves_done']]}s, all ended at "
          f"{t['drain_s']:.1f}s")
