"""A ProgressConsumer that loses its session while a job runs and is elected again in the same process, on a real
ZooKeeper. The new term reruns the jobs above the stored index, but the worker the ended term started for one of
them still runs: the new term must not start that job again until that run has returned (the same job twice at
once in one process), and a run of the ended term that only waits for a retry must not hold the new term back.

The race is made deterministic: the held first run is released either by the job starting a second time (the bug,
recorded as an overlap) or by the consumer saying its new term waits for the earlier term's runs (the fix), never
by a timer."""

from __future__ import annotations

import threading

import pytest

from zkqueue.progress import JobLog, ProgressConsumer, RetryPolicy
from zkqueue.server.testing import expire_session, on_log, wait_for

pytestmark = pytest.mark.timeout(120)

#: What ProgressConsumer logs (INFO) when a new term waits for runs an earlier term started.
WAITING = "of an earlier term"


def test_a_term_elected_again_does_not_start_a_job_whose_earlier_run_still_runs(zk_client_factory) -> None:
    client = zk_client_factory()
    log = JobLog(client, "/logs/again")
    log.append_many([f"job-{i}".encode() for i in range(1, 21)])
    held = 11
    lock = threading.Lock()
    first_running, release = threading.Event(), threading.Event()
    calls = {"started": 0, "inside": 0}
    overlaps: list[int] = []  # the n-th start of the held job that found an earlier run still inside the worker
    runs: list[int] = []

    def worker(index: int, job: bytes) -> None:
        if index == held:
            with lock:
                calls["started"] += 1
                nth = calls["started"]
                if calls["inside"]:
                    overlaps.append(nth)
                    release.set()  # the bug happened: let the first run end
                calls["inside"] += 1
            try:
                if nth == 1:
                    first_running.set()
                    release.wait(60)  # the session is lost, and the consumer elected again, while it runs
            finally:
                with lock:
                    calls["inside"] -= 1
        with lock:
            runs.append(index)

    # two workers: a second run of the held job would find a free thread at once
    c = ProgressConsumer(client, jobs=log, progress_path="/progress/again", worker=worker, max_processing=2,
                         max_search_ahead=2, progress_interval=0.0, progress_batch=1, identifier="a")
    with on_log("zkqueue.progress.consumer", WAITING, release.set):
        c.start()
        try:
            assert first_running.wait(30)
            wait_for(lambda: c.stored_index == held - 1, timeout=30)  # 12 may have run; 11 holds the index back
            expire_session(client)
            assert c.wait_processed(20, timeout=60), f"stuck at {c.processed_index}"
        finally:
            release.set()
            c.stop()
    assert overlaps == [], f"job {held} started again while its first run still ran"
    stats = c.stats()
    assert stats.elected == 2  # elected again in this process, while the first run was held
    assert calls["started"] == 2  # the new term ran it again, once the first run had returned
    assert sorted(set(runs)) == list(range(1, 21))


def test_a_run_waiting_for_a_retry_does_not_hold_the_next_term_back(zk_client_factory) -> None:
    """The ended term's run of job 6 failed and waits a minute for its retry when the session is lost. It stops
    retrying once its term ended, at once: the new term, which waits for it, starts within seconds."""
    client = zk_client_factory()
    log = JobLog(client, "/logs/retry-wait")
    log.append_many([f"job-{i}".encode() for i in range(1, 11)])
    lock = threading.Lock()
    attempts: dict[int, int] = {}

    def worker(index: int, job: bytes) -> None:
        with lock:
            attempts[index] = attempts.get(index, 0) + 1
            first = attempts[index] == 1
        if index == 6 and first:
            raise RuntimeError("first run of job 6 fails")

    c = ProgressConsumer(client, jobs=log, progress_path="/progress/retry-wait", worker=worker, max_processing=2,
                         max_search_ahead=2, progress_interval=0.0, progress_batch=1, identifier="a",
                         retry=RetryPolicy(max_attempts=5, backoff=60.0, max_backoff=60.0, jitter=False))
    with c:
        wait_for(lambda: c.stats().retries == 1, timeout=30)  # job 6 waits 60 s for its second run
        expire_session(client)
        assert c.wait_processed(10, timeout=20), f"stuck at {c.processed_index}: the new term waited for a backoff"
        assert c.stats().elected == 2
    assert attempts[6] == 2  # the failed run, then the new term's: the ended term's retry never came
