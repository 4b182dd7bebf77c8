"""Flow.work on the worker runtime (zkqueue.runtime), on a real ZooKeeper: a hung step past its timeout fails its
attempt through the step's policy (retried, or dead and the flow job told), its late result refused; warm and cold
stops of a flow worker, with every step job accounted for."""

from __future__ import annotations

import inspect
import threading
import time

import pytest

from zkqueue.errors import ConfigurationError
from zkqueue.flows import Flow, FlowState, FlowWorker
from zkqueue.jobs import JobState, RetryPolicy
from zkqueue.jobs.queue import DEFAULT_STOP_TIMEOUT
from zkqueue.server.testing import wait_for

PATH = "/flows/worker"
FAST = RetryPolicy(max_attempts=3, backoff=0.05, max_backoff=0.2, jitter=False)


def refusals(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for r in caplog.records if r.name == "zkqueue.runtime.attempt" and "refused" in r.getMessage())


@pytest.mark.parametrize("limit", [None, 1], ids=["unlimited", "max_concurrency=1"])
def test_a_hung_step_past_its_timeout_is_retried_and_its_late_result_is_refused(zk_client, caplog,
                                                                                 limit) -> None:
    """The first attempt hangs on its thread: at the timeout the attempt fails (JobTimeoutError in the flow job's
    errors), a new thread runs the retry and the flow job completes; the hung handler's result, when it comes, is
    refused and the flow record stays as the retry left it. With max_concurrency=1 the retry needs the one lease
    of the step's semaphore: the timed-out attempt let it go."""
    release, late = threading.Event(), threading.Event()
    after: list[str] = []

    def slow(job):  # noqa: ANN001, ANN202
        if job.attempt == 1:
            release.wait(30)
            job.data["stale"] = True
            late.set()
            return "stale"
        return "fresh"

    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("slow", slow, next="after", max_concurrency=limit)
    flow.step("after", lambda job: after.append(job.results["slow"]) or "told")
    with flow:
        flow.add({}, job_id="hung")
        t0 = time.monotonic()
        with flow.work(concurrency=1, timeout=0.5) as worker:
            job = flow.wait("hung", timeout=20)
            took = time.monotonic() - t0
            release.set()
            wait_for(late.is_set)
            wait_for(lambda: refusals(caplog) == 1)
        assert took < 10
        assert job.state is FlowState.COMPLETED and job.results == {"slow": "fresh", "after": "told"}
        assert [(h.step, h.status, h.attempts) for h in job.history] == [("slow", "done", 2), ("after", "done", 1)]
        assert [(e.step, e.attempt) for e in job.errors] == [("slow", 1)]
        assert job.errors[0].error.startswith("JobTimeoutError")
        again = flow.get("hung")
        assert again.history == job.history and again.results == job.results and again.data == {}
        assert after == ["fresh"]
        stats = worker.stats()
        assert stats["timed_out"] == 1 and stats["retried"] == 1 and stats["completed"] == 2, stats
        assert worker.handled == 3 and worker.errors == 0
        assert all(c == {"queued": 0, "active": 0, "retrying": 0} for c in flow.counts()["steps"].values())


def test_a_step_timed_out_on_its_last_attempt_is_dead_and_the_flow_job_fails(zk_client) -> None:
    """A timeout is a failure like any other: on the step's last attempt the step is dead and hands off as a
    failure, so the flow job ends FAILED (not left RUNNING with its step gone to the job layer's dead letters)."""
    release = threading.Event()
    flow = Flow(zk_client, PATH, retry=RetryPolicy(max_attempts=2, backoff=0.05, jitter=False))
    flow.step("stuck", lambda job: release.wait(30), next="never")
    flow.step("never", lambda job: "no")
    try:
        with flow:
            flow.add({}, job_id="stuck")
            with flow.work(timeout=0.3) as worker:
                job = flow.wait("stuck", timeout=20)
                release.set()  # the two hung handlers return now; their results are refused
            assert job.state is FlowState.FAILED and job.steps == {"stuck": "failed"} and job.pending == []
            assert [(e.step, e.attempt) for e in job.errors] == [("stuck", 1), ("stuck", 2)]
            assert all(e.error.startswith("JobTimeoutError") for e in job.errors)
            assert [(h.step, h.status, h.attempts) for h in job.history] == [("stuck", "failed", 2)]
            assert worker.stats()["timed_out"] == 2 and worker.stats()["dead"] == 1
            assert flow.queue("stuck").counts()["dead"] == 0  # the hand-off took it, not the job layer
    finally:
        release.set()


