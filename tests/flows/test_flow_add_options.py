"""Flow.add takes ``delay``, ``run_at`` and ``priority`` as JobQueue.add does: they apply to the flow job's first
step (a step job due far ahead is parked), on a real ZooKeeper."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from zkqueue.errors import ConfigurationError
from zkqueue.flows import Flow, FlowState
from zkqueue.jobs import JobState
from zkqueue.server.testing import wait_for

PATH = "/flows/options"


def test_a_delayed_flow_job_starts_its_first_step_no_sooner(zk_client) -> None:
    started: dict[str, float] = {}
    flow = Flow(zk_client, PATH)
    flow.step("first", lambda job: started.setdefault(job.id, time.time()), next="second")
    flow.step("second", lambda job: "done")
    with flow, flow.work(concurrency=2):
        added_at = time.time()
        assert flow.add({}, job_id="later", delay=1.0) == "later"
        assert flow.add({}, job_id="now") == "now"
        assert flow.wait("now", timeout=30).state is FlowState.COMPLETED
        assert "later" not in started  # the one added at once is through both steps; the delayed one waits
        assert flow.wait("later", timeout=30).state is FlowState.COMPLETED
    assert started["later"] >= added_at + 0.99


def test_priority_orders_the_first_steps_of_waiting_flow_jobs(zk_client) -> None:
    order: list[str] = []
    lock = threading.Lock()

    def first(job):  # noqa: ANN001, ANN202
        with lock:
            order.append(job.id)

    flow = Flow(zk_client, PATH)
    flow.step("first", first)
    with flow:
        flow.pause()
        for job_id, priority in [("low-1", 5), ("high", 1), ("low-2", 5), ("mid", 3)]:
            flow.add({}, job_id=job_id, priority=priority)
        flow.resume()
        with flow.work(concurrency=1):
            wait_for(lambda: len(order) == 4, timeout=30)
    assert order == ["high", "mid", "low-1", "low-2"]


def test_a_flow_job_a_day_ahead_is_parked_and_waits(zk_client) -> None:
    flow = Flow(zk_client, PATH)
    flow.step("first", lambda job: "ran")
    run_at = datetime.now(timezone.utc) + timedelta(days=1)
    with flow:
        assert flow.add({}, job_id="tomorrow", run_at=run_at) == "tomorrow"
        step_queue = flow.queue("first")
        assert step_queue.get("tomorrow").state is JobState.QUEUED
        assert [n for n in zk_client.get_children(step_queue.paths.queue) if n.startswith("queue-")] == []  # parked
        assert step_queue.counts()["scheduled"] == 1
        assert flow.get("tomorrow").state is FlowState.RUNNING


def test_bad_add_options_raise_configuration_errors(zk_client) -> None:
    flow = Flow(zk_client, PATH)
    flow.step("first", lambda job: None)
    with flow:
        for kwargs in ({"delay": "soon"}, {"run_at": datetime.now()}, {"delay": 1, "run_at": datetime.now(timezone.utc)},
                       {"priority": 2**40}):
            with pytest.raises(ConfigurationError):
                flow.add({}, **kwargs)
        with pytest.raises(TypeError):  # as JobQueue.add
            flow.add({}, priority="high")
