"""zkqueue <-> Apache Curator 5.9.0 on the same queue (Curator runs in a JVM through zkqueue.interop)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from zkqueue.builder import QueueBuilder
from zkqueue.interop import CuratorPeer
from zkqueue.formats.serializers import BytesSerializer
from zkqueue.server.testing import wait_for

pytestmark = pytest.mark.interop

QPATH = "/queues/jobs"
LPATH = "/queues/jobs-locks"


@pytest.fixture
def peer(zk_hosts: str) -> CuratorPeer:
    return CuratorPeer(zk_hosts)


def test_zkqueue_puts_curator_consumes(peer, zk_client) -> None:
    items = [b"", b"abc", bytes(range(256)), b"x" * 5000]
    with QueueBuilder.builder(zk_client, None, BytesSerializer(), QPATH).build_queue() as q:
        for item in items:
            q.put(item)
        q.put_multi([b"m1", b"m2", b"m3"])
        assert q.flush_puts(10)
    assert peer.consume(QPATH, count=len(items) + 3, timeout=30) == items + [b"m1", b"m2", b"m3"]
    assert zk_client.get_children(QPATH) == []


@pytest.mark.parametrize("locked", [False, True], ids=["plain", "lock-safe"])
def test_curator_puts_zkqueue_consumes(peer, zk_client, locked) -> None:
    items = [f"item-{i}".encode() for i in range(20)]
    assert peer.put(QPATH, items) == len(items)
    peer.put_multi(QPATH, [b"a", b"b"])
    got: list = []
    b = QueueBuilder.builder(zk_client, got.append, BytesSerializer(), QPATH)
    if locked:
        b = b.lock_path(LPATH)
    with b.build_queue():
        wait_for(lambda: len(got) == 22)
    assert got == items + [b"a", b"b"]
    assert zk_client.get_children(QPATH) == []


def test_curator_and_zkqueue_lock_safe_consumers_share_a_queue(peer, zk_client_factory) -> None:
    """With lock_names('curator') zkqueue and Curator consumers exclude each other: no item twice."""
    n = 300
    items = [f"{i:04d}".encode() for i in range(n)]
    producer = zk_client_factory()
    got: list = []
    lock = threading.Lock()

    curator = None

    def consume(item) -> None:
        if not got:
            # Hold the first item (and its batch's locks) until Curator has taken something, so both
            # consumers really work the same queue at the same time, however fast either one is.
            wait_for(lambda: curator is not None and curator.items(), timeout=30, message="Curator took nothing")
        with lock:
            got.append(item)

    with peer.start_consumer(QPATH, lock_path=LPATH, timeout=60, quiet=False) as curator:
        q = (
            QueueBuilder.builder(zk_client_factory(), consume, BytesSerializer(), QPATH)
            .lock_path(LPATH)
            .lock_names("curator")
            .batch_size(20)
            .build_queue()
        )
        with q, QueueBuilder.builder(producer, None, BytesSerializer(), QPATH).build_queue() as p:
            for item in items:
                p.put(item)
            assert p.flush_puts(30)
            wait_for(lambda: len(got) + len(curator.items()) >= n, timeout=60)
        from_curator = curator.stop()
    assert got and from_curator, (len(got), len(from_curator))  # both really took part
    counts = Counter(got + from_curator)
    assert set(counts) == set(items)
    assert max(counts.values()) == 1, [k for k, v in counts.items() if v > 1][:5]
