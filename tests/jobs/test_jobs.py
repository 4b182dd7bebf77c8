"""zkqueue.jobs on a real ZooKeeper: distinct ids, attempts counted at claim, retries with backoff, dead letters,
results, scoped takes, workers, crashes, redrive and purge."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from zkqueue.errors import ConfigurationError, QueueNotStartedError
from zkqueue.jobs import JobQueue, JobState, Keep, RetryPolicy
from zkqueue.server.testing import expire_session, lock_nodes, wait_for

PATH = "/jobs/mail"
FAST = RetryPolicy(max_attempts=3, backoff=0.2, max_backoff=1.0, jitter=False)


def job_queue(client, **kwargs) -> JobQueue:
    kwargs.setdefault("retry", FAST)
    return JobQueue(client, PATH, **kwargs)


def finished(jq: JobQueue, n: int) -> bool:
    counts = jq.counts()
    return counts["completed"] + counts["dead"] >= n


def test_ids_are_distinct_while_queued_active_or_retrying(zk_client) -> None:
    with job_queue(zk_client) as jq:
        assert jq.add({"to": "a"}, job_id="mail-1") == "mail-1"
        assert jq.add({"to": "b"}, job_id="mail-1") is None  # queued
        assert jq.get("mail-1").params == {"to": "a"}  # the first add is left as it is
        with jq.take(max_jobs=1, timeout=5) as jobs:
            assert [j.id for j in jobs] == ["mail-1"] and jobs[0].state is JobState.ACTIVE
            assert jq.add({"to": "c"}, job_id="mail-1") is None  # active
            jobs[0].fail(RuntimeError("try again"))
        assert jq.get("mail-1").state is JobState.RETRYING
        assert jq.add({"to": "d"}, job_id="mail-1") is None  # retrying
        wait_for(lambda: jq.counts()["retrying"] == 1)
        with jq.take(max_jobs=1, timeout=5) as jobs:
            assert jobs[0].attempts == 2
            jobs[0].complete("sent")
        job = jq.get("mail-1")
        assert job.state is JobState.COMPLETED and job.result == "sent" and job.attempts == 2
        assert job.last_error == "RuntimeError: try again"
        assert jq.add({"to": "e"}, job_id="mail-1") == "mail-1"  # finished ids may run again
        assert jq.get("mail-1").state is JobState.QUEUED and jq.get("mail-1").params == {"to": "e"}
        assert jq.get("never-added") is None


def test_add_all_reports_duplicates(zk_client) -> None:
    with job_queue(zk_client) as jq:
        assert jq.add("x", job_id="a") == "a"
        assert sorted(jq.add_all([("a", 1), ("b", 2), ("c", 3), ("b", 4)])) == ["a", "b"]
        assert jq.counts()["queued"] == 3
        assert jq.get("b").params == 2


@pytest.mark.parametrize("job_id", ["with/slash", "with|bar", ".", "..", "ünïcode ✓", "%41"])
def test_any_id_works(zk_client, job_id) -> None:
    with job_queue(zk_client) as jq:
        assert jq.add(1, job_id=job_id) == job_id
        with jq.take(timeout=5) as jobs:
            assert jobs[0].id == job_id
        assert jq.get(job_id).state is JobState.COMPLETED


def test_a_poison_job_is_dead_after_max_attempts_with_backoff_between(zk_client) -> None:
    runs: list[float] = []

    def handler(job):
        runs.append(time.monotonic())
        raise ValueError(f"bad input {job.params}")

    policy = RetryPolicy(max_attempts=4, backoff=0.3, max_backoff=1.0, jitter=False)
    with job_queue(zk_client, retry=policy) as jq:
        jq.add(7, job_id="poison")
        worker = jq.work(handler)
        wait_for(lambda: jq.counts()["dead"] == 1, timeout=30)
        worker.stop()
        assert len(runs) == 4
        gaps = [b - a for a, b in zip(runs, runs[1:])]
        assert all(gap >= wait * 0.95 for gap, wait in zip(gaps, [0.3, 0.6, 1.0])), gaps  # never early
        (dead,) = jq.dead_letters()
        assert dead.id == "poison" and dead.attempts == 4 and dead.state is JobState.DEAD
        assert [e.attempt for e in dead.errors] == [1, 2, 3, 4] and "bad input 7" in dead.last_error
        assert jq.counts() == {"queued": 0, "active": 0, "retrying": 0, "scheduled": 0, "dead": 1, "completed": 0,
                                "cancelled": 0}


def test_give_up_on_sends_to_the_dead_letters_at_once(zk_client) -> None:
    policy = RetryPolicy(max_attempts=5, backoff=0.1, give_up_on=(KeyError,))
    with job_queue(zk_client, retry=policy) as jq:
        jq.add(1, job_id="k")
        with jq.work(lambda job: {}["missing"]):
            wait_for(lambda: jq.counts()["dead"] == 1)
        assert jq.get("k").attempts == 1


def test_worker_stores_results_and_runs_concurrently(zk_client) -> None:
    running: list[int] = []
    peak = [0]
    lock = threading.Lock()

    def handler(job):
        with lock:
            running.append(1)
            peak[0] = max(peak[0], len(running))
        time.sleep(0.05)
        with lock:
            running.pop()
        return job.params * 2

    with job_queue(zk_client) as jq:
        assert jq.add_all((f"j{i}", i) for i in range(40)) == []
        with jq.work(handler, concurrency=4):
            wait_for(lambda: jq.counts()["completed"] == 40, timeout=30)
        assert {j.id: j.result for j in jq.completed()} == {f"j{i}": 2 * i for i in range(40)}
        assert peak[0] > 1
        wait_for(lambda: lock_nodes(zk_client, jq.paths.locks) == [])


def test_scoped_take_completes_all_or_fails_all(zk_client) -> None:
    with job_queue(zk_client) as jq:
        jq.add_all([("a", 1), ("b", 2), ("c", 3)])
        with jq.take(max_jobs=2, timeout=5) as jobs:
            assert [j.id for j in jobs] == ["a", "b"]
            assert jq.counts()["active"] == 2
        assert jq.counts()["completed"] == 2
        with pytest.raises(RuntimeError, match="scope failed"):
            with jq.take(max_jobs=5, timeout=5) as jobs:
                assert [j.id for j in jobs] == ["c"]
                raise RuntimeError("scope failed")
        job = jq.get("c")
        assert job.state is JobState.RETRYING and job.last_error == "RuntimeError: scope failed"
        with jq.take(max_jobs=1, timeout=0.05) as jobs:
            assert jobs == []  # due 0.2 s after the failure: never early


def test_take_times_out_empty(zk_client) -> None:
    with job_queue(zk_client) as jq:
        started = time.monotonic()
        with jq.take(max_jobs=3, timeout=0.5) as jobs:
            assert jobs == []
        assert time.monotonic() - started >= 0.45


def test_delay_and_priority(zk_client) -> None:
    with job_queue(zk_client) as jq:
        jq.add("later", job_id="later", delay=0.6)
        jq.add("low", job_id="low", priority=5)
        jq.add("high", job_id="high", priority=-5)
        with jq.take(max_jobs=5, timeout=5) as jobs:
            assert [j.id for j in jobs] == ["high", "low"]
        started = time.monotonic()
        with jq.take(max_jobs=5, timeout=5) as jobs:
            assert [j.id for j in jobs] == ["later"]
        assert time.monotonic() - started > 0.3


def test_redrive_and_purge(zk_client) -> None:
    once = RetryPolicy(max_attempts=1)
    with job_queue(zk_client, retry=once) as jq:
        jq.add_all([("d1", 1), ("d2", 2), ("d3", 3)])
        with pytest.raises(ValueError):
            with jq.take(max_jobs=3, timeout=5):
                raise ValueError("boom")
        assert jq.counts()["dead"] == 3
        assert jq.retry_dead(["d1"]) == 1
        assert jq.get("d1").state is JobState.QUEUED and jq.get("d1").attempts == 0
        assert len(jq.get("d1").errors) == 1  # the history stays
        assert jq.purge_dead(["d2"]) == 1 and jq.get("d2") is None
        assert jq.retry_dead() == 1  # d3
        assert jq.counts() == {"queued": 2, "active": 0, "retrying": 0, "scheduled": 0, "dead": 0, "completed": 0,
                                "cancelled": 0}
        with jq.take(max_jobs=5, timeout=5) as jobs:
            assert sorted(j.id for j in jobs) == ["d1", "d3"]
        assert jq.purge_dead() == 0


def test_an_expired_workers_completion_is_refused(zk_client_factory) -> None:
    a, observer = zk_client_factory(), zk_client_factory()
    started, go = threading.Event(), threading.Event()

    def handler(job):
        started.set()
        go.wait(30)
        return "stale"

    with job_queue(observer) as producer:
        producer.add(1, job_id="x")
    with job_queue(a) as jq:
        with jq.work(handler):
            wait_for(started.is_set)
            expire_session(a)
            go.set()
            wait_for(lambda: jq._engine.stats().lock_lost > 0, timeout=20)  # the engine refused the stale ack
    with job_queue(observer) as jq:
        job = jq.get("x")
        assert job.state is JobState.ACTIVE and job.result is None  # not completed by the expired worker
        with jq.take(timeout=10) as jobs:
            assert jobs[0].id == "x" and jobs[0].attempts == 2
            jobs[0].complete("fresh")
        assert jq.get("x").result == "fresh"


CRASHING_WORKER = textwrap.dedent(
    """
    import os, signal, sys
    from kazoo.client import KazooClient
    from zkqueue.jobs import JobQueue, RetryPolicy

    hosts, path, how = sys.argv[1:4]
    client = KazooClient(hosts=hosts, timeout=2.0)
    client.start()
    jq = JobQueue(client, path, retry=RetryPolicy(max_attempts=3, backoff=0.1, jitter=False))
    jq.start()

    def handler(job):
        print("RUN", job.id, job.attempts, flush=True)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(17)

    jq.work(handler)
    import threading; threading.Event().wait(60)
    """
)


def run_crashing_worker(hosts: str, how: str) -> str:
    proc = subprocess.run([sys.executable, "-c", CRASHING_WORKER, hosts, PATH, how], capture_output=True, text=True,
                          timeout=90)
    assert proc.returncode in (17, -9), proc.stderr
    return proc.stdout


@pytest.mark.faults
def test_a_worker_killed_mid_job_costs_an_attempt_and_another_finishes_it(zk_client, zk_hosts) -> None:
    with job_queue(zk_client) as jq:
        jq.add("payload", job_id="crash")
        assert "RUN crash 1" in run_crashing_worker(zk_hosts, "kill")
        with jq.work(lambda job: f"done after {job.attempts}"):
            wait_for(lambda: jq.counts()["completed"] == 1, timeout=30)
        job = jq.get("crash")
        assert job.result == "done after 2" and job.attempts == 2


@pytest.mark.faults
def test_a_job_that_kills_every_worker_is_dead_after_max_attempts(zk_client, zk_hosts) -> None:
    with job_queue(zk_client) as jq:
        jq.add("poison", job_id="exit")
        runs = [run_crashing_worker(zk_hosts, "exit") for _ in range(3)]
        assert [f"RUN exit {n}" in out for n, out in zip((1, 2, 3), runs)] == [True] * 3
        # the fourth claim finds the attempts used up: dead, never run again
        with jq.work(lambda job: pytest.fail("a job out of attempts ran")):
            wait_for(lambda: jq.counts()["dead"] == 1, timeout=30)
        (dead,) = jq.dead_letters()
        assert dead.attempts == 3 and "worker lost" in dead.last_error


def test_the_reaper_keeps_the_newest_finished_records(zk_client) -> None:
    with job_queue(zk_client, keep_completed=Keep(count=5, age=None)) as jq:
        jq.add_all((f"r{i}", i) for i in range(12))
        for _ in range(12):
            with jq.take(timeout=5):
                pass
        assert jq.counts()["completed"] == 12
        assert jq.reap() == 7
        assert sorted(j.id for j in jq.completed()) == sorted(f"r{i}" for i in range(7, 12))
        assert jq.get("r0") is None


def test_bad_arguments_and_lifecycle(zk_client) -> None:
    jq = job_queue(zk_client)
    with pytest.raises(QueueNotStartedError):
        jq.add(1)
    with jq:
        with pytest.raises(ConfigurationError):
            jq.add(1, job_id="")
        with pytest.raises(TypeError):
            jq.add(1, job_id=5)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError):
            jq.work(print, concurrency=0)
        with pytest.raises(ConfigurationError):
            RetryPolicy(max_attempts=0)
        assert isinstance(jq.add(1), str)  # a generated id


def test_undecodable_params_end_the_job_dead_at_once_and_it_can_still_be_looked_at(zk_client) -> None:
    """A job whose params its queue's serializer cannot read (added with another serializer) is not retried: its
    first attempt sends it to the dead letters with a clear error; get() and the listings show it, params raw."""
    from zkqueue.errors import JobDeadError, UndecodableParamsError
    from zkqueue.formats.serializers import StrSerializer

    with JobQueue(zk_client, PATH, serializer=StrSerializer()) as other:  # params as plain text, not JSON
        assert other.add("not json {", "odd") == "odd"
    ran: list[str] = []
    with JobQueue(zk_client, PATH, retry=RetryPolicy(max_attempts=5, backoff=0.0, jitter=False)) as jq:
        assert jq.add({"n": 1}, "fine") == "fine"
        worker = jq.work(lambda job: ran.append(job.id), concurrency=2)
        try:
            wait_for(lambda: jq.counts()["dead"] == 1 and jq.counts()["completed"] == 1, timeout=20)
        finally:
            worker.stop()
        dead = jq.get("odd")
        assert dead is not None and dead.state is JobState.DEAD and dead.attempts == 1  # not retried
        assert dead.params == b"not json {"  # the raw bytes, not an error
        assert "UndecodableParamsError" in dead.last_error and "params cannot be read" in dead.last_error
        assert [j.id for j in jq.dead_letters()] == ["odd"] and ran == ["fine"]
        with pytest.raises(JobDeadError) as dead_error:  # a result handle's wait says so too
            jq.wait_result("odd", timeout=5)
        assert UndecodableParamsError.__name__ in str(dead_error.value.job.last_error)


def test_ctrl_c_in_a_take_gives_the_jobs_back_uncounted_and_decided_ones_are_committed(zk_client) -> None:
    with JobQueue(zk_client, PATH, retry=RetryPolicy(max_attempts=1)) as jq:
        assert jq.add_all([("x", 1), ("y", 2)]) == []
        with pytest.raises(KeyboardInterrupt):
            with jq.take(max_jobs=2, timeout=5) as jobs:
                assert sorted(j.id for j in jobs) == ["x", "y"]
                next(j for j in jobs if j.id == "x").complete("done")
                raise KeyboardInterrupt  # Ctrl-C while the jobs are held: not their failure
        assert jq.get("x").state is JobState.COMPLETED and jq.get("x").result == "done"
        y = jq.get("y")
        assert y.state is JobState.QUEUED and y.attempts == 0 and y.errors == []  # one attempt allowed: not used
        with jq.take(timeout=5) as jobs:
            assert [(j.id, j.attempts) for j in jobs] == [("y", 1)]
        assert jq.get("y").state is JobState.COMPLETED


def test_a_take_scope_that_fails_to_enter_gives_back_what_it_claimed(zk_client, monkeypatch) -> None:
    from kazoo.exceptions import ConnectionLoss

    from zkqueue.engine.queue import DistributedQueue
    from zkqueue.formats.serializers import StrSerializer

    with JobQueue(zk_client, PATH, serializer=StrSerializer()) as other:
        assert other.add("not json {", "odd") == "odd"
    with JobQueue(zk_client, PATH, retry=RetryPolicy(max_attempts=5)) as jq:
        assert jq.add({"n": 1}, "fine") == "fine"
        real = DistributedQueue.complete_nodes
        calls: list[int] = []

        def fail_once(self, outcomes):  # the dead letter of the unreadable job cannot be committed this once
            calls.append(len(outcomes))
            if len(calls) == 1:
                raise ConnectionLoss()
            return real(self, outcomes)

        monkeypatch.setattr(DistributedQueue, "complete_nodes", fail_once)
        with pytest.raises(ConnectionLoss):
            with jq.take(max_jobs=2, timeout=5):
                pytest.fail("the scope must not be entered")
        assert calls == [1, 2]  # the failed dead letter, then the give-back of both jobs the scope held
        for job_id in ("fine", "odd"):
            job = jq.get(job_id)
            assert job.state is JobState.QUEUED and job.attempts == 0, job  # given back, attempt uncounted
        assert jq.counts()["active"] == 0
        monkeypatch.setattr(DistributedQueue, "complete_nodes", real)
        with jq.take(max_jobs=2, timeout=5) as jobs:  # the odd one goes to the dead letters now
            assert [j.id for j in jobs] == ["fine"]
        assert jq.get("odd").state is JobState.DEAD


def test_a_take_sends_a_job_with_undecodable_params_to_the_dead_letters_and_returns_the_others(zk_client) -> None:
    from zkqueue.formats.serializers import StrSerializer

    with JobQueue(zk_client, PATH, serializer=StrSerializer()) as other:
        assert other.add("not json {", "odd") == "odd"
    with JobQueue(zk_client, PATH, retry=RetryPolicy(max_attempts=5)) as jq:
        assert jq.add({"n": 1}, "fine") == "fine"
        with jq.take(max_jobs=2, timeout=5) as jobs:
            assert [j.id for j in jobs] == ["fine"]
        odd = jq.get("odd")
        assert odd.state is JobState.DEAD and odd.attempts == 1 and odd.params == b"not json {"
        assert "UndecodableParamsError" in odd.last_error
        assert jq.counts()["active"] == 0  # nothing left held
