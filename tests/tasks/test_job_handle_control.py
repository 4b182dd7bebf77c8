"""JobHandle's job controls on a real ZooKeeper: ``progress`` (what the handler reported, read through the queue's
get), ``cancel()`` of a waiting and of a running job, ``state`` CANCELLED, and ``result()`` raising
JobCancelledError (a JobFailedError, as for a dead job); ``app.job(id)`` finds a cancelled job."""

from __future__ import annotations

import threading
import time

import pytest

from zkqueue import App, JobFailedError, JobState, RetryPolicy
from zkqueue.errors import JobCancelledError
from zkqueue.tasks.handle import JobHandle

FAST = RetryPolicy(max_attempts=3, backoff=0.0, jitter=False)


@pytest.fixture
def app(zk_client):
    with App(client=zk_client, retry=FAST) as app:
        yield app


def test_cancel_a_waiting_job_through_its_handle(app) -> None:
    jq = app.queue("default")
    handle = JobHandle(jq, "default", jq.add({"n": 1}, job_id="h-1"))
    assert handle.state is JobState.QUEUED and handle.progress is None
    assert handle.cancel() is True
    assert handle.state is JobState.CANCELLED
    with pytest.raises(JobCancelledError) as cancelled:
        handle.result(timeout=5)
    assert isinstance(cancelled.value, JobFailedError) and cancelled.value.job.state is JobState.CANCELLED
    assert handle.wait(timeout=0).state is JobState.CANCELLED
    assert handle.cancel() is False  # finished
    found = app.job("h-1")  # found in its cancelled/ record, across the app's queues
    assert found.queue == "default" and found.state is JobState.CANCELLED
    assert JobHandle(jq, "default", "never-added").cancel() is False
    assert JobHandle(jq, "default", "never-added").progress is None


def test_progress_and_cancel_of_a_running_job(app) -> None:
    jq = app.queue("default")
    started = threading.Event()

    def handler(job):
        job.report_progress(40)
        started.set()
        deadline = time.monotonic() + 30
        while not job.cancel_requested and time.monotonic() < deadline:
            time.sleep(0.01)
        return "ignored: the attempt ends CANCELLED"

    handle = JobHandle(jq, "default", jq.add("x", job_id="h-run"))
    jq.work(handler)
    assert started.wait(10)
    deadline = time.monotonic() + 10
    while handle.progress is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handle.progress == 40 and handle.state is JobState.ACTIVE
    assert handle.cancel() is True
    with pytest.raises(JobCancelledError):
        handle.result(timeout=20)
    assert handle.state is JobState.CANCELLED and handle.get().result is None
    assert handle.progress == 40  # kept in the cancelled record
