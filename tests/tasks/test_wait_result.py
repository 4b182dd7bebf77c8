"""JobQueue.wait / wait_result (sync, on ZooKeeper watches): the result once the job completes, JobDeadError (a
JobFailedError) when it is dead, WaitTimeoutError (a TimeoutError) on time, JobNotFoundError for an unknown id; a
waiter wakes within moments of the completion, and through a lost session. AsyncJobQueue.wait_result raises the
same WaitTimeoutError."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest

from zkqueue.aio import AsyncJobQueue
from zkqueue.errors import ConfigurationError, JobFailedError, JobNotFoundError, WaitTimeoutError
from zkqueue.jobs import JobQueue, JobState, RetryPolicy
from zkqueue.server.testing import expire_session, thread_is_waiting, wait_for

PATH = "/jobs/waits"
FAST = RetryPolicy(max_attempts=2, backoff=0.0, jitter=False)


class Waiter(threading.Thread):
    """Runs ``call()`` on a thread; keeps what it returned or raised and when it ended."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.value: Any = None
        self.error: BaseException | None = None
        self.ended = 0.0

    def run(self) -> None:
        try:
            self.value = self.call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc
        self.ended = time.monotonic()

    def blocked(self) -> bool:
        """True while the thread sleeps in a threading wait (it looked, found nothing, and waits to be woken)."""
        return thread_is_waiting(self)


def test_wait_result_returns_the_result_within_moments_of_the_completion(zk_client, zk_client_factory) -> None:
    """The waiter is asleep before each job completes; a watch wakes it at once (a poller would take its interval)."""
    with JobQueue(zk_client, PATH, retry=FAST) as jq, JobQueue(zk_client_factory(), PATH) as watcher:
        for n in range(3):
            jq.add({"n": n}, job_id=f"job-{n}")
            waiter = Waiter(lambda n=n: watcher.wait_result(f"job-{n}", timeout=30))
            waiter.start()
            wait_for(waiter.blocked, message="the waiter never went to sleep")
            with jq.take(timeout=5) as jobs:
                jobs[0].complete({"sum": n + 1})
            done = time.monotonic()
            waiter.join(10)
            assert waiter.error is None and waiter.value == {"sum": n + 1}
            assert waiter.ended - done < 0.3, f"woke {waiter.ended - done:.3f}s after the completion"
        assert watcher.wait("job-0", timeout=0).state is JobState.COMPLETED  # finished: no wait at all


def test_wait_result_raises_job_failed_error_for_a_dead_job(zk_client) -> None:
    def handler(job):
        raise ValueError(f"bad input {job.params}")

    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        jq.add(7, job_id="poison")
        jq.work(handler)
        with pytest.raises(JobFailedError) as failed:
            jq.wait_result("poison", timeout=30)
        assert failed.value.job.state is JobState.DEAD and failed.value.job.attempts == 2
        assert failed.value.last_error == "ValueError: bad input 7"
        assert jq.wait("poison", timeout=5).state is JobState.DEAD  # wait() gives the job, whatever its end


def test_wait_result_times_out_with_a_timeout_error_and_knows_unknown_ids(zk_client) -> None:
    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        jq.add(1, job_id="slow")
        started = time.monotonic()
        with pytest.raises(WaitTimeoutError) as timed_out:
            jq.wait_result("slow", timeout=0.5)
        assert isinstance(timed_out.value, TimeoutError) and 0.5 <= time.monotonic() - started < 2.0
        with pytest.raises(JobNotFoundError):
            jq.wait_result("never-added", timeout=5)
        for bad in (-1, "5", True):
            with pytest.raises(ConfigurationError):
                jq.wait_result("slow", timeout=bad)


def test_a_wait_survives_a_lost_session(zk_client, zk_client_factory) -> None:
    """Watches die with their session: the waiter looks again on the new one and still sees the completion."""
    watcher_client = zk_client_factory()
    with JobQueue(zk_client, PATH, retry=FAST) as jq, JobQueue(watcher_client, PATH) as watcher:
        jq.add(1, job_id="through-expiry")
        waiter = Waiter(lambda: watcher.wait_result("through-expiry", timeout=60))
        waiter.start()
        wait_for(waiter.blocked, message="the waiter never went to sleep")
        expire_session(watcher_client)
        wait_for(waiter.blocked, message="the waiter did not go back to sleep on its new session")
        with jq.take(timeout=5) as jobs:
            jobs[0].complete("done")
        done = time.monotonic()
        waiter.join(10)
        assert waiter.error is None and waiter.value == "done" and waiter.ended - done < 0.3


@pytest.mark.asyncio
async def test_the_async_wait_result_times_out_with_the_same_error(zk_client) -> None:
    async with AsyncJobQueue(zk_client, PATH) as jq:
        await jq.add(1, job_id="async-slow")
        with pytest.raises(WaitTimeoutError):
            await jq.wait_result("async-slow", timeout=0.3)


def test_flow_wait_times_out_with_the_same_error(zk_client) -> None:
    from zkqueue.flows import Flow

    flow = Flow(zk_client, "/flows/waits").step("only", lambda job: None)
    with flow:
        flow.add({}, job_id="never-run")
        with pytest.raises(WaitTimeoutError):
            flow.wait("never-run", timeout=0.3)
