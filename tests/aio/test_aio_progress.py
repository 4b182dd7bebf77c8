"""AsyncProgressConsumer on a real ZooKeeper: coroutine workers many-in-flight with progress over consecutive
finished jobs, sync and async consumers taking over from each other's stored index, retries that never skip a job,
failover to a standby after a crash, an exactly-once hand-off awaited, a wait_processed that leaves the loop
free, a stop after a lost session that waits for the worker still running, and a term elected again after a lost
session that does not start a job whose earlier run still runs."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from kazoo.recipe.lock import Lock

from zkqueue.aio import AsyncProgressConsumer
from zkqueue.errors import ConfigurationError
from zkqueue.progress import JobLog, ProgressConsumer, RetryPolicy, read_index
from zkqueue.server.testing import LogTrigger, expire_session, wait_for


def fill(log: JobLog, n: int) -> None:
    for lo in range(0, n, 200):
        log.append_many([f"job-{i}".encode() for i in range(lo + 1, min(n, lo + 200) + 1)])


@pytest.mark.asyncio
async def test_many_coroutine_workers_in_flight_and_progress_stored(zk_client) -> None:
    log = JobLog(zk_client, "/logs/a")
    fill(log, 200)
    ran: list[int] = []

    async def worker(index: int, job: bytes) -> None:
        assert job == f"job-{index}".encode()
        await asyncio.sleep(0.05)
        ran.append(index)

    async with AsyncProgressConsumer(zk_client, jobs=log, progress_path="/progress/a", worker=worker,
                                     max_processing=50, max_search_ahead=100, progress_interval=0.0) as c:
        assert await c.wait_processed(200, timeout=30)
        assert c.is_active and c.processed_index == 200
    assert sorted(ran) == list(range(1, 201))
    assert 10 < c.peak_running <= 50  # many at once on one loop, never more than max_processing
    assert read_index(zk_client, "/progress/a")[0] == 200  # stored on stop
    assert c.stats().jobs_done == 200 and c.stats().failures == 0


@pytest.mark.asyncio
async def test_sync_and_async_consumers_continue_from_each_others_stored_index(zk_client) -> None:
    log = JobLog(zk_client, "/logs/b")
    fill(log, 30)
    ran: list[tuple[str, int]] = []

    def sync_worker(index: int, job: bytes) -> None:
        ran.append(("sync", index))

    async def async_worker(index: int, job: bytes) -> None:
        ran.append(("async", index))

    path = "/progress/b"
    first = ProgressConsumer(zk_client, jobs=log, progress_path=path, worker=sync_worker, progress_interval=0.0)
    await asyncio.to_thread(first.start)
    try:
        assert await asyncio.to_thread(first.wait_processed, 30, 20)
    finally:
        await asyncio.to_thread(first.stop)
    await asyncio.to_thread(log.append_many, [f"job-{i}".encode() for i in range(31, 61)])
    async with AsyncProgressConsumer(zk_client, jobs=log, progress_path=path, worker=async_worker,
                                     progress_interval=0.0) as c:
        assert await c.wait_processed(60, timeout=20)
    await asyncio.to_thread(log.append_many, [f"job-{i}".encode() for i in range(61, 91)])
    third = ProgressConsumer(zk_client, jobs=log, progress_path=path, worker=sync_worker, progress_interval=0.0)
    await asyncio.to_thread(third.start)
    try:
        assert await asyncio.to_thread(third.wait_processed, 90, 20)
    finally:
        await asyncio.to_thread(third.stop)
    assert sorted(i for who, i in ran if who == "async") == list(range(31, 61))
    assert sorted(i for who, i in ran if who == "sync") == list(range(1, 31)) + list(range(61, 91))


@pytest.mark.asyncio
async def test_a_failing_worker_is_retried_never_skipped_and_reported_stuck(zk_client) -> None:
    log = JobLog(zk_client, "/logs/f")
    fill(log, 10)
    attempts: dict[int, int] = {}
    stuck: list[tuple[int, str, int]] = []

    async def worker(index: int, job: bytes) -> None:
        attempts[index] = attempts.get(index, 0) + 1
        await asyncio.sleep(0)
        if index == 5 and attempts[index] <= 3:
            raise RuntimeError(f"boom {attempts[index]}")

    c = AsyncProgressConsumer(zk_client, jobs=log, progress_path="/progress/f", worker=worker, max_processing=2,
                              max_search_ahead=20, retry=RetryPolicy(max_attempts=2, backoff=0.01, jitter=False),
                              on_stuck=lambda i, e, n: stuck.append((i, str(e), n)), progress_interval=0.0)
    async with c:
        assert await c.wait_processed(10, timeout=20)
    assert attempts[5] == 4 and all(attempts[i] == 1 for i in range(1, 11) if i != 5)
    assert stuck == [(5, "boom 2", 2)]
    s = c.stats()
    assert s.failures == 3 and s.stuck == 1 and s.retries == 3


@pytest.mark.asyncio
async def test_a_standby_takes_over_after_the_active_one_crashes(zk_client_factory) -> None:
    first, second = zk_client_factory(), zk_client_factory()
    log = JobLog(first, "/logs/r")
    fill(log, 40)
    runs: list[tuple[str, int]] = []
    gate = asyncio.Event()

    def worker_of(name: str):
        async def worker(index: int, job: bytes) -> None:
            if index == 21 and name == "a":
                await gate.wait()  # the crash lands while 21 runs
            runs.append((name, index))
        return worker

    a = AsyncProgressConsumer(first, jobs=log, progress_path="/progress/r", worker=worker_of("a"),
                              max_processing=1, max_search_ahead=5, progress_interval=0.0, progress_batch=1)
    b = AsyncProgressConsumer(second, jobs=JobLog(second, "/logs/r"), progress_path="/progress/r",
                              worker=worker_of("b"), max_processing=4, progress_interval=0.0)
    await a.start()
    assert await a.wait_processed(20, timeout=20)
    await b.start()  # stands by
    await asyncio.sleep(0.2)
    assert a.is_active and not b.is_active and not [r for r in runs if r[0] == "b"]
    await asyncio.to_thread(first.stop)  # the active process "dies": its session ends
    try:
        assert await b.wait_processed(40, timeout=20)
        assert b.is_active
    finally:
        gate.set()
        await a.stop()
        await b.stop()
    assert sorted(i for who, i in runs if who == "b") == list(range(21, 41))  # all above the stored index
    assert read_index(second, "/progress/r")[0] == 40


@pytest.mark.asyncio
async def test_an_awaited_hand_off_to_the_next_stage_is_exactly_once(zk_client) -> None:
    stage1, stage2 = JobLog(zk_client, "/logs/p1"), JobLog(zk_client, "/logs/p2")
    fill(stage1, 20)

    async def split(index: int, job: bytes, ctx) -> None:
        assert ctx.index == index and ctx.attempt >= 1
        if index == 7 and ctx.attempt == 1:
            await ctx.append_and_done(stage2, [job + b"/a", job + b"/b"])
            raise RuntimeError("fails after its hand-off")  # counts as finished: not run again
        await ctx.append_and_done(stage2, [job + b"/a", job + b"/b"])

    got: list[bytes] = []

    async def collect(index: int, job: bytes) -> None:
        got.append(job)

    async with AsyncProgressConsumer(zk_client, jobs=stage1, progress_path="/progress/p1", worker=split,
                                     max_processing=4, progress_interval=0.0) as one, \
            AsyncProgressConsumer(zk_client, jobs=stage2, progress_path="/progress/p2", worker=collect,
                                  max_processing=4, progress_interval=0.0) as two:
        assert await one.wait_processed(20, timeout=20)
        assert await two.wait_processed(40, timeout=20)
    assert sorted(got) == sorted(f"job-{i}/{s}".encode() for i in range(1, 21) for s in "ab")
    assert one.stats().handoffs == 20 and one.stats().retries == 0


@pytest.mark.asyncio
async def test_wait_processed_leaves_the_loop_free_and_stop_drains(zk_client) -> None:
    log = JobLog(zk_client, "/logs/w")
    fill(log, 3)
    gate = asyncio.Event()
    finished: list[int] = []

    async def worker(index: int, job: bytes) -> None:
        if index == 3:
            await gate.wait()
            await asyncio.sleep(0.2)  # still running when stop() is called
        finished.append(index)

    c = AsyncProgressConsumer(zk_client, jobs=log, progress_path="/progress/w", worker=worker,
                              progress_interval=0.0)
    await c.start()
    beats = 0

    async def heartbeat() -> None:
        nonlocal beats
        while True:
            await asyncio.sleep(0.01)
            beats += 1

    beat = asyncio.ensure_future(heartbeat())
    try:
        assert await c.wait_processed(2, timeout=20)
        waiting = asyncio.ensure_future(c.wait_processed(3, timeout=20))
        await asyncio.sleep(0.3)
        assert not waiting.done() and beats >= 5  # the loop ran while wait_processed waited
        assert await c.wait_processed(3, timeout=0.1) is False
        gate.set()
        await asyncio.sleep(0.05)
        await c.stop()  # job 3 is mid-run: it finishes and the index is stored
        assert await waiting
    finally:
        beat.cancel()
    assert sorted(finished) == [1, 2, 3]
    assert read_index(zk_client, "/progress/w")[0] == 3


@pytest.mark.asyncio
async def test_stop_after_a_lost_session_returns_only_once_the_running_worker_finished(zk_client_factory) -> None:
    """The session ends while job 41 runs and a contender is elected, so the consumer has no term when it stops.
    The held worker is released by stop() returning (the race: it would then be cancelled, or finish after stop)
    or by stop() logging that it waits for running jobs (the fix); no timer decides."""
    first, other = zk_client_factory(), zk_client_factory()
    log = JobLog(first, "/logs/lost")
    fill(log, 60)
    path = "/progress/lost"
    loop = asyncio.get_running_loop()
    runs: list[int] = []
    order: list[str] = []
    started, release = asyncio.Event(), asyncio.Event()

    async def worker(index: int, job: bytes) -> None:
        if index == 41:
            started.set()
            await release.wait()
        runs.append(index)
        if index == 41:
            order.append("job 41 finished")

    a = AsyncProgressConsumer(first, jobs=log, progress_path=path, worker=worker, max_processing=1,
                              max_search_ahead=5, progress_interval=0.0, progress_batch=1, identifier="a")
    blocker = Lock(other, f"{path}/leader", "blocker")
    holder = threading.Thread(target=blocker.acquire, kwargs={"timeout": 60})
    handler = LogTrigger("waiting for", lambda: loop.call_soon_threadsafe(release.set))
    consumer_log = logging.getLogger("zkqueue.progress.consumer")
    level = consumer_log.level
    await a.start()
    try:
        await asyncio.wait_for(started.wait(), 30)
        assert a.stored_index == 40
        holder.start()
        await asyncio.to_thread(wait_for, lambda: blocker.contenders() == ["a", "blocker"])
        await asyncio.to_thread(expire_session, first)
        await asyncio.to_thread(holder.join, 30)
        assert blocker.is_acquired
        await asyncio.to_thread(wait_for, lambda: blocker.contenders() == ["blocker", "a"])
        assert not a.is_active
        consumer_log.setLevel(logging.INFO)
        consumer_log.addHandler(handler)
        await a.stop()
        order.append("stop returned")
        release.set()
    finally:
        consumer_log.removeHandler(handler)
        consumer_log.setLevel(level)
        release.set()
        await a.stop()
        if holder.is_alive():
            await asyncio.to_thread(holder.join, 60)
        await asyncio.to_thread(blocker.release)
    assert order == ["job 41 finished", "stop returned"]  # not cancelled, not finished after stop
    before = list(runs)
    assert before == list(range(1, 42))

    async def record(index: int, job: bytes) -> None:
        runs.append(index)

    async with AsyncProgressConsumer(other, jobs=JobLog(other, "/logs/lost"), progress_path=path, worker=record,
                                     max_processing=3, progress_interval=0.0) as b:
        assert await b.wait_processed(60, timeout=30)
    assert sorted(runs[len(before):]) == list(range(41, 61))  # 41 once more in the takeover, nothing twice


@pytest.mark.asyncio
async def test_a_term_elected_again_does_not_start_a_job_whose_earlier_run_still_runs(zk_client_factory) -> None:
    """The session ends while job 11's coroutine runs and the consumer is elected again in the same process: the new
    term must not start job 11 again while that coroutine still runs. The held run is released by job 11 starting
    a second time (the bug, recorded) or by the consumer logging that its new term waits for the earlier term's
    runs (the fix); no timer decides."""
    client = zk_client_factory()
    log = JobLog(client, "/logs/again")
    fill(log, 20)
    held = 11
    loop = asyncio.get_running_loop()
    first_running, release = asyncio.Event(), asyncio.Event()
    calls = {"started": 0, "inside": 0}
    overlaps: list[int] = []
    runs: list[int] = []

    async def worker(index: int, job: bytes) -> None:
        if index == held:
            calls["started"] += 1
            nth = calls["started"]
            if calls["inside"]:
                overlaps.append(nth)
                release.set()  # the bug happened: let the first run end
            calls["inside"] += 1
            try:
                if nth == 1:
                    first_running.set()
                    await release.wait()  # the session is lost, and the consumer elected again, while it runs
            finally:
                calls["inside"] -= 1
        runs.append(index)

    c = AsyncProgressConsumer(client, jobs=log, progress_path="/progress/again", worker=worker, max_processing=2,
                              max_search_ahead=2, progress_interval=0.0, progress_batch=1, identifier="a")
    handler = LogTrigger("of an earlier term", lambda: loop.call_soon_threadsafe(release.set))
    consumer_log = logging.getLogger("zkqueue.progress.consumer")
    level = consumer_log.level
    consumer_log.setLevel(logging.INFO)
    consumer_log.addHandler(handler)
    await c.start()
    try:
        await asyncio.wait_for(first_running.wait(), 30)
        await asyncio.to_thread(wait_for, lambda: c.stored_index == held - 1, 30)
        await asyncio.to_thread(expire_session, client)
        assert await c.wait_processed(20, timeout=60), f"stuck at {c.processed_index}"
    finally:
        release.set()
        await c.stop()
        consumer_log.removeHandler(handler)
        consumer_log.setLevel(level)
    assert overlaps == [], f"job {held} started again while its first run still ran"
    assert c.stats().elected == 2
    assert calls["started"] == 2  # run again in the new term, once the first run had returned
    assert c.peak_running <= 2  # the earlier term's run and the new term's never added up past max_processing
    assert sorted(set(runs)) == list(range(1, 21))


def test_thread_workers_are_refused(zk_client) -> None:
    with pytest.raises(ConfigurationError):
        AsyncProgressConsumer(zk_client, jobs=JobLog(zk_client, "/logs/x"), progress_path="/progress/x",
                              worker=lambda i, job: None)
