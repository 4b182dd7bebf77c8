"""Job control on a real ZooKeeper: cancel in every state, pause and resume, progress reported by a handler."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from zkqueue.errors import ConfigurationError, JobCancelledError, QueueStateError
from zkqueue.jobs import JobQueue, JobState, RetryPolicy
from zkqueue.jobs.running import PROGRESS_INTERVAL
from zkqueue.server.testing import wait_for

PATH = "/jobs/control"
FAST = RetryPolicy(max_attempts=3, backoff=0.2, max_backoff=1.0, jitter=False)


def job_queue(client, **kwargs) -> JobQueue:
    kwargs.setdefault("retry", FAST)
    return JobQueue(client, PATH, **kwargs)


# ---------------------------------------------------------------------------------------------- cancel
def test_cancel_a_queued_job_frees_its_id_in_one_multi(zk_client) -> None:
    with job_queue(zk_client) as jq:
        jq.add("a", job_id="a")
        jq.add("b", job_id="b")
        assert jq.cancel("a") is True
        job = jq.get("a")
        assert job.state is JobState.CANCELLED and job.params == "a"
        counts = jq.counts()
        assert counts["queued"] == 1 and counts["cancelled"] == 1
        assert jq.cancel("a") is False and jq.cancel("never") is False  # finished / unknown
        with jq.take(max_jobs=5, timeout=2) as jobs:  # only b is left to run
            assert [j.id for j in jobs] == ["b"]
        with pytest.raises(JobCancelledError):
            jq.wait_result("a", timeout=0)
        assert jq.add("again", job_id="a") == "a"  # the id is free
        assert jq.get("a").state is JobState.QUEUED


def test_cancel_a_job_parked_a_day_ahead(zk_client) -> None:
    with job_queue(zk_client) as jq:
        jq.add("later", job_id="later", delay=86_400)
        assert jq.counts()["scheduled"] == 1
        assert jq.cancel("later") is True
        counts = jq.counts()
        assert counts["scheduled"] == 0 and counts["cancelled"] == 1
        assert jq.get("later").state is JobState.CANCELLED


def test_cancel_a_retrying_job(zk_client) -> None:
    with job_queue(zk_client, retry=RetryPolicy(max_attempts=3, backoff=30, jitter=False)) as jq:
        jq.add("x", job_id="x")
        with jq.take(timeout=5) as jobs:
            jobs[0].fail(RuntimeError("boom"))
        assert jq.get("x").state is JobState.RETRYING
        assert jq.cancel("x") is True
        job = jq.get("x")
        assert job.state is JobState.CANCELLED and job.attempts == 1 and job.last_error == "RuntimeError: boom"
        assert jq.counts()["retrying"] == 0


def test_cancel_a_running_sync_job_ends_it_cancelled(zk_client) -> None:
    started = threading.Event()
    both_asked = threading.Event()  # the handler stops only after both cancels: the job is running for each
    seen: list[bool] = []

    def handler(job):
        started.set()
        deadline = time.monotonic() + 20
        while not (job.cancel_requested and both_asked.is_set()) and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(job.cancel_requested)
        return "stopped early"

    with job_queue(zk_client) as jq:
        jq.add("x", job_id="run")
        worker = jq.work(handler)
        assert started.wait(10)
        assert jq.get("run").state is JobState.ACTIVE
        assert jq.cancel("run") is True
        assert jq.cancel("run") is True  # requested before
        both_asked.set()
        job = jq.wait("run", timeout=10)
        assert job.state is JobState.CANCELLED and job.result is None and seen == [True]
        assert worker.stats()["cancelled"] == 1
        assert zk_client.get_children(f"{PATH}/cancels") == []  # the request went with the end
        # Stopped first: a worker still running would take the new job, whose handler, never cancelled, waits out
        # its 20 s (and the close waits for it: the test took 20 s now and then on a loaded machine).
        worker.stop()
        assert jq.add("y", job_id="run") == "run"  # and the id is free


def test_cancel_a_running_async_job_cancels_its_coroutine(zk_client, monkeypatch) -> None:
    """...and the read that confirms the request before the job ends CANCELLED is not made on the event loop (it
    blocks: every coroutine on the loop would wait for it)."""
    started = threading.Event()
    cancelled = threading.Event()
    confirmed_on_a_loop: list[bool] = []
    requested = JobQueue.cancel_requested

    def cancel_requested(self, job_id, *, confirm=False):
        if confirm:
            try:
                asyncio.get_running_loop()
                confirmed_on_a_loop.append(True)
            except RuntimeError:
                confirmed_on_a_loop.append(False)
        return requested(self, job_id, confirm=confirm)

    monkeypatch.setattr(JobQueue, "cancel_requested", cancel_requested)

    async def handler(job):
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "slept"

    with job_queue(zk_client) as jq:
        jq.add("x", job_id="arun")
        jq.work(handler)
        assert started.wait(10)
        assert jq.cancel("arun") is True
        job = jq.wait("arun", timeout=10)
        assert cancelled.is_set() and job.state is JobState.CANCELLED
        assert job.attempts == 1 and job.errors == []  # cancelled, not failed
    assert confirmed_on_a_loop and not any(confirmed_on_a_loop), confirmed_on_a_loop


def test_cancel_a_job_a_worker_holds_claimed_ahead_ends_it_without_running_it(zk_client) -> None:
    release = threading.Event()
    ran: list[str] = []

    def handler(job):
        ran.append(job.id)
        release.wait(20)

    with job_queue(zk_client) as jq:
        jq.add("first", job_id="first")
        worker = jq.work(handler, concurrency=1, block_leases=False)
        wait_for(lambda: ran == ["first"], timeout=10)
        jq.add("second", job_id="second")
        wait_for(lambda: worker.stats()["held"] == 1, timeout=10)  # claimed ahead, its item under the lease
        assert jq.get("second").state is JobState.QUEUED
        assert jq.cancel("second") is True
        assert jq.get("second").state is JobState.CANCELLED  # at once: the held job's start can only fail now
        release.set()
        job = jq.wait("second", timeout=10)
        assert job.state is JobState.CANCELLED and ran == ["first"]
        assert jq.wait("first", timeout=10).state is JobState.COMPLETED
        worker.stop()


def test_a_request_left_by_a_job_that_ended_first_does_not_cancel_its_next_run(zk_client) -> None:
    with job_queue(zk_client) as jq:
        jq.add("x", job_id="j")
        helds = jq.claim_many(1, timeout=5)
        # requested while held through the claim seam, which does not look at requests (a take scope does: a job
        # asked to stop while it holds it ends CANCELLED once its watch has seen the request)
        assert jq.cancel("j") is True
        helds[0].finish(jq.outcomes.success(helds[0].claimed, "done"))
        assert jq.get("j").state is JobState.COMPLETED
        assert zk_client.get_children(f"{PATH}/cancels") == ["j"]
        assert jq.add("again", job_id="j") == "j"
        assert zk_client.get_children(f"{PATH}/cancels") == []  # deleted by the add
        worker = jq.work(lambda job: "ran")
        assert jq.wait_result("j", timeout=10) == "ran"
        worker.stop()


def test_the_reaper_deletes_requests_left_by_jobs_that_ended_first(zk_client) -> None:
    with job_queue(zk_client) as jq:
        jq.add_all([("j1", 1), ("j2", 2)])
        helds = jq.claim_many(2, timeout=5)  # the claim seam (flows' own ends) does not look at requests
        assert sorted(h.record.id for h in helds) == ["j1", "j2"]
        assert jq.cancel("j1") is True and jq.cancel("j2") is True
        helds[0].finish(jq.outcomes.success(helds[0].claimed, None))
        assert sorted(zk_client.get_children(f"{PATH}/cancels")) == ["j1", "j2"]
        assert jq.reap() == 1  # j1 ended: its request is stale; j2 is still held, its request stays
        assert zk_client.get_children(f"{PATH}/cancels") == ["j2"]
        helds[1].finish(jq.outcomes.success(helds[1].claimed, None))
        assert jq.reap() == 1
        assert zk_client.get_children(f"{PATH}/cancels") == []


def test_a_progress_write_whose_reply_was_lost_does_not_make_the_job_run_again(zk_client, monkeypatch) -> None:
    from kazoo.exceptions import ConnectionLoss

    import zkqueue.jobs.queue as queue_module

    real = queue_module.write_held
    lost: list[int] = []

    def write_then_lose_the_reply(held, ops, record):  # the write commits; its reply is lost once
        before = held.record, held.version
        ok = real(held, ops, record)
        if not lost:
            lost.append(held.version)
            held.record, held.version = before  # as if the reply never came
            raise ConnectionLoss()
        return ok

    monkeypatch.setattr(queue_module, "write_held", write_then_lose_the_reply)
    runs: list[int] = []

    def handler(job):
        runs.append(job.attempts)
        job.report_progress(1)
        time.sleep(3 * PROGRESS_INTERVAL)  # the write (and its lost reply) happens meanwhile
        job.report_progress(2)
        return "done"

    with job_queue(zk_client) as jq:
        jq.add("x", job_id="lost")
        worker = jq.work(handler)
        job = jq.wait("lost", timeout=10)
        worker.stop()
        assert lost and job.state is JobState.COMPLETED and job.result == "done" and job.progress == 2
        assert runs == [1]  # the end built on the committed write's version: no release, no second run


# ---------------------------------------------------------------------------------------------- pause
def test_pause_starts_nothing_until_resume(zk_client) -> None:
    ran: list[str] = []
    with job_queue(zk_client) as jq:
        jq.pause()
        assert jq.paused
        jq.add_all([(f"j{i}", i) for i in range(5)])  # adds go on while paused
        worker = jq.work(lambda job: ran.append(job.id), concurrency=2)
        with jq.take(max_jobs=5, timeout=0.5) as jobs:
            assert jobs == []  # a take waits out its timeout
        time.sleep(1.0)
        assert ran == [] and jq.counts()["queued"] == 5 and jq.get("j0").attempts == 0
        jq.resume()
        assert not jq.paused
        wait_for(lambda: len(ran) == 5, timeout=10)
        assert sorted(ran) == [f"j{i}" for i in range(5)]
        worker.stop()
        jq.pause()
        jq.pause()  # idempotent
        jq.resume()


def test_a_pause_seen_by_another_client_blocks_its_starts(zk_client, zk_client_factory) -> None:
    other = zk_client_factory()
    with job_queue(zk_client) as jq, job_queue(other) as theirs:
        theirs.pause()
        wait_for(lambda: jq.paused, timeout=5)
        jq.add("x", job_id="x")
        assert jq.claim(timeout=0.5) is None
        theirs.resume()
        wait_for(lambda: not jq.paused, timeout=5)
        held = jq.claim(timeout=5)
        assert held is not None and held.record.id == "x"
        held.release()


WORKER = textwrap.dedent("""
    import sys, threading, time
    from kazoo.client import KazooClient
    from zkqueue.jobs import JobQueue
    client = KazooClient(hosts=sys.argv[1]); client.start()
    jq = JobQueue(client, sys.argv[2]); jq.start()
    lock = threading.Lock()
    def handler(job):
        with lock:  # one line per run, never interleaved by the two slots
            print("RAN", job.id, time.time(), flush=True)
    worker = jq.work(handler, concurrency=2)
    print("READY", flush=True)
    sys.stdin.read()  # until the test closes stdin
    worker.stop(); jq.close(); client.stop()
