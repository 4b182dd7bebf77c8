"""Lifecycle details: threads joined on close, user executors left alone, held items given back on close."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from zkqueue.builder import QueueBuilder
from zkqueue.listeners import QueuePutListener
from zkqueue.formats.serializers import JsonSerializer, StrSerializer
from zkqueue.server.testing import lock_nodes, wait_for

QPATH = "/queues/life"
LPATH = "/queues/life-locks"


def _threads_of(path: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("zkqueue-") and t.name.endswith(path)]


def test_close_joins_own_threads_and_leaves_user_executor_running(zk_client) -> None:
    pool = ThreadPoolExecutor(2)
    got: list = []
    try:
        q = QueueBuilder.builder(zk_client, got.append, JsonSerializer(), QPATH).executor(pool).build_queue()
        with q:
            q.put(1)
            wait_for(lambda: got == [1])
            names = {t.name for t in _threads_of(QPATH)}
            assert {f"zkqueue-loop-{QPATH}", f"zkqueue-put-{QPATH}"} <= names
        wait_for(lambda: _threads_of(QPATH) == [], timeout=5)
        assert pool.submit(lambda: 42).result(5) == 42  # not shut down by close()
    finally:
        pool.shutdown()


def test_plain_consumption_on_executor_delivers_each_item_once(zk_client) -> None:
    counts: Counter = Counter()
    lock = threading.Lock()

    def consume(item) -> None:
        with lock:
            counts[item] += 1

    pool = ThreadPoolExecutor(4)
    try:
        with QueueBuilder.builder(zk_client, consume, JsonSerializer(), QPATH).executor(pool).build_queue() as q:
            q.put_multi(list(range(50)))
            for i in range(50, 300):
                q.put(i)
            wait_for(lambda: sum(counts.values()) >= 300)
    finally:
        pool.shutdown()
    assert set(counts) == set(range(300)) and set(counts.values()) == {1}


def test_several_plain_consumers_never_duplicate(zk_client_factory) -> None:
    counts: Counter = Counter()
    lock = threading.Lock()

    def consume(item) -> None:
        with lock:
            counts[item] += 1

    with QueueBuilder.builder(zk_client_factory(), None, JsonSerializer(), QPATH).build_queue() as p:
        for i in range(1000):
            p.put(i)
        assert p.flush_puts(30)
    queues = [
        QueueBuilder.builder(zk_client_factory(), consume, JsonSerializer(), QPATH).batch_size(50).build_queue()
        for _ in range(3)
    ]
    for q in queues:
        q.start()
    try:
        wait_for(lambda: sum(counts.values()) >= 1000, timeout=60)
    finally:
        for q in queues:
            q.close()
    assert set(counts) == set(range(1000)) and set(counts.values()) == {1}


def test_close_gives_back_locked_items_not_yet_consumed(zk_client_factory) -> None:
    producer = zk_client_factory()
    with QueueBuilder.builder(producer, None, StrSerializer(), QPATH).build_queue() as p:
        for i in range(5):
            p.put(str(i))
        assert p.flush_puts(10)
    started, go = threading.Event(), threading.Event()
    got: list = []

    def consume(item) -> None:
        got.append(item)
        started.set()
        go.wait(20)

    q = (
        QueueBuilder.builder(zk_client_factory(), consume, StrSerializer(), QPATH)
        .lock_path(LPATH)
        .batch_size(5)
        .build_queue()
    )
    q.start()
    wait_for(started.is_set)
    assert len(lock_nodes(producer, LPATH)) == 5  # the whole batch is locked
    closer = threading.Thread(target=q.close)
    closer.start()
    wait_for(lambda: q.is_closed)  # close() has begun
    go.set()
    closer.join(30)
    assert got == ["0"]
    assert producer.get_children(LPATH) == []
    remaining = sorted(producer.get_children(QPATH))
    assert len(remaining) == 4
    assert all(producer.get_children(f"{QPATH}/{name}") == [] for name in remaining)  # no fences left


def test_put_multi_listener_and_failure_carry_the_items(zk_client) -> None:
    multi: list = []
    failed: list = []

    class Listener(QueuePutListener):
        def put_multi_completed(self, items) -> None:
            multi.append(list(items))

        def put_failed(self, item, exc) -> None:
            failed.append(item)

    q = QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).build_queue()
    q.put_listeners.add(Listener())
    with q:
        q.put_multi(["a", "b"])
        assert q.flush_puts(10)
        zk_client.delete(QPATH, recursive=True)
        q.put_multi(["c", "d"])
        assert q.flush_puts(10)
    assert multi == [["a", "b"]]
    assert failed == [["c", "d"]]


def test_close_reports_unsent_background_puts_as_failed(zk_client) -> None:
    """final_flush_time(0): close() does not wait; puts not yet sent reach put_failed, none is lost silently."""
    release = threading.Event()
    completed: list = []
    failed: list = []

    class Listener(QueuePutListener):
        def put_completed(self, item) -> None:
            release.wait(10)  # holds the put thread on the first put
            completed.append(item)

        def put_failed(self, item, exc) -> None:
            failed.append(item)

    q = QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).final_flush_time(0).build_queue()
    q.put_listeners.add(Listener())
    q.start()
    q.put("first")
    wait_for(lambda: zk_client.get_children(QPATH) != [])  # "first" is stored; its listener blocks
    for i in range(5):
        q.put(f"later-{i}")
    closer = threading.Thread(target=q.close)
    closer.start()
    wait_for(lambda: q.is_closed)
    release.set()
    closer.join(30)
    assert not closer.is_alive()
    assert len(completed) + len(failed) == 6
    assert completed[0] == "first"
    stored = len(zk_client.get_children(QPATH))
    assert stored == len(completed)  # what was reported completed is exactly what is stored
