"""``confirm_publish=False``: a publish returns once its message is handed to the process's put thread, which commits
the messages in publish order, many per multi, exactly once through a lost reply and across a leader's death;
closing the process's last connection to the servers waits for them."""

from __future__ import annotations

import time
from typing import Any

import kombu
import pytest

from tests.celery.consuming import take_all
from zkqueue.server.testing import fresh_chroot

UNCONFIRMED = {"confirm_publish": False}


def _publish(conn: kombu.Connection, queue: kombu.Queue, bodies: list[Any], on_each: Any = None) -> None:
    with conn.channel() as channel:
        producer = kombu.Producer(channel)
        for i, body in enumerate(bodies):
            if on_each is not None:
                on_each(i)
            producer.publish(body, exchange=queue.exchange, routing_key=queue.routing_key, declare=[queue])


def test_unconfirmed_publishes_commit_in_order_and_closing_the_connection_waits_for_them(
        connection_factory: Any) -> None:
    queue = kombu.Queue("unconfirmed", routing_key="unconfirmed")
    producer_conn = connection_factory(transport_options=UNCONFIRMED)
    started = time.monotonic()
    _publish(producer_conn, queue, list(range(400)))
    producer_conn.release()  # the process's last connection: its release waits for the put thread
    assert time.monotonic() - started < 60
    consumer_conn = connection_factory()
    assert consumer_conn.default_channel.queue_declare("unconfirmed", passive=True).message_count == 400
    got = take_all(consumer_conn, queue, 400, settle=0.5)
    assert got == list(range(400))  # every message, once, in publish order


@pytest.mark.ensemble
@pytest.mark.faults
@pytest.mark.timeout(300)
def test_unconfirmed_publishes_through_a_leader_kill_are_stored_exactly_once(zk_ensemble: Any) -> None:
    url = "zkqueue://" + fresh_chroot(zk_ensemble.connect_string)
    queue = kombu.Queue("through-kill", routing_key="through-kill")
    count = 3000
    producer_conn = kombu.Connection(url, connect_timeout=10, transport_options=UNCONFIRMED)
    consumer_conn = kombu.Connection(url, connect_timeout=10)
    killed: list[int] = []

    def kill_the_leader_midway(i: int) -> None:
        if i == count // 2:
            killed.append(zk_ensemble.leader())
            zk_ensemble.kill(killed[0])

    try:
        _publish(producer_conn, queue, list(range(count)), on_each=kill_the_leader_midway)
        producer_conn.release()
        assert killed, "the leader was not killed"
        zk_ensemble.start(killed[0])
        got = take_all(consumer_conn, queue, count, timeout=120, settle=0.5)
    finally:
        if killed and not zk_ensemble.is_running(killed[0]):
            zk_ensemble.start(killed[0])
        consumer_conn.release()
    missing = sorted(set(range(count)) - set(got))
    twice = sorted(n for n in set(got) if got.count(n) > 1)
    assert (len(got), missing, twice) == (count, [], [])
    assert got == sorted(got)  # and in publish order
