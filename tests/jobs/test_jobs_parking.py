"""Delayed jobs and long retry backoffs are parked in time buckets (zkqueue.engine.parking), on a real ZooKeeper.

A small schedule layout (2-second buckets moved 1 s ahead) keeps the waits to seconds."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from zkqueue.engine.parking import parked_count
from zkqueue.errors import ConfigurationError
from zkqueue.formats import buckets
from zkqueue.jobs import JobQueue, JobState, RetryPolicy
from zkqueue.jobs.model import now_ms
from zkqueue.server.testing import wait_for

PATH = "/jobs/parked"
FAST = buckets.Layout(hour_s=60, minute_s=2, lead_s=1.0, margin_s=1.0)


def test_delayed_adds_are_parked_and_run_on_time(zk_client) -> None:
    ran: dict[str, int] = {}
    lock = threading.Lock()

    def handler(job):
        with lock:
            ran[job.id] = now_ms()
        return "ok"

    with JobQueue(zk_client, PATH, park_after=0.0, schedule_layout=FAST) as jq:
        start = now_ms()
        assert jq.add({"n": 1}, job_id="soon") == "soon"
        assert jq.add({"n": 2}, job_id="later", delay=5.0) == "later"
        assert jq.add({"n": 3}, job_id="at", run_at=datetime.now(timezone.utc) + timedelta(seconds=6)) == "at"
        assert jq.add_all([(f"bulk-{i}", i) for i in range(30)], delay=4.0) == []
        counts = jq.counts()
        assert counts["queued"] == 1 and counts["scheduled"] == 32
        assert jq.add({"n": 4}, job_id="later") is None  # still distinct while parked
        assert jq.get("later").state is JobState.QUEUED
        with jq.work(handler, concurrency=4):
            wait_for(lambda: len(ran) == 33, timeout=30)
        assert ran["later"] >= start + 5000 and ran["at"] >= start + 6000 - 5  # never early
        assert all(ran[f"bulk-{i}"] >= start + 4000 for i in range(30))
        assert jq.counts()["scheduled"] == 0 and jq.counts()["completed"] == 33


def test_a_long_retry_backoff_is_parked(zk_client) -> None:
    policy = RetryPolicy(max_attempts=2, backoff=5.0, max_backoff=5.0, jitter=False)
    with JobQueue(zk_client, PATH, retry=policy, park_after=0.0, schedule_layout=FAST) as jq:
        jq.add("x", job_id="flaky")
        failed_at = []
        with jq.take(max_jobs=1, timeout=5) as jobs:
            failed_at.append(now_ms())
            jobs[0].fail(RuntimeError("later"))
        counts = jq.counts()
        assert counts["scheduled"] == 1 and counts["retrying"] == 0
        assert jq.get("flaky").state is JobState.RETRYING
        with jq.take(max_jobs=1, timeout=20) as jobs:
            assert [j.id for j in jobs] == ["flaky"] and jobs[0].attempts == 2
            assert now_ms() >= failed_at[0] + 5000
        assert jq.get("flaky").state is JobState.COMPLETED


def test_park_after_none_keeps_delayed_jobs_in_the_queue(zk_client) -> None:
    with JobQueue(zk_client, PATH, park_after=None) as jq:
        jq.add("x", delay=3600)
        assert jq.counts()["queued"] == 1 and jq.counts()["scheduled"] == 0
        assert not zk_client.exists(buckets.schedule_root(jq.paths.queue))


def test_default_parking_keeps_a_day_ahead_out_of_the_queue_node(zk_client) -> None:
    with JobQueue(zk_client, PATH) as jq:
        jq.add("x", job_id="tomorrow", run_at=datetime.now(timezone.utc) + timedelta(days=1))
        jq.add("y", job_id="in-a-minute-or-less", delay=30)
        assert [n for n in zk_client.get_children(jq.paths.queue)] and parked_count(zk_client, jq.paths.queue) == 1
        assert jq.counts()["scheduled"] == 1 and jq.counts()["queued"] == 1


def test_bad_times_are_refused(zk_client) -> None:
    with JobQueue(zk_client, PATH) as jq:
        with pytest.raises(ConfigurationError):
            jq.add("x", run_at=datetime.now() + timedelta(hours=1))  # naive: ambiguous across machines
        with pytest.raises(ConfigurationError):
            jq.add("x", delay=5, run_at=datetime.now(timezone.utc))
        with pytest.raises(ConfigurationError):
            jq.add("x", run_at="tomorrow")
        assert jq.add("x", job_id="past", run_at=datetime.now(timezone.utc) - timedelta(hours=1)) == "past"
        assert jq.counts()["queued"] == 1
