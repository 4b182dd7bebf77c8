"""zkqueue.aio job queues on a real ZooKeeper: every AsyncJobQueue call against the sync JobQueue on the same path
(both ways), wait_result on watches, the async take scope, connect, and the per-job timeout field."""

from __future__ import annotations

import asyncio

import pytest

from zkqueue.aio import AsyncJobQueue, JobDeadError, connect, disconnect
from zkqueue.errors import ConfigurationError, JobNotFoundError, QueueClosedError, QueueStateError
from zkqueue.jobs import JobQueue, JobState, RetryPolicy
from zkqueue.jobs.claims import Claimed
from zkqueue.jobs.model import Record
from zkqueue.jobs.scope import finish_many, release_many

PATH = "/jobs/aio"
FAST = RetryPolicy(max_attempts=2, backoff=0.0, jitter=False)


@pytest.mark.asyncio
async def test_connect_gives_a_started_client_and_fails_fast_without_a_server(zk_hosts) -> None:
    client = await connect(zk_hosts)
    try:
        assert client.connected
        assert client.exists("/") is not None
    finally:
        await disconnect(client)
    assert not client.connected
    with pytest.raises(TimeoutError):
        await connect("127.0.0.1:1", timeout=0.5)  # nothing listens there


@pytest.mark.asyncio
async def test_async_adds_round_trip_through_the_sync_job_queue(zk_client) -> None:
    with JobQueue(zk_client, PATH, retry=FAST) as sync:
        async with AsyncJobQueue(zk_client, PATH, retry=FAST) as jq:
            assert await jq.add({"n": 1}, job_id="a", timeout=30.0) == "a"
            assert await jq.add({"n": 2}, job_id="a") is None  # unfinished: the id is held
            assert await jq.add_all([("b", {"n": 2}), ("c", {"n": 3}), ("b", {"n": 9})], priority=-1) == ["b"]
            new_id = await jq.add({"n": 4})
            assert new_id and len(new_id) == 32
            ids = await asyncio.gather(*(jq.add({"i": i}, job_id=f"g-{i}") for i in range(20)),
                                       jq.add({"i": "dup"}, job_id="g-3"))
            assert ids[:20] == [f"g-{i}" for i in range(20)]
            assert ids[20] is None  # the second add of g-3 waits for the first one's batch: the first wins

            assert sync.get("a").params == {"n": 1} and sync.get("a").state is JobState.QUEUED
            record = Record.decode(zk_client.get(f"{PATH}/records/a")[0])
            assert record.timeout == 30.0
            assert Record.decode(zk_client.get(f"{PATH}/records/b")[0]).timeout is None
            assert await jq.counts() == sync.counts()
            assert (await jq.counts())["queued"] == 24

            with sync.take(max_jobs=30, timeout=5) as jobs:  # priority -1 first
                assert {j.id for j in jobs[:2]} == {"b", "c"}
                for job in jobs:
                    job.complete({"done": job.params})
            waited = await jq.wait_result("a", timeout=5)
            assert waited == {"done": {"n": 1}}
            job = await jq.get("a")
            assert job.state is JobState.COMPLETED and job.result == {"done": {"n": 1}} and job.attempts == 1
            assert await jq.get("nope") is None
            assert {j.id for j in await jq.completed()} == {j.id for j in sync.completed()}
            assert len(await jq.completed()) == 24
            assert jq.stats()["added"] == 24


@pytest.mark.asyncio
async def test_sync_adds_round_trip_through_the_async_job_queue(zk_client) -> None:
    with JobQueue(zk_client, PATH, retry=FAST) as sync:
        async with AsyncJobQueue(zk_client, PATH, retry=FAST) as jq:
            assert sync.add({"n": 1}, job_id="ok", timeout=5) == "ok"
            sync.add({"n": 2}, job_id="bad")
            sync.add({"n": 3}, job_id="later")
            waiter = asyncio.ensure_future(jq.wait_result("ok", timeout=10))
            dead_waiter = asyncio.ensure_future(jq.wait_result("bad", timeout=10))
            async with jq.take(max_jobs=3, timeout=5) as jobs:
                assert sorted(j.id for j in jobs) == ["bad", "later", "ok"]
                assert all(j.state is JobState.ACTIVE and j.attempts == 1 for j in jobs)
                by_id = {j.id: j for j in jobs}
                by_id["ok"].complete(["sent"])
                by_id["bad"].fail(RuntimeError("smtp down"))
                # "later" left undecided: a clean exit completes it with None
            assert await waiter == ["sent"]
            assert sync.get("ok").result == ["sent"] and sync.get("later").state is JobState.COMPLETED
            retrying = sync.get("bad")
            assert retrying.state is JobState.RETRYING and retrying.last_error == "RuntimeError: smtp down"
            assert not dead_waiter.done()

            with pytest.raises(ValueError):
                async with jq.take(timeout=5) as jobs:  # the body raises: every job fails (the last attempt: dead)
                    assert [j.id for j in jobs] == ["bad"]
                    raise ValueError("still down")
            with pytest.raises(JobDeadError) as dead:
                await dead_waiter
            assert dead.value.job.state is JobState.DEAD and dead.value.job.attempts == 2
            assert [j.id for j in await jq.dead_letters()] == ["bad"] == [j.id for j in sync.dead_letters()]
            assert await jq.retry_dead(["bad"]) == 1
            assert sync.get("bad").state is JobState.QUEUED
            async with jq.take(timeout=5) as jobs:
                assert [j.id for j in jobs] == ["bad"]
                jobs[0].fail(RuntimeError("again"))
            with pytest.raises(ValueError):
                async with jq.take(timeout=5) as jobs:
                    raise ValueError("boom")
            assert (await jq.counts())["dead"] == 1 and await jq.purge_dead() == 1
            assert sync.counts()["dead"] == 0
            async with jq.take(timeout=0.2) as jobs:
                assert jobs == []


