"""DistributedQueue without a lock path: Curator's TestDistributedQueue (plain tests), wire format, lifecycle."""

from __future__ import annotations

import threading

import pytest
from kazoo.exceptions import NoNodeError

from zkqueue.builder import QueueBuilder
from zkqueue.consumer import QueueConsumer
from zkqueue.errors import (
    ConfigurationError,
    InvalidPathError,
    ItemTooLargeError,
    QueueClosedError,
    QueueNotStartedError,
    QueueStateError,
)
from zkqueue.listeners import QueuePutListener
from zkqueue.formats.serializers import BytesSerializer, JsonSerializer, StrSerializer
from zkqueue.server.testing import wait_for

QPATH = "/queues/jobs"


class Collector(QueueConsumer):
    def __init__(self) -> None:
        self.items: list = []
        self.lock = threading.Lock()

    def consume_message(self, item) -> None:
        with self.lock:
            self.items.append(item)


class RecordingPutListener(QueuePutListener):
    def __init__(self) -> None:
        self.completed: list = []
        self.multi: list = []
        self.failed: list = []

    def put_completed(self, item) -> None:
        self.completed.append(item)

    def put_multi_completed(self, items) -> None:
        self.multi.append(list(items))

    def put_failed(self, item, exc) -> None:
        self.failed.append((item, exc))


def test_simple_fifo(zk_client) -> None:
    """Curator testSimple: 10 items come out FIFO."""
    consumer = Collector()
    with QueueBuilder.builder(zk_client, consumer, JsonSerializer(), QPATH).build_queue() as q:
        for i in range(10):
            q.put(i)
        wait_for(lambda: len(consumer.items) == 10, message=f"got {consumer.items}")
        assert consumer.items == list(range(10))
        wait_for(lambda: zk_client.get_children(QPATH) == [])


def test_put_abc_wire_bytes(zk_client) -> None:
    with QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).put_in_background(False).build_queue() as q:
        q.put("abc")
    (name,) = zk_client.get_children(QPATH)
    assert name.startswith("queue-") and len(name) == len("queue-") + 10 and name[6:].isdigit()
    data, _ = zk_client.get(f"{QPATH}/{name}")
    assert data == bytes.fromhex("00 01 00 01 01 00 00 00 03 61 62 63 02")


def test_put_listener(zk_client) -> None:
    """Curator testPutListener: 10 items FIFO, put_completed called exactly 10 times."""
    consumer = Collector()
    listener = RecordingPutListener()
    q = QueueBuilder.builder(zk_client, consumer, StrSerializer(), QPATH).build_queue()
    q.put_listeners.add(listener)
    with q:
        for i in range(10):
            q.put(f"item-{i}")
        assert q.flush_puts(10.0)
        wait_for(lambda: len(consumer.items) == 10)
    assert listener.completed == [f"item-{i}" for i in range(10)]
    assert consumer.items == listener.completed
    assert listener.failed == [] and listener.multi == []


def test_put_multi_one_znode_in_order(zk_client) -> None:
    """Curator testPutMulti: 100 items in one znode, delivered in order."""
    listener = RecordingPutListener()
    producer = QueueBuilder.builder(zk_client, None, JsonSerializer(), QPATH).build_queue()
    producer.put_listeners.add(listener)
    with producer:
        producer.put_multi(list(range(100)))
        assert producer.flush_puts(10.0)
    assert len(zk_client.get_children(QPATH)) == 1
    assert listener.multi == [list(range(100))]
    consumer = Collector()
    with QueueBuilder.builder(zk_client, consumer, JsonSerializer(), QPATH).build_queue():
        wait_for(lambda: len(consumer.items) == 100)
    assert consumer.items == list(range(100))


def test_multi_putter_single_getter(zk_client_factory) -> None:
    """Curator testMultiPutterSingleGetter: 2 x 50 puts, 100 received, no duplicates."""
    consumer = Collector()
    c1, c2, c3 = zk_client_factory(), zk_client_factory(), zk_client_factory()
    with QueueBuilder.builder(c3, consumer, StrSerializer(), QPATH).build_queue():
        with QueueBuilder.builder(c1, None, StrSerializer(), QPATH).build_queue() as p1, QueueBuilder.builder(
            c2, None, StrSerializer(), QPATH
        ).build_queue() as p2:
            threads = [
                threading.Thread(target=lambda p=p, k=k: [p.put(f"{k}-{i}") for i in range(50)])
                for k, p in ((1, p1), (2, p2))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        wait_for(lambda: len(consumer.items) >= 100)
    assert len(consumer.items) == 100
    assert sorted(consumer.items) == sorted(f"{k}-{i}" for k in (1, 2) for i in range(50))
    # each producer's items stay in its put order
    for k in (1, 2):
        mine = [x for x in consumer.items if x.startswith(f"{k}-")]
        assert mine == [f"{k}-{i}" for i in range(50)]


def test_flush_waits_for_pending_background_put(zk_client) -> None:
    """Curator testFlush: flush_puts is False while a background put is pending, True after."""
    release = threading.Event()

    class Blocking(QueuePutListener):
        def put_completed(self, item) -> None:
            release.wait(10)

    q = QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).build_queue()
    q.put_listeners.add(Blocking())
    with q:
        q.put("x")
        assert q.flush_puts(0.3) is False
        release.set()
        assert q.flush_puts(10.0) is True


