"""Acks on leases: reject/requeue, prefetch bound, priorities, fanout across connections, large messages."""

from __future__ import annotations

import socket
import time
from typing import Any

import kombu
import pytest


def _publish(conn: kombu.Connection, queue: kombu.Queue, bodies: list[Any], **kwargs: Any) -> None:
    with conn.channel() as channel:
        producer = kombu.Producer(channel)
        for body in bodies:
            producer.publish(body, exchange=queue.exchange, routing_key=queue.routing_key, declare=[queue],
                             **kwargs)


def test_reject_requeue_gives_the_same_message_back_and_reject_drops(connection: kombu.Connection) -> None:
    with connection as conn:
        queue = conn.SimpleQueue("rq")
        queue.put({"n": 1})
        queue.put({"n": 2})
        first = queue.get_nowait()  # basic_get: one message (a blocking get drains in bulk into a buffer)
        assert first.payload == {"n": 1}
        first.reject(requeue=True)  # released: same node, still ahead of n=2
        again = queue.get_nowait()
        assert again.payload == {"n": 1}
        again.reject(requeue=False)  # dropped
        second = queue.get_nowait()
        assert second.payload == {"n": 2}
        second.ack()
        with pytest.raises(queue.Empty):
            queue.get(timeout=0.5)
        queue.close()


def test_prefetch_bounds_held_messages(connection: kombu.Connection) -> None:
    queue = kombu.Queue("pf", routing_key="pf")
    got: list[Any] = []
    with connection as conn:
        _publish(conn, queue, list(range(10)))
        with conn.channel() as channel:
            consumer = kombu.Consumer(channel, [queue], callbacks=[lambda body, msg: got.append(msg)],
                                      prefetch_count=3)
            with consumer:
                conn.drain_events(timeout=5)
                assert len(got) == 3  # one drain delivers in bulk, up to the prefetch
                began = time.monotonic()
                for _ in range(2):  # and answers the next two calls at once: one message per call, as counted
                    conn.drain_events(timeout=5)
                assert len(got) == 3 and time.monotonic() - began < 2.0
                with pytest.raises(socket.timeout):
                    conn.drain_events(timeout=0.5)  # nothing more until an ack
                assert channel.qos.held_count == 3
                got[0].ack()
                conn.drain_events(timeout=5)
                assert len(got) == 4
                assert [m.payload for m in got] == [0, 1, 2, 3]
                for m in got[1:]:
                    m.ack()
            assert channel.queue_declare("pf", passive=True).message_count == 6


def test_a_new_consumer_waits_for_its_own_messages_after_a_bulk_delivery(connection: kombu.Connection) -> None:
    """The calls a bulk delivery answers ahead end with its consumer: a reply consumer made afterwards (kombu's
    pidbox makes one per ``inspect``, and counts one message per call) still gets its reply."""
    first, second = kombu.Queue("bulk", routing_key="bulk"), kombu.Queue("after", routing_key="after")
    got: list[Any] = []
    with connection as conn:
        _publish(conn, first, [1, 2, 3])
        with conn.channel() as channel:
            with kombu.Consumer(channel, [first], callbacks=[lambda body, msg: (got.append(body), msg.ack())]):
                conn.drain_events(timeout=5)
            assert got == [1, 2, 3]
            _publish(conn, second, ["reply"])
            with kombu.Consumer(channel, [second], callbacks=[lambda body, msg: (got.append(body), msg.ack())]):
                conn.drain_events(timeout=5)
            assert got == [1, 2, 3, "reply"]


def test_priorities_lower_number_first(connection: kombu.Connection) -> None:
    queue = kombu.Queue("prio", routing_key="prio", max_priority=9)
    got: list[Any] = []
    with connection as conn:
        with conn.channel() as channel:
            producer = kombu.Producer(channel)
            for body, priority in [("a6", 6), ("b0", 0), ("c9", 9), ("d0", 0), ("e3", 3)]:
                producer.publish(body, exchange=queue.exchange, routing_key="prio", declare=[queue],
                                 priority=priority)
            with kombu.Consumer(channel, [queue], callbacks=[lambda body, msg: (got.append(body), msg.ack())]):
                while len(got) < 5:
                    conn.drain_events(timeout=5)
    assert got == ["b0", "d0", "e3", "a6", "c9"]


def test_fanout_across_two_connections(connection_factory: Any) -> None:
    exchange = kombu.Exchange("fan", type="fanout")
    received: dict[str, list[Any]] = {"one": [], "two": []}
    consumers = []
    conns = [connection_factory(), connection_factory()]
    publisher = connection_factory()
    try:
        for name, conn in zip(received, conns):
            queue = kombu.Queue(f"fan-{name}", exchange=exchange, auto_delete=True)
            channel = conn.channel()
            consumer = kombu.Consumer(channel, [queue],
                                      callbacks=[lambda body, msg, n=name: (received[n].append(body), msg.ack())])
            consumer.consume()
            consumers.append(consumer)
        with publisher.channel() as channel:
            kombu.Producer(channel, exchange=exchange).publish({"hello": "all"})
        for conn in conns:
            conn.drain_events(timeout=5)
        assert received == {"one": [{"hello": "all"}], "two": [{"hello": "all"}]}
    finally:
        for consumer in consumers:
            consumer.cancel()


def test_large_message_goes_through_the_side_channel(connection: kombu.Connection) -> None:
    body = "x" * (2 * 1024 * 1024)
    with connection as conn:
        queue = conn.SimpleQueue("big")
        queue.put({"blob": body})
        message = queue.get(timeout=10)
        assert message.payload == {"blob": body}
        message.ack()
        queue.close()


def test_basic_recover_gives_back_unacked(connection: kombu.Connection) -> None:
    with connection as conn:
        queue = conn.SimpleQueue("rec")
        queue.put("m")
        first = queue.get_nowait()
        queue.channel.basic_recover(requeue=True)
        again = queue.get_nowait()
        assert again.payload == "m"
        again.ack()
        first.ack()  # given back already: its ack does nothing
        with pytest.raises(queue.Empty):
            queue.get_nowait()
        queue.close()