@pytest.mark.asyncio
async def test_wait_result_unknown_job_and_timeout(zk_client) -> None:
    async with AsyncJobQueue(zk_client, PATH, retry=FAST) as jq:
        with pytest.raises(JobNotFoundError):
            await jq.wait_result("never-added", timeout=5)
        await jq.add({}, job_id="slow")
        with pytest.raises(TimeoutError):
            await jq.wait_result("slow", timeout=0.3)
        # a watch, not polling: completed from another client while waiting
        waiter = asyncio.ensure_future(jq.wait_result("slow", timeout=10))
        await asyncio.sleep(0.2)
        async with jq.take(timeout=5) as jobs:
            jobs[0].complete(42)
        assert await waiter == 42


@pytest.mark.asyncio
async def test_cancelled_take_gives_its_jobs_back_and_decided_ones_are_committed(zk_client) -> None:
    async with AsyncJobQueue(zk_client, PATH, retry=FAST) as jq:
        await jq.add_all([("x", 1), ("y", 2)])
        entered = asyncio.Event()

        async def body() -> None:
            async with jq.take(max_jobs=2, timeout=5) as jobs:
                next(j for j in jobs if j.id == "x").complete("done")
                entered.set()
                await asyncio.sleep(30)

        task = asyncio.ensure_future(body())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await jq.get("x")).state is JobState.COMPLETED
        y = await jq.get("y")
        assert y.state is JobState.QUEUED and y.attempts == 0 and y.errors == []  # given back uncounted, not failed
        async with jq.take(timeout=5) as jobs:  # at once, not after a backoff
            assert [(j.id, j.attempts) for j in jobs] == [("y", 1)]


@pytest.mark.asyncio
async def test_bad_arguments_and_closed_queue(zk_client) -> None:
    jq = AsyncJobQueue(zk_client, PATH)
    with pytest.raises(ConfigurationError):
        await jq.add({})  # not started
    async with jq:
        with pytest.raises(ConfigurationError):
            await jq.add({}, timeout=0)
        with pytest.raises(ConfigurationError):
            await jq.add({}, timeout="1")
        with pytest.raises(ConfigurationError):
            jq.work(lambda job: None)  # not a coroutine function
        with pytest.raises(ConfigurationError):
            await jq.add({}, delay=1, run_at=object())
        assert (await jq.counts())["queued"] == 0
    with pytest.raises(QueueClosedError):
        await jq.add({})


def test_sync_add_checks_and_stores_the_timeout(zk_client) -> None:
    with JobQueue(zk_client, PATH) as jq:
        with pytest.raises(ConfigurationError):
            jq.add({}, timeout=-1)
        jq.add({}, job_id="t", timeout=2)
        jq.add_all([("u", {})], timeout=0.5)
        assert Record.decode(zk_client.get(f"{PATH}/records/t")[0]).timeout == 2.0
        assert Record.decode(zk_client.get(f"{PATH}/records/u")[0]).timeout == 0.5
        jq.add({}, job_id="v")
        assert jq.get("t").timeout == 2.0 and jq.get("u").timeout == 0.5  # Job.timeout, as handlers see it
        assert jq.get("v").timeout is None


def test_many_held_jobs_end_in_one_call_each_through_the_public_seams(zk_client) -> None:
    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        jq.add_all([(f"h{i}", {"i": i}) for i in range(4)])
        held = jq.claim_many(4, timeout=5)
        assert sorted(h.record.id for h in held) == ["h0", "h1", "h2", "h3"]
        by_id = {h.record.id: h for h in held}
        done = [by_id["h0"], by_id["h1"]]
        finish_many([(h, jq.outcomes.success(Claimed(h.record, h.version), {"r": h.record.id})) for h in done])
        with pytest.raises(QueueStateError):
            by_id["h0"].finish(jq.outcomes.success(Claimed(by_id["h0"].record, by_id["h0"].version), None))
        failed = by_id["h2"]
        finish_many([(failed, jq.outcomes.failure(Claimed(failed.record, failed.version), ValueError("no"))),
                     (by_id["h0"], jq.outcomes.success(Claimed(by_id["h0"].record, by_id["h0"].version), 0))])
        release_many([by_id["h3"], by_id["h1"]])  # h1 is already finished: skipped
        assert jq.get("h0").result == {"r": "h0"} and jq.get("h1").state is JobState.COMPLETED
        assert jq.get("h2").state is JobState.RETRYING and jq.get("h2").last_error == "ValueError: no"
        again: list = []
        while len(again) < 2:  # h3 given back untouched, h2 retried (no backoff): each claimed again
            got = jq.claim_many(4, timeout=5)
            assert got, "h2 and h3 were not claimable again"
            again += got
        assert sorted((h.record.id, h.record.attempts) for h in again) == [("h2", 2), ("h3", 2)]
        release_many(again)
        counts = jq.counts()
        assert counts["completed"] == 2 and counts["queued"] + counts["retrying"] == 2 and counts["active"] == 0


def test_records_without_a_timeout_read_as_before() -> None:
    plain = Record(id="a", state=JobState.QUEUED, params=b"{}")
    assert b"timeout" not in plain.encode()  # what older readers get is unchanged
    assert Record.decode(plain.encode()).timeout is None
    timed = Record(id="a", state=JobState.QUEUED, params=b"{}", timeout=1.5)
    assert Record.decode(timed.encode()) == timed
    assert Record.decode(timed.moved(JobState.ACTIVE).encode()).timeout == 1.5
