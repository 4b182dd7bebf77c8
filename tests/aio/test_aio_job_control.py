"""AsyncJobQueue's job controls on a real ZooKeeper: cancel (waiting and running), pause and resume (seen by a
worker on the loop), ``paused``, and get / wait_result of a cancelled job (JobCancelledError, as JobDeadError for a
dead one)."""

from __future__ import annotations

import asyncio

import pytest

from zkqueue.aio import AsyncJobQueue
from zkqueue.errors import JobCancelledError, JobFailedError, QueueClosedError
from zkqueue.jobs import JobQueue, JobState, RetryPolicy

PATH = "/jobs/aio-control"
FAST = RetryPolicy(max_attempts=2, backoff=0.0, jitter=False)


@pytest.mark.asyncio
async def test_cancel_a_waiting_job_and_wait_result_raises(zk_client) -> None:
    async with AsyncJobQueue(zk_client, PATH, retry=FAST) as jq:
        assert await jq.add({"n": 1}, job_id="a") == "a"
        waiter = asyncio.ensure_future(jq.wait_result("a", timeout=10))
        await asyncio.sleep(0.2)  # the waiter watches the finished records
        assert not waiter.done()
        assert await jq.cancel("a") is True
        with pytest.raises(JobCancelledError) as cancelled:
            await waiter
        assert isinstance(cancelled.value, JobFailedError) and cancelled.value.job.id == "a"
        job = await jq.get("a")  # read from cancelled/
        assert job.state is JobState.CANCELLED and job.params == {"n": 1}
        with pytest.raises(JobCancelledError):
            await jq.wait_result("a", timeout=0.5)  # already finished
        assert await jq.cancel("a") is False and await jq.cancel("nope") is False
        assert (await jq.counts())["cancelled"] == 1


@pytest.mark.asyncio
async def test_pause_resume_and_cancel_a_running_job(zk_client) -> None:
    started = asyncio.Event()
    ran: list[str] = []

    async def handler(job):
        ran.append(job.id)
        if job.id == "long":
            started.set()
            await asyncio.sleep(30)  # cancelled by the cancel request
        return job.id

    async with AsyncJobQueue(zk_client, PATH, retry=FAST) as jq:
        assert jq.paused is False
        await jq.pause()
        assert jq.paused is True
        with JobQueue(zk_client, PATH) as other:  # another queue on the path sees the pause node
            assert other.paused is True
        await jq.add("x", job_id="long")
        worker = jq.work(handler)
        await asyncio.sleep(1.0)
        assert ran == [] and (await jq.get("long")).state is JobState.QUEUED  # nothing starts while paused
        await jq.resume()
        assert jq.paused is False
        await asyncio.wait_for(started.wait(), 20)
        assert (await jq.get("long")).state is JobState.ACTIVE
        assert await jq.cancel("long") is True  # a cancel request: the coroutine is cancelled
        with pytest.raises(JobCancelledError):
            await jq.wait_result("long", timeout=20)
        job = await jq.get("long")
        assert job.state is JobState.CANCELLED and job.errors == []
        await jq.add("y", job_id="short")
        assert await jq.wait_result("short", timeout=20) == "short"
        await worker.stop()
    with pytest.raises(QueueClosedError):
        await jq.pause()


@pytest.mark.asyncio
async def test_a_job_cancelled_while_an_async_take_scope_holds_it_ends_cancelled(zk_client) -> None:
    async with AsyncJobQueue(zk_client, PATH, retry=FAST) as jq:
        await jq.add_all([("keep", 1), ("drop", 2)])
        async with jq.take(max_jobs=2, timeout=5) as jobs:
            held = {job.id: job for job in jobs}
            assert set(held) == {"keep", "drop"} and not held["drop"].cancel_requested
            assert await jq.cancel("drop") is True
            for _ in range(200):
                if held["drop"].cancel_requested:
                    break
                await asyncio.sleep(0.05)
            assert held["drop"].cancel_requested and not held["keep"].cancel_requested
        assert (await jq.get("drop")).state is JobState.CANCELLED
        assert (await jq.get("keep")).state is JobState.COMPLETED
