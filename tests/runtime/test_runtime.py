"""The worker runtime (zkqueue.runtime) through JobQueue.work on a real ZooKeeper: attempts counted when a job
starts, not when it is claimed ahead; timeouts enforced on threads, child processes and coroutines; warm and cold
stops; max_jobs; whatever a handler raises fails only its attempt."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from zkqueue.errors import ConfigurationError, JobTimeoutError, WorkerLostError
from zkqueue.jobs import JobQueue, JobState, RetryPolicy
from zkqueue.server.testing import wait_for

from handlers import crash_first, hang_first, square

PATH = "/runtime/jobs"
FAST = RetryPolicy(max_attempts=3, backoff=0.1, max_backoff=0.2, jitter=False)


def job_queue(client, **kwargs) -> JobQueue:
    kwargs.setdefault("retry", FAST)
    return JobQueue(client, PATH, **kwargs)


def completed(jq: JobQueue, n: int) -> bool:
    return jq.counts()["completed"] >= n


def test_jobs_held_ahead_have_no_attempt_counted_until_they_start(zk_client) -> None:
    """A worker holds jobs ahead of its free slots; their records stay QUEUED with no attempt until each starts,
    and a cold stop gives the running job back with its attempt counted and the held ones untouched."""
    started, go = threading.Event(), threading.Event()

    def handler(job):
        started.set()
        go.wait(30)
        return job.params

    with job_queue(zk_client) as jq:
        jq.add_all((f"j{i}", i) for i in range(4))
        worker = jq.work(handler, concurrency=1, prefetch=3)
        wait_for(started.is_set)
        wait_for(lambda: worker.stats()["held"] == 3)
        running = worker.running_ids()
        assert running == ["j0"]
        assert jq.get("j0").state is JobState.ACTIVE and jq.get("j0").attempts == 1
        for i in (1, 2, 3):
            job = jq.get(f"j{i}")
            assert job.state is JobState.QUEUED and job.attempts == 0  # held under a lease, no attempt counted
        assert worker.stop(timeout=0.2) is False  # j0 still runs: a cold stop
        go.set()
        assert jq.get("j0").attempts == 1 and jq.get("j0").state is not JobState.COMPLETED  # given back, counted
        assert worker.stats()["returned"] == 3 and worker.stats()["given_back"] == 1
        assert [jq.get(f"j{i}").attempts for i in (1, 2, 3)] == [0, 0, 0]
        with jq.work(lambda job: job.params, concurrency=2):
            wait_for(lambda: completed(jq, 4))
        assert {i: jq.get(f"j{i}").attempts for i in range(4)} == {0: 2, 1: 1, 2: 1, 3: 1}


def test_a_warm_stop_lets_running_jobs_finish_and_returns_the_held_ones(zk_client) -> None:
    started, go = threading.Event(), threading.Event()

    def handler(job):
        started.set()
        go.wait(30)
        return "done"

    with job_queue(zk_client) as jq:
        jq.add_all((f"w{i}", i) for i in range(5))
        worker = jq.work(handler, concurrency=2, prefetch=3)
        wait_for(lambda: worker.in_flight == 2 and worker.stats()["held"] == 3)
        threading.Timer(0.3, go.set).start()
        assert worker.stop(timeout=10) is True
        done = [jq.get(f"w{i}") for i in range(5)]
        assert sorted(j.state.value for j in done) == ["COMPLETED"] * 2 + ["QUEUED"] * 3
        assert all(j.attempts == (1 if j.state is JobState.COMPLETED else 0) for j in done)


def test_a_hung_thread_past_its_timeout_fails_the_attempt_and_its_late_result_is_refused(zk_client, caplog) -> None:
    release = threading.Event()
    late_returned = threading.Event()

    def handler(job):
        if job.attempts == 1:
            release.wait(30)
            late_returned.set()
            return "stale"
        return "fresh"

    with job_queue(zk_client) as jq:
        jq.add({"x": 1}, job_id="hung", timeout=0.5)
        t0 = time.monotonic()
        with jq.work(handler, concurrency=1) as worker:
            wait_for(lambda: completed(jq, 1), timeout=10)
            took = time.monotonic() - t0
            job = jq.get("hung")
            assert job.result == "fresh" and job.attempts == 2 and took < 5
            assert job.errors[0].error.startswith("JobTimeoutError")
            release.set()
            wait_for(late_returned.is_set)
            wait_for(lambda: any("refused" in r.getMessage() for r in caplog.records))
        job = jq.get("hung")
        assert job.result == "fresh" and job.state is JobState.COMPLETED and job.attempts == 2
        assert worker.stats()["timed_out"] == 1


def test_the_workers_default_timeout_applies_to_jobs_without_their_own(zk_client) -> None:
    with job_queue(zk_client, retry=RetryPolicy(max_attempts=1)) as jq:
        jq.add(1, job_id="slow")
        with jq.work(lambda job: time.sleep(5), concurrency=1, timeout=0.3):
            wait_for(lambda: jq.counts()["dead"] == 1, timeout=10)
        assert jq.get("slow").last_error.startswith("JobTimeoutError")


def test_any_exit_of_a_sync_handler_fails_only_its_attempt(zk_client) -> None:
    """A BaseException (asyncio.CancelledError, KeyboardInterrupt) out of a sync handler fails that attempt like an
    exception does; the worker goes on with the next job."""
    def handler(job):
        if job.attempts == 1 and job.params == "cancel":
            raise asyncio.CancelledError("from a sync handler")
        if job.attempts == 1 and job.params == "interrupt":
            raise KeyboardInterrupt
        return job.params

    with job_queue(zk_client) as jq:
        jq.add_all([("a", "cancel"), ("b", "interrupt"), ("c", "plain")])
        with jq.work(handler, concurrency=1):
            wait_for(lambda: completed(jq, 3), timeout=10)
        assert {i: (jq.get(i).attempts, jq.get(i).result) for i in "abc"} == {
            "a": (2, "cancel"), "b": (2, "interrupt"), "c": (1, "plain")}
        assert jq.get("a").errors[0].error.startswith("CancelledError")
        assert jq.get("b").errors[0].error.startswith("KeyboardInterrupt")


def test_ended_attempts_do_not_pile_up_until_their_deadlines(zk_client) -> None:
    """Jobs with a long timeout that end at once: the worker does not keep every ended attempt (its job and
    result) until its deadline passes; it keeps about as many as run at once."""
    with job_queue(zk_client) as jq:
        jq.add_all(((f"t{i}", i) for i in range(400)), timeout=300)
        with jq.work(lambda job: job.params, concurrency=4) as worker:
            wait_for(lambda: completed(jq, 400), timeout=60)
            kept = len(worker._deadlines)  # noqa: SLF001 - the state this test is about
        assert kept <= 2 * 4 + 64 + 1, kept


def test_coroutine_handlers_run_on_an_event_loop_and_are_cancelled_past_their_timeout(zk_client) -> None:
    async def handler(job):
        await asyncio.sleep(5 if job.params == "slow" and job.attempts == 1 else 0.01)
        return job.params

    with job_queue(zk_client) as jq:
        jq.add("slow", job_id="s", timeout=0.3)
        jq.add_all((f"f{i}", i) for i in range(20))
        with jq.work(handler, concurrency=10):
            wait_for(lambda: completed(jq, 21), timeout=15)
        assert jq.get("s").attempts == 2 and jq.get("s").errors[0].error.startswith("JobTimeoutError")
        assert all(jq.get(f"f{i}").result == i for i in range(20))


def test_process_pool_runs_crashes_and_kills_each_attempt_counted_once(zk_client) -> None:
    with job_queue(zk_client) as jq:
        jq.add_all((f"sq{i}", {"n": i}) for i in range(6))
        with jq.work(square, concurrency=2, pool="process"):
            wait_for(lambda: completed(jq, 6), timeout=60)
        assert [jq.get(f"sq{i}").result for i in range(6)] == [i * i for i in range(6)]
        jq.add(None, job_id="crash")
        with jq.work(crash_first, concurrency=2, pool="process"):
            wait_for(lambda: completed(jq, 7), timeout=60)
        crash = jq.get("crash")
        assert crash.result == "survived" and crash.attempts == 2
        assert crash.errors[0].error.startswith(WorkerLostError.__name__)
        jq.add(None, job_id="hang", timeout=1.0)
        t0 = time.monotonic()
        with jq.work(hang_first, concurrency=1, pool="process"):
            wait_for(lambda: completed(jq, 8), timeout=60)
        hang = jq.get("hang")
        assert hang.result == "quick" and hang.attempts == 2 and time.monotonic() - t0 < 30
        assert hang.errors[0].error.startswith(JobTimeoutError.__name__)


def test_max_jobs_stops_the_worker_after_that_many(zk_client) -> None:
    with job_queue(zk_client) as jq:
        jq.add_all((f"m{i}", i) for i in range(10))
        worker = jq.work(lambda job: job.params, concurrency=2, max_jobs=4)
        wait_for(lambda: worker.stopping, timeout=10)
        worker.stop()
        assert worker.stats()["started"] == 4 and jq.counts()["completed"] == 4
        assert sorted(jq.get(f"m{i}").attempts for i in range(10)) == [0] * 6 + [1] * 4


def test_bad_worker_options_raise_typed_errors(zk_client) -> None:
    with job_queue(zk_client) as jq:
        for kwargs in ({"concurrency": 0}, {"prefetch": -1}, {"max_jobs": 0}, {"pool": "fork"},
                       {"timeout": -1}):
            with pytest.raises(ConfigurationError):
                jq.work(print, **kwargs)
        with pytest.raises(ConfigurationError):
            jq.work("not callable")


@pytest.mark.parametrize("committed", [True, False])
def test_a_start_whose_reply_was_lost_runs_only_if_its_count_committed(zk_client, committed, monkeypatch) -> None:
    """The reply of the multi that counts the attempts of starting jobs is lost (a ConnectionLoss raised after the
    multi committed, or instead of sending it): the records are read again; the jobs whose count is there start,
    the others go back with no attempt counted. Never an attempt run uncounted, never one counted and lost."""
    from kazoo.exceptions import ConnectionLoss

    from zkqueue.jobs import scope

    with job_queue(zk_client) as jq:
        jq.add_all((f"s{i}", i) for i in range(3))
        helds = jq.claim_many(3, timeout=5, count=False)
        assert len(helds) == 3 and not any(h.counted for h in helds)
        commit = scope.commit_while_held

        def lost_reply(nodes, ops, checks=()):
            if committed:
                commit(nodes, ops, checks)
            raise ConnectionLoss("reply lost")

        monkeypatch.setattr(scope, "commit_while_held", lost_reply)
        started = jq.start_many(helds)
        monkeypatch.undo()
        if committed:
            assert [h.record.id for h in started] == ["s0", "s1", "s2"] and all(h.counted for h in started)
            assert [jq.get(f"s{i}").attempts for i in range(3)] == [1, 1, 1]
            for h in started:
                h.finish(jq.outcomes.success(h.claimed, "ran"))
            assert [jq.get(f"s{i}").result for i in range(3)] == ["ran"] * 3
        else:
            assert started == []
            assert [(jq.get(f"s{i}").state, jq.get(f"s{i}").attempts) for i in range(3)] == [(JobState.QUEUED, 0)] * 3
            with jq.work(lambda job: job.params, concurrency=3):  # given back: claimable again at once
                wait_for(lambda: completed(jq, 3))
            assert [jq.get(f"s{i}").attempts for i in range(3)] == [1, 1, 1]


def test_an_idle_worker_sends_no_request_while_nothing_changes(zk_client) -> None:
    """A worker with nothing to do waits for the queue node's watch: no request at all goes to ZooKeeper (it used
    to list the queue's lock path, to learn its peers, every half second of each empty claim)."""
    sent: list[str] = []

    class Requests(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("Sending request"):
                sent.append(message[:120])

    kazoo_log = logging.getLogger("kazoo.client")
    handler, level = Requests(), kazoo_log.level
    with job_queue(zk_client) as jq:
        jq.add_all([("j0", 0)])
        with jq.work(lambda job: job.params, concurrency=2):
            wait_for(lambda: completed(jq, 1))
            time.sleep(1.0)  # the end's commit and the worker's first empty claims settle
            kazoo_log.addHandler(handler)
            kazoo_log.setLevel(logging.DEBUG)
            try:
                time.sleep(3.0)  # six claim waits of 0.5 s; pings are logged below DEBUG
            finally:
                kazoo_log.removeHandler(handler)
                kazoo_log.setLevel(level)
            assert sent == [], sent
            jq.add_all([("j1", 1)])  # and it still sees new work at once
            wait_for(lambda: completed(jq, 2), timeout=10)


def test_attempts_are_counted_ahead_only_for_jobs_that_keep_an_attempt_after(zk_client) -> None:
    """``start_ahead`` counts attempts before slots free, but never a job's last attempt: a worker that died with
    it counted would leave the job dead without having run it."""
    from zkqueue.runtime import Route, ThreadDriver, Worker

    gates = {"b": threading.Event(), "r1": threading.Event()}
    running = {name: threading.Event() for name in gates}

    def handler(job):
        if job.params in gates:
            running[job.params].set()
            assert gates[job.params].wait(30)
        return job.params

    driver = ThreadDriver("ahead-test")
    with job_queue(zk_client) as jq:
        worker = Worker([jq], lambda _q, _job: Route(driver, handler), [driver], concurrency=1, prefetch=16,
                        start_ahead=8).start()
        try:
            jq.add_all([("w0", 0), ("w1", 1)])  # short runs first: the worker counts ahead for short handlers only
            wait_for(lambda: completed(jq, 2))
            jq.add("b", job_id="b")
            wait_for(running["b"].is_set)
            jq.add("r1", job_id="r1")  # r1 blocks too, so the jobs after it stay held while it runs
            jq.add_all([(f"r{i}", i) for i in (2, 3)])  # the queue's 3 attempts: one to spare
            for i in (1, 2, 3):
                jq.add(i, job_id=f"o{i}", max_attempts=1)  # one attempt: never counted ahead
            wait_for(lambda: worker.stats()["held"] == 6)
            gates["b"].set()  # b ends; r1 starts, with r2 and r3 counted ahead, and no o
            wait_for(running["r1"].is_set)
            wait_for(lambda: jq.get("r3").attempts == 1)
            assert jq.get("r2").attempts == 1
            assert [jq.get(f"o{i}").attempts for i in (1, 2, 3)] == [0, 0, 0]
            gates["r1"].set()
            wait_for(lambda: completed(jq, 9))
            assert {j: jq.get(j).attempts for j in ("b", "r1", "r2", "r3", "o1", "o2", "o3")} == dict.fromkeys(
                ("b", "r1", "r2", "r3", "o1", "o2", "o3"), 1)
        finally:
            for gate in gates.values():
                gate.set()
            worker.stop()  # closes its driver
