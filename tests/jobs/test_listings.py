"""JobQueue.queued() and in_progress() on a real ZooKeeper: run order, limit, jobs held by a take scope, params
the serializer cannot read, and jobs that finish between the listing and the read of their records."""

from __future__ import annotations

import time

import pytest

from zkqueue.aio import AsyncJobQueue
from zkqueue.errors import ConfigurationError
from zkqueue.formats.serializers import StrSerializer
from zkqueue.jobs import JobQueue, JobState, RetryPolicy
from zkqueue.engine import api

PATH = "/jobs/listed"


def ids(jobs) -> list[str]:
    return [j.id for j in jobs]


def test_queued_lists_in_run_order_due_jobs_first_and_leaves_parked_ones_out(zk_client) -> None:
    with JobQueue(zk_client, PATH) as jq:
        jq.add({"n": "a"}, job_id="a")
        jq.add({"n": "b"}, job_id="b")
        jq.add({"n": "d"}, job_id="d", delay=0.3)  # runnable at 0.3 s: after a and b, before c
        jq.add({"n": "later"}, job_id="later", delay=30, priority=-9)  # not due: after every due job
        jq.add({"n": "soon"}, job_id="soon", delay=20, priority=5)  # due before "later": listed before it
        jq.add({"n": "parked"}, job_id="parked", delay=3600)  # in a time bucket: not listed
        time.sleep(0.5)
        jq.add({"n": "c"}, job_id="c")
        jq.add({"n": "h"}, job_id="h", priority=-1)
        listed = jq.queued()
        assert ids(listed) == ["h", "a", "b", "d", "c", "soon", "later"]
        assert listed[1].params == {"n": "a"} and listed[1].state is JobState.QUEUED
        assert jq.counts()["scheduled"] == 1 and jq.get("parked").state is JobState.QUEUED
        assert jq.in_progress() == []
        with jq.take(max_jobs=5, timeout=5) as jobs:  # a worker takes them in the listed order
            assert ids(jobs) == ["h", "a", "b", "d", "c"]


def test_queued_returns_at_most_limit_jobs_and_checks_it(zk_client) -> None:
    with JobQueue(zk_client, PATH) as jq:
        jq.add_all([(f"j-{i}", i) for i in range(10)])
        jq.add("first", job_id="first", priority=-1)
        assert ids(jq.queued(limit=3)) == ["first", "j-0", "j-1"]
        assert ids(jq.queued(limit=1)) == ["first"]
        assert len(jq.queued()) == 11 and len(jq.queued(limit=100)) == 11
        for bad in (0, -1, 1.5, "3", True, None):
            with pytest.raises(ConfigurationError):
                jq.queued(limit=bad)


def test_in_progress_lists_the_jobs_a_take_scope_holds_and_queued_leaves_them_out(zk_client) -> None:
    with JobQueue(zk_client, PATH, retry=RetryPolicy(max_attempts=3, backoff=5.0, jitter=False)) as jq:
        jq.add_all([(f"j-{i}", {"i": i}) for i in range(5)])
        with jq.take(max_jobs=2, timeout=5) as jobs:
            assert ids(jobs) == ["j-0", "j-1"]
            running = jq.in_progress()
            assert ids(running) == ["j-0", "j-1"]
            assert all(j.state is JobState.ACTIVE and j.attempts == 1 for j in running)
            assert running[0].params == {"i": 0}
            assert ids(jq.queued()) == ["j-2", "j-3", "j-4"]
            assert jq.counts()["active"] == 2
        assert jq.in_progress() == []
        assert ids(jq.queued()) == ["j-2", "j-3", "j-4"]
        with jq.take(max_jobs=1, timeout=5) as jobs:
            jobs[0].fail(RuntimeError("again"))  # retrying: still waiting to run, listed as such
        waiting = jq.queued()
        assert ids(waiting) == ["j-3", "j-4", "j-2"]  # its retry is due in 5 s: after the due jobs
        assert waiting[-1].state is JobState.RETRYING and waiting[-1].last_error == "RuntimeError: again"


def test_a_job_with_params_the_serializer_cannot_read_is_listed_with_its_raw_bytes(zk_client) -> None:
    with JobQueue(zk_client, PATH, serializer=StrSerializer()) as other:  # params as plain text, not JSON
        assert other.add("not json {", "odd") == "odd"
    with JobQueue(zk_client, PATH) as jq:
        jq.add({"n": 1}, job_id="fine")
        listed = jq.queued()
        assert ids(listed) == ["odd", "fine"]
        assert listed[0].params == b"not json {" and listed[1].params == {"n": 1}


def test_a_job_that_finishes_between_the_listing_and_the_read_is_left_out(zk_client, monkeypatch) -> None:
    real = api.multi_read
    with JobQueue(zk_client, PATH) as jq:
        jq.add_all([("a", 1), ("b", 2), ("c", 3)])
        held = jq.take(max_jobs=2, timeout=5)
        assert ids(held.__enter__()) == ["a", "b"]
        armed = []

        def finish_then_read(client, paths, *args, **kwargs):
            if armed:
                armed.pop()()  # the job ends after the listing, before its record is read
            return real(client, paths, *args, **kwargs)

        monkeypatch.setattr(api, "multi_read", finish_then_read)
        armed.append(lambda: held.__exit__(None, None, None))  # a and b complete
        assert jq.in_progress() == [] and not armed
        assert jq.get("a").state is JobState.COMPLETED

        def take_one() -> None:
            with jq.take(max_jobs=1, timeout=5) as jobs:
                assert ids(jobs) == ["c"]

        jq.add("d", job_id="d")
        armed.append(take_one)  # c completes
        assert ids(jq.queued()) == ["d"] and not armed
        assert jq.get("c").state is JobState.COMPLETED


@pytest.mark.asyncio
async def test_the_asyncio_facade_lists_the_same(zk_client) -> None:
    with JobQueue(zk_client, PATH) as sync:
        async with AsyncJobQueue(zk_client, PATH) as jq:
            await jq.add_all([("x", 1), ("y", 2), ("z", 3)])
            with sync.take(max_jobs=1, timeout=5) as jobs:
                assert ids(jobs) == ["x"]
                assert ids(await jq.in_progress()) == ["x"]
                assert ids(await jq.queued()) == ["y", "z"]
                assert ids(await jq.queued(limit=1)) == ["y"]