def test_a_warm_stop_lets_running_steps_hand_off_and_gives_back_the_held_ones(zk_client) -> None:
    """stop(timeout) with handlers that finish in time: they hand off (their next steps queued), the step jobs
    held ahead go back with no attempt counted, and nothing new starts; a later worker runs everything once."""
    go = threading.Event()
    seconds: list[str] = []

    def first(job):  # noqa: ANN001, ANN202
        go.wait(30)
        return job.params

    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("first", first, next="second")
    flow.step("second", lambda job: seconds.append(job.id) or job.results["first"] * 10)
    with flow:
        ids = [flow.add(i, job_id=f"w{i}") for i in range(5)]
        worker = flow.work(concurrency=2, prefetch=2)
        wait_for(lambda: worker.in_flight == 2 and worker.stats()["held"] == 2)
        running = set(worker.running_ids())
        threading.Timer(0.3, go.set).start()
        assert worker.stop(timeout=10) is True
        assert seconds == []
        for job_id in ids:
            job, step = flow.get(job_id), flow.queue("first").get(job_id)
            if job_id in running:
                assert job.pending == ["second"] and [(h.step, h.attempts) for h in job.history] == [("first", 1)]
                assert step is None  # handed off: its job record went in the multi
                assert flow.queue("second").get(job_id).attempts == 0
            else:
                assert job.pending == ["first"] and job.history == []
                assert step.state is JobState.QUEUED and step.attempts == 0
        stats = worker.stats()
        assert stats["completed"] == 2 and stats["returned"] >= 2 and stats["given_back"] == 0, stats
        with flow.work(concurrency=2):
            jobs = [flow.wait(job_id, timeout=30) for job_id in ids]
    assert [j.results for j in jobs] == [{"first": i, "second": i * 10} for i in range(5)]
    assert all([h.attempts for h in j.history] == [1, 1] for j in jobs)
    assert sorted(seconds) == sorted(ids)


def test_a_cold_stop_gives_running_steps_back_and_refuses_their_late_results(zk_client, caplog) -> None:
    """stop(timeout) with handlers that do not finish in time: they are given back with their attempt counted
    (the flow records untouched), the held one uncounted; the hung handlers' results are refused when they come,
    and a later worker runs those steps again (attempt 2)."""
    go = threading.Event()
    entered, late = threading.Semaphore(0), threading.Semaphore(0)

    def first(job):  # noqa: ANN001, ANN202
        if not go.is_set():  # the first worker's handlers hang until after its stop
            entered.release()
            go.wait(30)
            late.release()
            return "stale"
        return "fresh"

    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("first", first, next="second")
    flow.step("second", lambda job: job.results["first"])
    with flow:
        ids = [flow.add(i, job_id=f"c{i}") for i in range(3)]
        worker = flow.work(concurrency=2, prefetch=1)
        for _ in range(2):  # both handlers are running (not only started by the runtime)
            assert entered.acquire(timeout=20)
        wait_for(lambda: worker.stats()["held"] == 1)
        running = set(worker.running_ids())
        assert len(running) == 2
        t0 = time.monotonic()
        assert worker.stop(timeout=0.3) is False
        assert time.monotonic() - t0 < 5
        stats = worker.stats()
        assert stats["given_back"] == 2 and stats["returned"] == 1 and stats["in_flight"] == 0, stats
        for job_id in ids:
            step = flow.queue("first").get(job_id)
            assert flow.get(job_id).pending == ["first"] and flow.get(job_id).history == []
            assert step.attempts == (1 if job_id in running else 0) and step.state is not JobState.COMPLETED
        go.set()
        for _ in running:
            assert late.acquire(timeout=10)
        wait_for(lambda: refusals(caplog) == 2)
        assert all(flow.get(job_id).history == [] for job_id in ids)
        with flow.work(concurrency=2):
            jobs = {job_id: flow.wait(job_id, timeout=30) for job_id in ids}
    for job_id, job in jobs.items():
        assert job.state is FlowState.COMPLETED and job.results == {"first": "fresh", "second": "fresh"}
        assert [(h.step, h.attempts) for h in job.history] == [("first", 2 if job_id in running else 1),
                                                                ("second", 1)]


def test_bad_worker_options_raise_typed_errors_and_stop_waits_as_long_as_the_job_layer(zk_client) -> None:
    flow = Flow(zk_client, PATH)
    flow.step("only", lambda job: None)
    with flow:
        for bad in ({"concurrency": 0}, {"concurrency": True}, {"timeout": -1}, {"timeout": "1"}, {"prefetch": -1}):
            with pytest.raises(ConfigurationError):
                flow.work(**bad)
    for stop in (FlowWorker.stop, Flow.close):
        assert inspect.signature(stop).parameters["timeout"].default == DEFAULT_STOP_TIMEOUT
