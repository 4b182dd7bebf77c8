"""Bounded queues (max_items): Curator's TestBoundedDistributedQueue, plus zkqueue's stricter counting."""

from __future__ import annotations

import threading

from zkqueue.builder import QueueBuilder
from zkqueue.formats.serializers import StrSerializer
from zkqueue.server.testing import wait_for

QPATH = "/queues/bounded"
LPATH = "/queues/bounded-locks"


def test_simple(zk_client) -> None:
    """Curator testSimple: max_items(1); a put with a timeout returns False while full."""
    got: list = []
    taken = threading.Event()
    release = threading.Event()

    def consume(item) -> None:
        got.append(item)
        taken.set()
        release.wait(20)

    with QueueBuilder.builder(zk_client, consume, StrSerializer(), QPATH).max_items(1).build_queue() as q:
        assert q.put("1") is True
        wait_for(taken.is_set)  # "1" was taken off the queue; the consumer now blocks
        assert q.put("2") is True
        wait_for(lambda: q.last_message_count == 1)
        assert q.put("3", timeout=0.5) is False
        release.set()
        for item in ("3", "4", "5"):
            assert q.put(item, timeout=10.0) is True
        wait_for(lambda: len(got) == 5)
    assert got == ["1", "2", "3", "4", "5"]


def test_multi(zk_client_factory) -> None:
    """Curator testMulti: 4 producer/consumers, max_items=10, a lock: the child count never passes 40."""
    per_client = 150
    consumed: list = []
    lock = threading.Lock()
    observer = zk_client_factory()

    def consume(item) -> None:
        with lock:
            consumed.append(item)

    queues = [
        QueueBuilder.builder(zk_client_factory(), consume, StrSerializer(), QPATH)
        .lock_path(LPATH)
        .max_items(10)
        .build_queue()
        for _ in range(4)
    ]
    for q in queues:
        q.start()
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(len(observer.get_children(QPATH)))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        producers = [
            threading.Thread(target=lambda q=q, k=k: [q.put(f"{k}-{i}") for i in range(per_client)])
            for k, q in enumerate(queues)
        ]
        for t in producers:
            t.start()
        for t in producers:
            t.join(60)
        wait_for(lambda: len(consumed) >= 4 * per_client, timeout=60)
    finally:
        stop.set()
        sampler.join()
        for q in queues:
            q.close()
    assert sorted(consumed) == sorted(f"{k}-{i}" for k in range(4) for i in range(per_client))
    assert samples and max(samples) <= 40, max(samples)


def test_foreign_children_do_not_count(zk_client) -> None:
    zk_client.ensure_path(f"{QPATH}/foreign-a")
    zk_client.ensure_path(f"{QPATH}/foreign-b")
    with QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).max_items(2).build_queue() as q:
        assert q.put("1", timeout=5) is True
        assert q.put("2", timeout=5) is True
        assert q.put("3", timeout=0.3) is False
        assert q.last_message_count == 2


def test_put_multi_respects_bound(zk_client) -> None:
    with QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).max_items(1).build_queue() as q:
        assert q.put_multi(["a", "b"], timeout=5) is True
        assert q.put_multi(["c"], timeout=0.3) is False
        assert len(zk_client.get_children(QPATH)) == 1