""")


def test_pause_and_resume_with_two_worker_processes(zk_client, zk_hosts) -> None:
    with job_queue(zk_client) as jq:
        jq.pause()
        procs = [subprocess.Popen([sys.executable, "-c", WORKER, zk_hosts, PATH], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True) for _ in range(2)]
        try:
            for proc in procs:
                assert proc.stdout.readline().strip() == "READY"
            jq.add_all([(f"p{i}", i) for i in range(40)])
            time.sleep(1.5)
            assert jq.counts()["completed"] == 0 and jq.counts()["active"] == 0
            resumed = time.time()
            jq.resume()
            wait_for(lambda: jq.counts()["completed"] == 40, timeout=30)
        finally:
            outs = [proc.communicate(timeout=30)[0] for proc in procs]
        runs = [line.split() for out in outs for line in out.splitlines() if line.startswith("RAN")]
        assert sorted(r[1] for r in runs) == sorted(f"p{i}" for i in range(40))  # every job once
        assert all(float(r[2]) >= resumed - 0.5 for r in runs)  # none before the resume
        assert all(len([r for r in runs if r[1] == f"p{i}"]) == 1 for i in range(40))


# ---------------------------------------------------------------------------------------------- progress
READER = textwrap.dedent("""
    import sys, time
    from kazoo.client import KazooClient
    from zkqueue.jobs import JobQueue
    client = KazooClient(hosts=sys.argv[1]); client.start()
    jq = JobQueue(client, sys.argv[2])
    deadline = time.time() + 20
    while time.time() < deadline:
        job = jq.get("prog")
        if job is not None and job.progress == {"done": 3}:
            print("SEEN", job.state.value, flush=True)
            break
        time.sleep(0.05)
    client.stop()
