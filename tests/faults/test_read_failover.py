"""Reads through a failover (issue 29): ``JobQueue.get``/``counts`` and ``Flow.get``/``jobs``/``counts`` wait out a
leader election instead of raising kazoo's ConnectionLoss (so does a queue's start), and past their bounded wait raise
:class:`zkqueue.errors.ConnectionLostError`, chained from the last kazoo error, with a message that says so."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss
from kazoo.protocol.states import KazooState

from faultrun import strike  # type: ignore[import-not-found]

import zkqueue
from zkqueue import BytesSerializer, ConnectionLostError, QueueBuilder
from zkqueue.engine.commit import CONNECTION_ERRORS
from zkqueue.flows import Flow
from zkqueue.jobs import JobQueue
from zkqueue.server.testing import fresh_chroot, make_client, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.timeout(300)]


def _flow(client: Any) -> Flow:
    flow = Flow(client, "/flow")
    flow.step("a", lambda job: None)  # no worker runs it: the flow job stays RUNNING
    flow.start()
    return flow


def test_reads_wait_out_a_leader_kill(ensemble) -> None:
    client = make_client(fresh_chroot(ensemble.connect_string, "/read-failover-"))
    states: list[str] = []
    client.add_listener(states.append)
    jq = JobQueue(client, "/jobs")
    jq.start()
    flow = _flow(client)
    try:
        job_id = jq.add({"n": 1})
        flow_id = flow.add({"n": 1})
        assert job_id is not None and flow_id is not None
        stop = threading.Event()
        errors: list[BaseException] = []
        rounds = [0]

        def poll() -> None:
            while not stop.is_set():
                try:
                    assert jq.get(job_id) is not None
                    assert jq.counts()["queued"] == 1
                    assert flow.get(flow_id) is not None
                    assert flow.counts()["running"] == 1
                except BaseException as exc:  # noqa: BLE001 - the test's verdict
                    errors.append(exc)
                    return
                rounds[0] += 1

        poller = threading.Thread(target=poll, name="read-poller", daemon=True)
        poller.start()
        wait_for(lambda: rounds[0] >= 5 or errors, timeout=30, message="no reads before the kill")
        strike("leader_kill", ensemble)  # kill the leader, wait for a new one, start the old node again
        after = rounds[0]
        wait_for(lambda: rounds[0] >= after + 5 or errors or not poller.is_alive(), timeout=60,
                 message="the reads did not go on after the election")
        stop.set()
        poller.join(90)
        assert not poller.is_alive()
        assert not errors, f"a read raised through the failover: {errors[0]!r}"
        assert KazooState.SUSPENDED in states, "the client never lost its connection: the kill proved nothing"
    finally:
        flow.close()
        jq.close()
        client.stop()
        client.close()


def test_reads_raise_connection_lost_error_past_their_wait(ensemble) -> None:
    follower = ensemble.followers()[0]
    # a client of that one node only: frozen, it cannot reconnect anywhere (the ensemble keeps its quorum)
    client = make_client(fresh_chroot(ensemble.node_connect_string(follower), "/read-lost-"), timeout=4.0)
    flow = _flow(client)
    looker = Flow.open_existing(client, "/flow")  # read-only: no queue, waits on the client
    dq = QueueBuilder.builder(client, None, BytesSerializer(), "/q").put_outcome_wait(2.0).build_queue()
    dq.start()
    jq = JobQueue(client, "/jobs")  # not started: looks only
    try:
        flow_id = flow.add({"n": 1})
        assert flow.get(flow_id) is not None
        flow.read_wait = looker.read_wait = jq.read_wait = 2.0  # jq: the wait of a queue that is not started

        ensemble.pause(follower)  # SIGSTOP: the request in flight gets no reply; kazoo ends it with ConnectionLoss
        started = time.monotonic()
        with pytest.raises(ConnectionLostError) as lost:
            flow.get(flow_id)
        took = time.monotonic() - started
        err = lost.value
        assert 2.0 <= took < 15, took
        assert isinstance(err, ConnectionError) and isinstance(err, zkqueue.ZkQueueError)
        assert not isinstance(err, CONNECTION_ERRORS)  # kazoo retry loops do not swallow it
        assert isinstance(err.__cause__, ConnectionLoss) and err.cause is err.__cause__
        assert err.what == f"reading flow job {flow_id} of /flow" and err.waited >= 2.0
        message = str(err)
        assert message.startswith(f"reading flow job {flow_id} of /flow: no connection to ZooKeeper; waited ")
        assert "ConnectionLoss" in message, message

        wait_for(lambda: not client.connected, timeout=15, message="the client did not notice the frozen node")
        for what, read in [("counting the flow jobs of /flow", looker.counts),
                           ("listing /q", lambda: dq.read_retrying(lambda: client.get_children("/q"), "listing /q")),
                           ("reading job nope", lambda: jq.get("nope")),
                           ("starting queue /q2", QueueBuilder.builder(client, None, BytesSerializer(), "/q2")
                            .put_outcome_wait(2.0).build_queue().start)]:
            started = time.monotonic()
            with pytest.raises(ConnectionLostError) as lost:
                read()
            took = time.monotonic() - started
            assert 2.0 <= took < 6, (what, took)
            assert lost.value.what == what
            assert str(lost.value).startswith(f"{what}: no connection to ZooKeeper; waited 2."), str(lost.value)

        ensemble.resume(follower)
        wait_for(lambda: client.connected, timeout=30, message="the client did not reconnect")
        assert flow.get(flow_id) is not None and jq.get("nope") is None  # back to normal
    finally:
        ensemble.resume(follower)
        wait_for(lambda: client.connected, timeout=30)
        dq.close()
        looker.close()
        flow.close()
        jq.close()
        client.stop()
        client.close()
