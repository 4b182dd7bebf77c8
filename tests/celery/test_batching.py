"""Batched publishes and acks of ``zkqueue://``: concurrent publishes share multis yet each is durable when its
publish returns; acks are committed together by one thread yet a channel's close commits them, and a message
counts against the prefetch until its ack committed."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import kombu
from kazoo.client import KazooClient

from zkqueue.formats import naming

ROOT = Path(__file__).resolve().parents[2]


def _items(zk: KazooClient, queue: str) -> list[str]:
    """The message nodes of kombu queue ``queue`` stored in ZooKeeper (held or not)."""
    return [n for n in zk.get_children(f"/kombu/queues/{queue}") if naming.is_item_name(n)]


def _leases(zk: KazooClient, queue: str) -> list[str]:
    """The item leases of ``queue`` (messages delivered and not acked, or acked and not committed)."""
    path = f"/kombu/locks/{queue}"
    return [n for n in zk.get_children(path) if n.startswith("queue-")] if zk.exists(path) else []


def _run(url: str, code: str) -> str:
    """Run ``code`` (with ``url`` bound) in a fresh Python process; its stdout."""
    proc = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _drain_all(conn: kombu.Connection, queue: kombu.Queue, count: int, prefetch: int,
               on_message: Any = None) -> list[Any]:
    bodies: list[Any] = []

    def callback(body: Any, message: Any) -> None:
        if on_message is not None:
            on_message()
        bodies.append(body)
        message.ack()

    with conn.channel() as channel:
        with kombu.Consumer(channel, [queue], callbacks=[callback], prefetch_count=prefetch):
            while len(bodies) < count:
                conn.drain_events(timeout=10)
    return bodies


def test_concurrent_publishes_are_each_stored_when_they_return_and_delivered_once(
        connection_factory: Any, zk_client: KazooClient) -> None:
    queue = kombu.Queue("cq", routing_key="cq")
    threads, per_thread = 6, 20
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def publish(t: int) -> None:
        try:
            with connection_factory() as conn, conn.channel() as channel:
                producer = kombu.Producer(channel)
                start.wait(10)
                for i in range(per_thread):
                    producer.publish({"t": t, "i": i}, routing_key="cq", declare=[queue])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=publish, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not errors, errors
    # every publish returned only once stored: another session sees them all, with no flush in between
    assert len(_items(zk_client, "cq")) == threads * per_thread
    with connection_factory() as conn:
        bodies = _drain_all(conn, queue, threads * per_thread, prefetch=25)
    assert sorted((b["t"], b["i"]) for b in bodies) == [(t, i) for t in range(threads) for i in range(per_thread)]
    for t in range(threads):  # each publisher's messages in its publish order
        assert [b["i"] for b in bodies if b["t"] == t] == list(range(per_thread))
    assert _items(zk_client, "cq") == []


def test_a_publisher_that_exits_right_after_publishing_loses_nothing(broker_url: str, connection: kombu.Connection,
                                                                     zk_client: KazooClient) -> None:
    out = _run(broker_url, (
        "import os, sys, kombu, zkqueue.celery\n"
        "conn = kombu.Connection(sys.argv[1], connect_timeout=10)\n"
        "queue = conn.SimpleQueue('exiting')\n"
        "for i in range(15):\n"
        "    queue.put({'i': i})\n"
        "print('SENT', flush=True)\n"
        "os._exit(0)  # no close, no atexit: only what publish made durable remains\n"))
    assert out.strip() == "SENT"
    assert len(_items(zk_client, "exiting")) == 15
    with connection as conn:
        queue = conn.SimpleQueue("exiting")
        got = [queue.get(timeout=10) for _ in range(15)]
        assert [m.payload["i"] for m in got] == list(range(15))
        for m in got:
            m.ack()
        queue.close()


def test_acks_commit_before_close_returns_and_nothing_comes_back(broker_url: str, connection: kombu.Connection,
                                                                  zk_client: KazooClient) -> None:
    queue = kombu.Queue("acked", routing_key="acked")
    with connection as conn, conn.channel() as channel:
        producer = kombu.Producer(channel)
        for i in range(40):
            producer.publish({"i": i}, routing_key="acked", declare=[queue])
    out = _run(broker_url, (
        "import os, sys, kombu, zkqueue.celery\n"
        "conn = kombu.Connection(sys.argv[1], connect_timeout=10)\n"
        "queue = kombu.Queue('acked', routing_key='acked')\n"
        "got = []\n"
        "def on(body, message):\n"
        "    got.append(body['i'])\n"
        "    message.ack()  # handed to the group commit; returns at once\n"
        "with conn.channel() as channel:\n"
        "    with kombu.Consumer(channel, [queue], callbacks=[on], prefetch_count=10):\n"
        "        while len(got) < 40:\n"
        "            conn.drain_events(timeout=10)\n"
        "# the channel's close committed its acks; the connection stays open\n"
        "print(sorted(got) == list(range(40)), flush=True)\n"
        "os._exit(0)  # no release, no atexit: an ack not committed would leave its message behind\n"))
    assert out.strip() == "True"
    assert _items(zk_client, "acked") == []  # every ack committed: no message is left to come back
    assert _leases(zk_client, "acked") == []
    with connection as conn:
        with conn.SimpleQueue("acked") as again:
            try:
                message = again.get(timeout=0.5)
            except again.Empty:
                message = None
            assert message is None


def test_an_acked_message_counts_against_the_prefetch_until_its_ack_committed(connection: kombu.Connection,
                                                                               zk_client: KazooClient) -> None:
    queue = kombu.Queue("bounded", routing_key="bounded")
    count, prefetch = 30, 4
    seen: list[int] = []
    with connection as conn:
        with conn.channel() as channel:
            producer = kombu.Producer(channel)
            for i in range(count):
                producer.publish(i, routing_key="bounded", declare=[queue])
        bodies = _drain_all(conn, queue, count, prefetch,
                            on_message=lambda: seen.append(len(_leases(zk_client, "bounded"))))
    assert bodies == list(range(count))
    assert max(seen) <= prefetch, seen  # never more held in ZooKeeper than the prefetch allows
    assert _items(zk_client, "bounded") == [] and _leases(zk_client, "bounded") == []