""")


def test_progress_is_seen_by_get_from_another_process(zk_client, zk_hosts) -> None:
    release = threading.Event()

    def handler(job):
        for done in range(1, 4):
            job.report_progress({"done": done})
        release.wait(20)
        return "ok"

    with job_queue(zk_client) as jq:
        jq.add("x", job_id="prog")
        assert jq.get("prog").progress is None
        worker = jq.work(handler)
        out = subprocess.run([sys.executable, "-c", READER, zk_hosts, PATH], capture_output=True, text=True,
                             timeout=60).stdout
        assert "SEEN ACTIVE" in out  # written while it ran
        release.set()
        job = jq.wait("prog", timeout=10)
        assert job.state is JobState.COMPLETED and job.progress == {"done": 3}
        worker.stop()


def test_progress_writes_are_throttled_and_the_last_value_lands(zk_client) -> None:
    versions: list[int] = []

    def handler(job):
        end = time.monotonic() + 1.0
        n = 0
        while time.monotonic() < end:
            n += 1
            job.report_progress(n)
            time.sleep(0.001)
        job.report_progress("last")
        return n

    with job_queue(zk_client) as jq:
        jq.add("x", job_id="t")
        watch_stop = threading.Event()

        def watch() -> None:  # every version of the record while it runs
            while not watch_stop.is_set():
                stat = zk_client.exists(f"{PATH}/records/t")
                if stat is not None and (not versions or versions[-1] != stat.version):
                    versions.append(stat.version)
                time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        worker = jq.work(handler)
        job = jq.wait("t", timeout=10)
        watch_stop.set()
        watcher.join()
        worker.stop()
        assert job.state is JobState.COMPLETED and job.result > 100  # reported hundreds of times
        assert job.progress == "last"
        # the claim and the start, then at most one write per interval over about one second
        assert 2 <= len(versions) <= 3 + int(1.0 / PROGRESS_INTERVAL) + 2


def test_progress_values_are_checked(zk_client) -> None:
    errors: list[BaseException] = []

    def handler(job):
        for bad in ({"x": object()}, "x" * 5000, float("nan")):
            try:
                job.report_progress(bad)
            except ConfigurationError as exc:
                errors.append(exc)

    with job_queue(zk_client) as jq:
        jq.add("x", job_id="bad")
        worker = jq.work(handler)
        assert jq.wait("bad", timeout=10).state is JobState.COMPLETED
        worker.stop()
        assert len(errors) == 3
        with pytest.raises(QueueStateError):  # outside a worker's run
            jq.get("bad").report_progress(1)


# ---------------------------------------------------------------------------------------------- headers
def test_headers_travel_with_the_job_through_retries(zk_client) -> None:
    seen: list[dict] = []

    def handler(job):
        seen.append(job.headers)
        if len(seen) == 1:
            raise RuntimeError("once")
        return "ok"

    with job_queue(zk_client) as jq:
        jq.add("x", job_id="h", headers={"trace": "abc", "n": 1})
        jq.add("y", job_id="none")
        assert jq.get("h").headers == {"trace": "abc", "n": 1} and jq.get("none").headers == {}
        worker = jq.work(handler)
        assert jq.wait_result("h", timeout=10) == "ok"
        worker.stop()
        assert {"trace": "abc", "n": 1} in seen and seen.count({"trace": "abc", "n": 1}) == 2
        for bad in ({1: "x"}, ["x"], {"x": "y" * 5000}, {"x": object()}):
            with pytest.raises(ConfigurationError):
                jq.add("z", headers=bad)


def test_a_job_cancelled_while_a_take_scope_holds_it_ends_cancelled(zk_client) -> None:
    """A take scope's job sees ``cancel_requested`` once JobQueue.cancel asks, and the scope ends it CANCELLED
    (its request deleted with the end), whatever was decided for it; the other job of the scope completes."""
    import pickle

    with job_queue(zk_client) as jq:
        jq.add_all([("keep", 1), ("drop", 2)])
        with jq.take(max_jobs=2, timeout=5) as jobs:
            held = {job.id: job for job in jobs}
            assert set(held) == {"keep", "drop"} and not held["drop"].cancel_requested
            assert jq.cancel("drop") is True
            wait_for(lambda: held["drop"].cancel_requested, timeout=10)
            assert not held["keep"].cancel_requested
            held["drop"].complete("done anyway")
            assert pickle.loads(pickle.dumps(held["drop"])).cancel_requested is False  # a copy does not watch
        assert jq.get("drop").state is JobState.CANCELLED and jq.get("drop").attempts == 1
        assert jq.get("keep").state is JobState.COMPLETED
        assert zk_client.get_children(jq.paths.cancels) == []
