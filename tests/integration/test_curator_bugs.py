"""One test per Curator queue bug that zkqueue fixes (curator-queue.md section 6)."""

from __future__ import annotations

import threading

import pytest
from kazoo.protocol.states import KazooState

from zkqueue.builder import QueueBuilder
from zkqueue.consumer import ConnectionState, QueueConsumer
from zkqueue.formats.serializers import JsonSerializer, StrSerializer
from zkqueue.server.testing import expire_session, lock_nodes, wait_for

QPATH = "/queues/jobs"
LPATH = "/queues/jobs-locks"


@pytest.mark.parametrize("lease", ["item", "block"])
def test_curator_605_expired_consumer_cannot_ack(zk_client_factory, lease) -> None:
    """A consumer whose session expired mid-item must not ack the item a new owner now holds. ``item``: the
    item is held by an item lease (the consumer's first step); ``block``: by a block lease (a consumer known to
    be fast)."""
    a_client = zk_client_factory()
    b_client = zk_client_factory()
    observer = zk_client_factory()
    a_started, a_go = threading.Event(), threading.Event()
    b_got, b_go = threading.Event(), threading.Event()
    a_got: list = []

    def consume_a(item) -> None:
        a_got.append(item)
        if item == "warm-up":
            return
        a_started.set()
        a_go.wait(30)

    def consume_b(item) -> None:
        b_got.set()
        b_go.wait(30)

    qa = QueueBuilder.builder(a_client, consume_a, StrSerializer(), QPATH).lock_path(LPATH).build_queue()
    qb = QueueBuilder.builder(b_client, consume_b, StrSerializer(), QPATH).lock_path(LPATH).build_queue()
    with qa:
        if lease == "block":
            qa.put("warm-up")  # after this step A knows it is fast and takes block leases
            wait_for(lambda: a_got == ["warm-up"] and observer.get_children(QPATH) == [])
        qa.put("job")
        wait_for(a_started.is_set)
        kinds = {n.split("-")[0] for n in lock_nodes(observer, LPATH)}
        assert kinds == ({"block"} if lease == "block" else {"queue"}), kinds
        (name,) = observer.get_children(QPATH)
        expire_session(a_client)
        wait_for(lambda: observer.get_children(LPATH) == [], message="A's ephemeral lock and fence should vanish")
        wait_for(lambda: a_client.state == KazooState.CONNECTED)
        with qb:
            wait_for(b_got.is_set, message="B should take over the item")
            a_go.set()  # A now tries to ack with its dead fence
            wait_for(lambda: qa.stats().lock_lost == 1)
            assert observer.exists(f"{QPATH}/{name}") is not None, "A's stale ack deleted B's item"
            b_go.set()
            wait_for(lambda: observer.get_children(QPATH) == [])
            wait_for(lambda: qb.stats().consumed == 1)
            assert qb.stats().lock_lost == 0
            wait_for(lambda: lock_nodes(observer, LPATH) == [])


def test_curator_336_consumer_gets_connection_states(zk_client_factory) -> None:
    states: list = []
    threads: list = []

    class Consumer(QueueConsumer):
        def consume_message(self, item) -> None:
            pass

        def state_changed(self, state) -> None:
            states.append(state)
            threads.append(threading.current_thread().name)

    client = zk_client_factory()
    with QueueBuilder.builder(client, Consumer(), StrSerializer(), QPATH).build_queue():
        expire_session(client)
        wait_for(lambda: ConnectionState.RECONNECTED in states, message=f"states: {states}")
    assert ConnectionState.LOST in states
    assert states.index(ConnectionState.LOST) < len(states) - 1 - states[::-1].index(ConnectionState.RECONNECTED)
    assert all(name.startswith("zkqueue-") for name in threads), threads


def test_curator_623_resync_after_session_expiry(zk_client_factory) -> None:
    got: list = []
    consumer_client = zk_client_factory()
    producer_client = zk_client_factory()
    with QueueBuilder.builder(consumer_client, got.append, JsonSerializer(), QPATH).build_queue() as q:
        with QueueBuilder.builder(producer_client, None, JsonSerializer(), QPATH).build_queue() as p:
            p.put(1)
            wait_for(lambda: got == [1])
            expire_session(consumer_client)
            wait_for(lambda: consumer_client.state == KazooState.CONNECTED and consumer_client.client_id is not None)
            p.put(2)
            wait_for(lambda: got == [1, 2], message=f"consumer stalled after expiry: {got}")
            assert q.stats().loop_errors == 0


def test_queue_node_deleted_is_recreated_not_stalled(zk_client_factory) -> None:
    """Curator's cache ignores NoNode and stalls forever; zkqueue recreates the node and keeps consuming."""
    got: list = []
    client = zk_client_factory()
    with QueueBuilder.builder(client, got.append, JsonSerializer(), QPATH).build_queue() as q:
        q.put(1)
        wait_for(lambda: got == [1])
        client.delete(QPATH)
        wait_for(lambda: q.stats().queue_recreated >= 1)
        q.put(2)
        wait_for(lambda: got == [1, 2])


def test_last_message_count_is_not_always_zero(zk_client) -> None:
    with QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).build_queue() as p:
        for i in range(3):
            p.put(str(i))
        assert p.flush_puts(10)
    gate = threading.Event()
    q = QueueBuilder.builder(zk_client, lambda item: gate.wait(10), StrSerializer(), QPATH).batch_size(1).build_queue()
    with q:
        # the first item is taken (deleted, at-most-once) and its consumer blocks: 2 remain listed
        wait_for(lambda: q.last_message_count == 2)
        gate.set()
        wait_for(lambda: q.last_message_count == 0)
