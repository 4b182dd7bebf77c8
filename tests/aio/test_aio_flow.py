"""AsyncFlow on a real ZooKeeper: sync and async flows on one path both ways, fan-out and a join, many coroutine
step handlers in flight, retry then dead as the sync layer does, step timeouts, cancellation that loses nothing,
draining stop(), a stop(timeout) that gives steps claimed ahead back uncounted and cuts off hung ones,
max_concurrency slots, and a wait() that leaves the loop free."""

from __future__ import annotations

import asyncio
import time

import pytest

from zkqueue.aio import AsyncFlow, JobTimeoutError
from zkqueue.errors import ConfigurationError, QueueStateError
from zkqueue.flows import Flow, FlowState, Next
from zkqueue.jobs import RetryPolicy

PATH = "/flows/aio"
FAST = RetryPolicy(max_attempts=3, backoff=0.05, max_backoff=0.1, jitter=False)


async def wait_until(predicate, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def done_once(job) -> dict[str, int]:
    out: dict[str, int] = {}
    for h in job.history:
        if h.status == "done":
            out[h.step] = out.get(h.step, 0) + 1
    return out


@pytest.mark.asyncio
async def test_fan_out_and_join_with_coroutine_handlers(zk_client) -> None:
    joins: list[dict] = []

    async def update(job):
        await asyncio.sleep(0.01)
        return job.params["n"]

    def branch(tag: str):
        async def run(job):
            await asyncio.sleep(0.01)
            job.data[tag] = True  # the shared state commits with the hand-off
            return [tag, job.results["update"]]
        return run

    async def notify(job):
        joins.append(dict(job.results))
        return sorted(k for k in job.results if k in ("a", "b", "c"))

    flow = AsyncFlow(zk_client, PATH, retry=FAST)
    flow.step("update", update, next=["a", "b", "c"])
    for tag in ("a", "b", "c"):
        flow.step(tag, branch(tag))
    flow.step("notify", notify, after=["a", "b", "c"])
    async with flow:
        ids = [await flow.add({"n": i}, job_id=f"f{i}") for i in range(10)]
        assert await flow.add({"n": 0}, job_id="f0") is None  # still running: left as it is
        async with flow.work(concurrency=5) as worker:
            jobs = await asyncio.gather(*(flow.wait(i, timeout=30) for i in ids))
        assert len(joins) == 10  # each join ran once
        for i, job in enumerate(jobs):
            assert job.state is FlowState.COMPLETED and job.pending == []
            assert job.results["a"] == ["a", i] and job.results["notify"] == ["a", "b", "c"]
            assert done_once(job) == {"update": 1, "a": 1, "b": 1, "c": 1, "notify": 1}
            assert job.data == {"a": True, "b": True, "c": True}
        assert worker.stats()["completed"] == 50 and worker.stats()["released"] == 0
        counts = await flow.counts()
        assert counts["completed"] == 10 and counts["running"] == 0
        assert all(c == {"queued": 0, "active": 0, "retrying": 0} for c in counts["steps"].values())
        assert flow.stats()["notify"]["completed"] == 10  # the sync layer's own tallies
        assert (await flow.get("f3")).results["update"] == 3 and await flow.get("nope") is None


@pytest.mark.asyncio
async def test_sync_add_runs_on_async_workers_and_async_add_on_sync_workers(zk_client) -> None:
    async def a_first(job):
        await asyncio.sleep(0.01)
        return Next("second", job.params * 10)  # routing at run time, as in the sync layer

    async def a_second(job):
        return job.results["first"] + 1

    aflow = AsyncFlow(zk_client, PATH, retry=FAST)
    aflow.step("first", a_first, next="second").step("second", a_second)
    sflow = Flow(zk_client, PATH, retry=FAST)
    sflow.step("first", lambda job: job.params * 10, next="second")
    sflow.step("second", lambda job: job.results["first"] + 2)
    async with aflow:
        await asyncio.to_thread(sflow.start)
        try:
            for i in range(5):  # sync add -> async work
                assert await asyncio.to_thread(sflow.add, i, f"s-{i}") == f"s-{i}"
            async with aflow.work(concurrency=4):
                done = await asyncio.gather(*(aflow.wait(f"s-{i}", timeout=20) for i in range(5)))
            assert [j.results["second"] for j in done] == [i * 10 + 1 for i in range(5)]

            for i in range(5):  # async add -> sync work
                assert await aflow.add(i, job_id=f"a-{i}") == f"a-{i}"
            worker = await asyncio.to_thread(sflow.work, 2)
            try:
                done = await asyncio.gather(*(aflow.wait(f"a-{i}", timeout=20) for i in range(5)))
            finally:
                await asyncio.to_thread(worker.stop)
            assert [j.results["second"] for j in done] == [i * 10 + 2 for i in range(5)]
            assert (await asyncio.to_thread(sflow.get, "a-4")).results == (await aflow.get("a-4")).results
        finally:
            await asyncio.to_thread(sflow.close)


@pytest.mark.asyncio
async def test_many_sleeping_handlers_in_flight(zk_client) -> None:
    running = 0
    peak = 0

    async def slow(job):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(0.3)
        finally:
            running -= 1
        return job.params

    flow = AsyncFlow(zk_client, PATH, retry=FAST).step("slow", slow)
    async with flow:
        for i in range(60):
            await flow.add(i, job_id=f"m-{i}")
        async with flow.work(concurrency=40) as worker:
            jobs = await asyncio.gather(*(flow.wait(f"m-{i}", timeout=30) for i in range(60)))
        assert [j.results["slow"] for j in jobs] == list(range(60))
        assert peak > 20 and peak <= 40  # many at once on one loop, never more than concurrency
        assert worker.stats()["peak_in_flight"] <= 40 and worker.stats()["completed"] == 60


@pytest.mark.asyncio
async def test_a_failing_step_is_retried_then_dead_and_the_flow_job_fails(zk_client) -> None:
    attempts: list[int] = []

    async def flaky(job):
        attempts.append(job.attempt)
        if job.attempt < 2:
            raise RuntimeError("first try fails")
        return "ok"

    async def broken(job):
        attempts.append(100 + job.attempt)
        raise ValueError("always")

    flow = AsyncFlow(zk_client, PATH, retry=FAST)
    flow.step("flaky", flaky, next="broken").step("broken", broken)
    async with flow:
        await flow.add({}, job_id="r1")
        async with flow.work(concurrency=2) as worker:
            job = await flow.wait("r1", timeout=20)
        assert job.state is FlowState.FAILED and job.results == {"flaky": "ok"}
        assert attempts == [1, 2, 101, 102, 103]
        assert [(e.step, e.attempt) for e in job.errors] == [("flaky", 1), ("broken", 1), ("broken", 2),
                                                             ("broken", 3)]
        assert job.errors[-1].error == "ValueError: always"
        assert [(h.step, h.status) for h in job.history] == [("flaky", "done"), ("broken", "failed")]
        stats = worker.stats()
        assert stats["retried"] == 3 and stats["dead"] == 1 and stats["completed"] == 1
        assert flow.stats()["broken"]["dead_lettered"] == 1


@pytest.mark.asyncio
async def test_a_step_past_its_timeout_is_cancelled_and_fails(zk_client) -> None:
    cancelled = 0

    async def stuck(job):
        nonlocal cancelled
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled += 1
            raise

    flow = AsyncFlow(zk_client, PATH, retry=RetryPolicy(max_attempts=2, backoff=0.0, jitter=False))
    flow.step("stuck", stuck, timeout=0.2)
    async with flow:
        await flow.add({}, job_id="t1")
        async with flow.work(concurrency=1, timeout=60.0) as worker:  # the step's own timeout wins
            job = await flow.wait("t1", timeout=20)
        assert job.state is FlowState.FAILED and cancelled == 2
        assert [e.error.split(":")[0] for e in job.errors] == [JobTimeoutError.__name__] * 2
        assert worker.stats()["timed_out"] == 2


@pytest.mark.asyncio
async def test_cancelling_the_worker_task_gives_running_steps_back(zk_client) -> None:
    started = 0

    async def stuck(job):
        nonlocal started
        started += 1
        await asyncio.sleep(30)

    async def quick(job):
        return job.params

    flow = AsyncFlow(zk_client, PATH, retry=FAST)
    flow.step("one", stuck)
    async with flow:
        for i in range(30):
            await flow.add(i, job_id=f"c-{i}")
        worker = flow.work(concurrency=20)
        await wait_until(lambda: asyncio.sleep(0, started >= 20), 20, "20 handlers running")
        worker.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker.task
        assert worker.stats()["released"] == 20
        counts = await flow.counts()
        assert counts["running"] == 30
        assert counts["steps"]["one"] == {"queued": 30, "active": 0, "retrying": 0}  # back at once, no backoff

    again = AsyncFlow(zk_client, PATH, retry=FAST)
    again.step("one", quick)
    async with again:
        async with again.work(concurrency=10):
            jobs = await asyncio.gather(*(again.wait(f"c-{i}", timeout=20) for i in range(30)))
    assert [j.results["one"] for j in jobs] == list(range(30))
    assert sorted(j.history[-1].attempts for j in jobs) == [1] * 10 + [2] * 20  # the cancelled ones ran again


@pytest.mark.asyncio
async def test_stop_drains_running_steps_and_commits_their_hand_offs(zk_client) -> None:
    started = asyncio.Event()

    async def first(job):
        started.set()
        await asyncio.sleep(0.4)
        return "drained"

    async def second(job):
        return "never here"

    flow = AsyncFlow(zk_client, PATH, retry=FAST)
    flow.step("first", first, next="second").step("second", second)
    async with flow:
        for i in range(5):
            await flow.add(i, job_id=f"d-{i}")
        worker = flow.work(concurrency=5, steps=["first"])
        await started.wait()
        await asyncio.sleep(0.1)
        running = worker.in_flight
        assert running > 0
        await worker.stop()
        assert worker.task.done() and not worker.task.cancelled()
        assert worker.stats()["completed"] == running and worker.stats()["released"] == 0
        counts = await flow.counts()
        assert counts["steps"]["first"]["active"] == 0
        assert counts["steps"]["second"]["queued"] == running  # each hand-off queued its next step


@pytest.mark.asyncio
async def test_stop_gives_steps_claimed_ahead_back_uncounted_and_cuts_off_running_ones(zk_client) -> None:
    started: list[str] = []
    cancelled = 0

    async def hung(job):
        nonlocal cancelled
        started.append(job.id)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled += 1
            raise

    async def quick(job):
        return job.params

    flow = AsyncFlow(zk_client, PATH, retry=FAST).step("one", hung)
    async with flow:
        for i in range(4):
            await flow.add(i, job_id=f"h-{i}")
        worker = flow.work(concurrency=1)

        async def all_claimed() -> bool:
            return len(started) == 1 and (await flow.counts())["steps"]["one"]["active"] == 4

        await wait_until(all_claimed, 20, "one step job running and three claimed ahead")
        assert worker.stats()["prefetched"] == 3
        began = time.monotonic()
        await worker.stop(timeout=0.3)  # warm for 0.3 s, then cold: the hung one is given back
        assert time.monotonic() - began < 10  # it was cut off, not waited for
        await wait_until(lambda: asyncio.sleep(0, cancelled == 1), 20, "the hung handler cancelled")
        stats = worker.stats()
        assert (stats["released"], stats["returned"], stats["completed"], stats["in_flight"]) == (1, 3, 0, 0)
        counts = await flow.counts()
        assert counts["steps"]["one"] == {"queued": 4, "active": 0, "retrying": 0}  # all back at once

    again = AsyncFlow(zk_client, PATH, retry=FAST).step("one", quick)
    async with again:
        async with again.work(concurrency=4):
            jobs = await asyncio.gather(*(again.wait(f"h-{i}", timeout=20) for i in range(4)))
    assert [j.results["one"] for j in jobs] == list(range(4))
    attempts = {j.id: j.history[-1].attempts for j in jobs}
    assert attempts == {f"h-{i}": 2 if f"h-{i}" == started[0] else 1 for i in range(4)}  # only the one that ran


@pytest.mark.asyncio
async def test_a_max_concurrency_step_runs_at_most_that_many_at_once(zk_client) -> None:
    running = 0
    peak = 0

    async def limited(job):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(0.05)
        finally:
            running -= 1
        return job.params

    flow = AsyncFlow(zk_client, PATH, retry=FAST).step("limited", limited, max_concurrency=2)
    async with flow:
        for i in range(8):
            await flow.add(i, job_id=f"l-{i}")
        async with flow.work(concurrency=10):
            jobs = await asyncio.gather(*(flow.wait(f"l-{i}", timeout=30) for i in range(8)))
    assert all(j.state is FlowState.COMPLETED for j in jobs)
    assert 1 <= peak <= 2


@pytest.mark.asyncio
async def test_wait_leaves_the_loop_free_and_fails_for_unknown_ids(zk_client) -> None:
    gate = asyncio.Event()

    async def held(job):
        await gate.wait()
        return "done"

    flow = AsyncFlow(zk_client, PATH, retry=FAST).step("held", held)
    async with flow:
        await flow.add({}, job_id="w1")
        beats = 0

        async def heartbeat() -> None:
            nonlocal beats
            while True:
                await asyncio.sleep(0.01)
                beats += 1

        beat = asyncio.ensure_future(heartbeat())
        try:
            async with flow.work(concurrency=1):
                waiting = asyncio.ensure_future(flow.wait("w1", timeout=20))
                await asyncio.sleep(0.3)
                assert not waiting.done() and beats >= 5  # the loop ran while wait() waited
                gate.set()
                job = await waiting
        finally:
            beat.cancel()
        assert job.state is FlowState.COMPLETED and job.results == {"held": "done"}
        with pytest.raises(TimeoutError):
            await flow.add({}, job_id="w2")
            await flow.wait("w2", timeout=0.2)  # no worker runs it
        with pytest.raises(QueueStateError):
            await flow.wait("unknown", timeout=5)


@pytest.mark.asyncio
async def test_work_refuses_thread_handlers_and_sync_workers_refuse_coroutines(zk_client) -> None:
    flow = AsyncFlow(zk_client, PATH, retry=RetryPolicy(max_attempts=1)).step("plain", lambda job: 1)
    async with flow:
        with pytest.raises(ConfigurationError):
            flow.work()

    async def coro(job):
        return 1

    sync = Flow(zk_client, PATH + "-sync", retry=RetryPolicy(max_attempts=1)).step("c", coro)
    with sync:
        sync.add({}, job_id="x")
        with sync.work():
            job = await asyncio.to_thread(sync.wait, "x", 20)
    assert job.state is FlowState.FAILED and "AsyncFlow.work" in job.errors[0].error


@pytest.mark.asyncio
async def test_add_with_a_delay_and_cancel(zk_client) -> None:
    """AsyncFlow.add passes delay/priority/headers on; AsyncFlow.cancel ends a waiting flow job CANCELLED."""

    async def first(job):
        return "ran"

    aflow = AsyncFlow(zk_client, PATH, retry=FAST)
    aflow.step("first", first)
    async with aflow:
        assert await aflow.add({}, job_id="later", delay=60, priority=2, headers={"k": "v"}) == "later"
        assert await aflow.cancel("later") is True and await aflow.cancel("later") is False
        job = await aflow.get("later")
        assert job.state is FlowState.CANCELLED
