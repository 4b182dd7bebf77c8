"""Route.end_executor on a real ZooKeeper: the end a route commits itself (Route.end) for an attempt its coroutine
settled runs on that executor, never on the event loop's thread, and the attempt keeps its slot (and a stop waits)
until that end returns."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from zkqueue.jobs import JobQueue, JobState, RetryPolicy
from zkqueue.jobs.scope import finish_many
from zkqueue.runtime import AsyncioDriver, Attempt, Route, Worker
from zkqueue.server.testing import wait_for

PATH = "/runtime/end-executor"


def test_an_own_end_runs_on_its_executor_off_the_loop_and_holds_its_slot(zk_client) -> None:
    handled_on: list[str] = []
    ended: list[tuple[str, str]] = []  # (job id, thread name)
    go = threading.Event()

    async def handler(job):
        handled_on.append(threading.current_thread().name)
        await asyncio.sleep(0)
        return job.params

    def end(attempt: Attempt) -> None:  # blocks, as a flow's hand-off does
        ended.append((attempt.job.id, threading.current_thread().name))
        go.wait(30)
        finish_many([(attempt.held, attempt.source.outcomes.success(attempt.held.claimed, attempt.result))])

    pool = ThreadPoolExecutor(2, thread_name_prefix="test-ends")
    with JobQueue(zk_client, PATH, retry=RetryPolicy(max_attempts=2)) as jq:
        jq.add_all((f"e{i}", i) for i in range(3))
        driver = AsyncioDriver("test-loop")
        route = Route(driver, handler, end=end, end_executor=pool)
        worker = Worker([jq], lambda _queue, _job: route, [driver], concurrency=1).start()
        try:
            wait_for(lambda: len(ended) == 1)
            first = ended[0][0]
            assert worker.running_ids() == [first]  # its end blocks: it still holds the only slot
            assert handled_on == ["test-loop"] and ended[0][1].startswith("test-ends")
            go.set()
            wait_for(lambda: jq.counts()["completed"] == 3)
        finally:
            go.set()
            assert worker.stop(timeout=10) is True
            pool.shutdown()
        assert handled_on == ["test-loop"] * 3
        assert all(name.startswith("test-ends") for _id, name in ended) and len(ended) == 3
        assert all(jq.get(f"e{i}").state is JobState.COMPLETED for i in range(3))
        assert worker.stats()["completed"] == 3