def test_netflix_135_failed_background_put_reaches_listener_and_flush_returns(zk_client) -> None:
    listener = RecordingPutListener()
    q = QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).final_flush_time(5.0).build_queue()
    q.put_listeners.add(listener)
    q.start()
    zk_client.delete(QPATH)  # background creates do not create parents (as Curator): every put fails
    q.put("a")
    q.put("b")
    assert q.flush_puts(10.0) is True
    assert [item for item, _ in listener.failed] == ["a", "b"]
    assert all(isinstance(exc, NoNodeError) for _, exc in listener.failed)
    assert q.stats().put_failed == 2 and q.stats().put_ok == 0
    q.close()


def test_lifecycle_errors(zk_client) -> None:
    q = QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).build_queue()
    with pytest.raises(QueueNotStartedError):
        q.put("x")
    q.start()
    with pytest.raises(QueueStateError):
        q.start()
    q.close()
    with pytest.raises(QueueClosedError):
        q.put("x")
    with pytest.raises(QueueClosedError):
        q.put_multi(["x"])
    with pytest.raises(QueueClosedError):
        q.start()
    q.close()  # idempotent


@pytest.mark.parametrize("path", ["", "relative", "/a/", "/a//b", "/a/./b", "/a|b", "/"])
def test_invalid_queue_paths(zk_client, path) -> None:
    with pytest.raises((InvalidPathError, ConfigurationError)):
        QueueBuilder.builder(zk_client, None, StrSerializer(), path).build_queue()


def test_invalid_lock_path(zk_client) -> None:
    with pytest.raises(InvalidPathError):
        QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).lock_path("nope")
    with pytest.raises(ConfigurationError):
        QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).lock_path(QPATH + "/locks").build_queue()


def test_set_error_mode_needs_lock_path(zk_client) -> None:
    from zkqueue.consumer import ErrorMode

    q = QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).build_queue()
    with pytest.raises(ConfigurationError):
        q.set_error_mode(ErrorMode.DELETE)


def test_oversize_item_raises_before_sending(zk_client) -> None:
    with QueueBuilder.builder(zk_client, None, BytesSerializer(), QPATH).jute_max_buffer(64 * 1024).build_queue() as q:
        with pytest.raises(ItemTooLargeError):
            q.put(b"x" * (64 * 1024))
        with pytest.raises(ItemTooLargeError):
            q.put_multi([b"x" * 40_000, b"y" * 40_000])
        q.put(b"small")
        assert q.flush_puts(10.0)
    assert len(zk_client.get_children(QPATH)) == 1


def test_last_message_count_is_real(zk_client) -> None:
    gate = threading.Event()
    seen: list = []

    def consume(item) -> None:
        gate.wait(10)
        seen.append(item)

    with QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).build_queue() as p:
        for i in range(5):
            p.put(str(i))
        assert p.flush_puts(10)
    q = QueueBuilder.builder(zk_client, consume, StrSerializer(), QPATH).batch_size(1).build_queue()
    with q:
        wait_for(lambda: q.last_message_count >= 4)
        gate.set()
        wait_for(lambda: len(seen) == 5)
        wait_for(lambda: q.last_message_count == 0)


def test_consumer_exception_does_not_drop_rest_of_multi_item(zk_client) -> None:
    """Curator bug: without a lock, a consumer exception dropped the rest of a multi-item znode."""
    got: list = []

    def consume(item) -> None:
        if item == 2:
            raise RuntimeError("boom")
        got.append(item)

    with QueueBuilder.builder(zk_client, consume, JsonSerializer(), QPATH).build_queue() as q:
        q.put_multi([1, 2, 3, 4])
        wait_for(lambda: len(got) == 3)
        assert got == [1, 3, 4]
        wait_for(lambda: q.stats().consumer_errors == 1)


def test_many_background_puts_keep_order_across_pipelined_batches(zk_client) -> None:
    """Several multis in flight at once still store items in put order, and every put is reported."""
    n = 3500
    listener = RecordingPutListener()
    producer = QueueBuilder.builder(zk_client, None, JsonSerializer(), QPATH).build_queue()
    producer.put_listeners.add(listener)
    with producer:
        for i in range(n):
            producer.put(i)
        assert producer.flush_puts(60)
        assert producer.stats().put_ok == n
    assert listener.completed == list(range(n))
    got: list = []
    with QueueBuilder.builder(zk_client, got.append, JsonSerializer(), QPATH).batch_size(500).build_queue():
        wait_for(lambda: len(got) == n, timeout=60)
    assert got == list(range(n))


def test_background_batches_near_the_packet_limit_all_succeed(zk_client) -> None:
    """Many items whose sum is several times the limit: batches are cut to fit, none is refused."""
    limit = 64 * 1024
    q = QueueBuilder.builder(zk_client, None, BytesSerializer(), QPATH).jute_max_buffer(limit).build_queue()
    with q:
        for i in range(40):
            q.put(bytes([i]) * 15_000)
        assert q.flush_puts(30)
        assert q.stats().put_ok == 40 and q.stats().put_failed == 0
    assert len(zk_client.get_children(QPATH)) == 40
