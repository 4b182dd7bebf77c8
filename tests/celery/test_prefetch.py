"""Claims off the event loop (:mod:`zkqueue.celery.prefetch`): under kombu's event loop (the hub Celery's worker
runs) a connection's claims run on its claiming thread, the loop only delivers; the prefetch bounds what is held,
claimed-but-undelivered included; what was claimed for a consumer that goes away goes back to the queue."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import kombu
from kombu.asynchronous import Hub

from tests.celery.consuming import take_all
from zkqueue.celery.queues import QueueStore
from zkqueue.server.testing import wait_for


@contextlib.contextmanager
def _event_loop(conn: kombu.Connection) -> Iterator[Hub]:
    """kombu's event loop with ``conn`` registered on it (its claiming thread runs from then on); unregistered and
    closed on the way out."""
    hub = Hub()
    conn.transport.register_with_event_loop(conn.connection, hub)
    try:
        yield hub
    finally:
        conn.transport.unregister_from_event_loop(conn.connection, hub)
        hub.close()


def _run_until(hub: Hub, got: list[int], count: int, seconds: float) -> None:
    """Run the loop until ``count`` messages were delivered into ``got``, or ``seconds`` passed."""
    deadline = time.monotonic() + seconds
    while len(got) < count and time.monotonic() < deadline:
        hub.run_once()


def _publish(conn: kombu.Connection, queue: kombu.Queue, bodies: list[int]) -> None:
    with conn.channel() as channel:
        producer = kombu.Producer(channel)
        for body in bodies:
            producer.publish(body, exchange=queue.exchange, routing_key=queue.routing_key, declare=[queue])


class ClaimThreads:
    """Records the thread of every claim the store makes (the real claim still runs)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self._claim_fresh = QueueStore.claim_fresh
        recorder = self

        def claim_fresh(store: QueueStore, *args: Any, **kwargs: Any) -> list[Any]:
            recorder.names.add(threading.current_thread().name)
            return recorder._claim_fresh(store, *args, **kwargs)

        self.patched = claim_fresh


def test_under_an_event_loop_claims_run_off_the_loop_and_the_prefetch_bounds_what_is_held(
        connection_factory: Any, monkeypatch: Any) -> None:
    claims = ClaimThreads()
    monkeypatch.setattr(QueueStore, "claim_fresh", claims.patched)
    queue = kombu.Queue("loop", routing_key="loop")
    consumer_conn, producer_conn = connection_factory(), connection_factory()
    got: list[int] = []
    loop_threads: set[str] = set()
    most_held = 0
    channel = consumer_conn.default_channel
    channel.basic_qos(0, 8, False)

    def on_message(body: int, message: Any) -> None:
        nonlocal most_held
        loop_threads.add(threading.current_thread().name)
        # held, or claimed and not delivered (the message being delivered counts in both until its delivery ends)
        most_held = max(most_held, channel.qos.held_count + channel.ready.count - 1)
        got.append(body)
        message.ack()

    with consumer_conn.Consumer([queue], channel=channel, callbacks=[on_message]), _event_loop(consumer_conn) as hub:
        _publish(producer_conn, queue, list(range(300)))
        _run_until(hub, got, 300, 60)
    assert sorted(got) == list(range(300)), f"{len(got)} delivered, {len(set(got))} distinct"
    assert loop_threads == {threading.current_thread().name}  # delivered on the loop's thread
    assert claims.names == {"zkqueue-celery-prefetch"}, claims.names  # and never claimed there
    assert most_held <= 8


def test_messages_claimed_for_a_consumer_that_is_cancelled_go_back_to_the_queue_at_once(
        connection_factory: Any) -> None:
    queue = kombu.Queue("cancelled", routing_key="cancelled")
    consumer_conn, producer_conn, other_conn = connection_factory(), connection_factory(), connection_factory()
    _publish(producer_conn, queue, list(range(20)))
    channel = consumer_conn.default_channel
    channel.basic_qos(0, 5, False)
    consumer = consumer_conn.Consumer([queue], channel=channel, callbacks=[lambda body, message: message.ack()])
    consumer.consume()
    with _event_loop(consumer_conn):
        # The loop never runs: what the claiming thread takes stays claimed and undelivered, up to the prefetch.
        wait_for(lambda: channel.ready.count == 5, timeout=10, message=lambda: f"ready: {channel.ready.count}")
        time.sleep(0.3)
        assert channel.ready.count == 5
        consumer.cancel()
        assert channel.ready.count == 0
        # the 5 claimed ones came back at once, not with the session
        assert sorted(take_all(other_conn, queue, 20)) == list(range(20))


def test_closing_a_channel_gives_back_what_was_claimed_for_it(connection_factory: Any) -> None:
    queue = kombu.Queue("closed", routing_key="closed")
    consumer_conn, producer_conn, other_conn = connection_factory(), connection_factory(), connection_factory()
    _publish(producer_conn, queue, list(range(6)))
    channel = consumer_conn.channel()
    channel.basic_qos(0, 4, False)
    consumer = kombu.Consumer(channel, [queue], callbacks=[lambda body, message: message.ack()])
    consumer.consume()
    with _event_loop(consumer_conn):
        wait_for(lambda: channel.ready.count == 4, timeout=10, message=lambda: f"ready: {channel.ready.count}")
        channel.close()
        assert sorted(take_all(other_conn, queue, 6)) == list(range(6))


def test_a_consumer_with_a_full_prefetch_does_not_list_the_queue_on_every_publish(connection_factory: Any) -> None:
    """While a channel's prefetch is full, its claiming thread waits for an ack, not for the queue: it used to wait
    on the queue's watch, so every publish made it list the whole queue (a listing costs as much as the backlog is
    long; a Celery worker behind its producer listed once per 5 messages). Nothing is lost by not looking: the
    messages are delivered once the window opens."""
    queue = kombu.Queue("full-window", routing_key="full-window")
    consumer_conn, producer_conn = connection_factory(), connection_factory()
    _publish(producer_conn, queue, list(range(5)))
    channel = consumer_conn.default_channel
    channel.basic_qos(0, 5, False)
    got: list[int] = []

    def on_message(body: int, message: Any) -> None:
        got.append(body)
        message.ack()

    with consumer_conn.Consumer([queue], channel=channel, callbacks=[on_message]), _event_loop(consumer_conn) as hub:
        # The loop does not run yet: the claiming thread fills the window with the first five and waits.
        wait_for(lambda: channel.ready.count == 5, timeout=10, message=lambda: f"ready: {channel.ready.count}")
        engine_queue = channel.store.get("full-window")
        listings = engine_queue.stats().listings
        _publish(producer_conn, queue, list(range(5, 35)))  # 30 publishes, each one a change of the queue
        time.sleep(0.5)  # a window for the listings it must not make (the old code made 22 in it)
        assert engine_queue.stats().listings - listings <= 1, (listings, engine_queue.stats().listings)
        _run_until(hub, got, 35, 30)
    assert sorted(got) == list(range(35))
