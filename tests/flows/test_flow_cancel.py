"""Flow.cancel on a real ZooKeeper: a flow job waiting in its first step, and one whose step is running, end
CANCELLED; nothing after the cancel starts; the running step's result is kept; unknown and finished ids say False."""

from __future__ import annotations

import threading

import pytest

from zkqueue.errors import ConfigurationError
from zkqueue.flows import Flow, FlowState
from zkqueue.server.testing import wait_for

PATH = "/flows/cancel"


def test_cancel_a_waiting_and_a_running_flow_job(zk_client) -> None:
    running, release = threading.Event(), threading.Event()
    ran: list[tuple[str, str]] = []

    def first(job):  # noqa: ANN001, ANN202
        ran.append(("first", job.id))
        if job.id == "busy":
            running.set()
            assert release.wait(30)
        return "first done"

    flow = Flow(zk_client, PATH)
    flow.step("first", first, next="second")
    flow.step("second", lambda job: ran.append(("second", job.id)))
    with flow:
        flow.add({}, job_id="busy")
        with flow.work(concurrency=1, prefetch=0):
            assert running.wait(30)
            flow.add({}, job_id="waiting")  # queued behind the busy one (one slot)
            assert flow.cancel("waiting") is True
            assert flow.get("waiting").state is FlowState.CANCELLED
            assert flow.queue("first").counts()["queued"] == 0  # its step job is gone
            assert flow.cancel("busy") is True  # its first step is running
            release.set()
            wait_for(lambda: flow.get("busy").results.get("first") == "first done", timeout=30)
            flow.add({}, job_id="after")  # the worker goes on with other flow jobs
            assert flow.wait("after", timeout=30).state is FlowState.COMPLETED
        busy = flow.get("busy")
        assert busy.state is FlowState.CANCELLED and busy.results == {"first": "first done"}
        assert ("second", "busy") not in ran and ("first", "waiting") not in ran  # nothing started after
        assert flow.cancel("busy") is False and flow.cancel("after") is False and flow.cancel("nope") is False
        assert flow.counts()["cancelled"] == 2 and flow.counts()["completed"] == 1


def test_cancel_checks_the_id_and_works_on_an_opened_flow(zk_client) -> None:
    flow = Flow(zk_client, PATH)
    flow.step("first", lambda job: None)
    with flow:
        with pytest.raises(ConfigurationError):
            flow.cancel("")
        with pytest.raises(TypeError):
            flow.cancel(42)  # type: ignore[arg-type]
        flow.add({}, job_id="queued")
        looker = Flow.open_existing(zk_client, PATH)  # no handlers: an operator's view (the CLI's)
        try:
            assert looker.cancel("queued") is True and looker.cancel("queued") is False
        finally:
            looker.close()
        assert flow.get("queued").state is FlowState.CANCELLED and flow.queue("first").counts()["queued"] == 0
