"""BlockingQueueConsumer: pulling items from a real queue instead of receiving callbacks."""

from __future__ import annotations

import queue
import threading

import pytest

from zkqueue.recipes.blocking import BlockingQueueConsumer
from zkqueue.builder import QueueBuilder
from zkqueue.consumer import ConnectionState
from zkqueue.errors import ConfigurationError, QueueClosedError
from zkqueue.formats.serializers import JsonSerializer
from zkqueue.server.testing import expire_session, wait_for

QPATH = "/family/blocking"
LPATH = "/family/blocking-locks"


def test_get_iterate_drain(zk_client) -> None:
    consumer: BlockingQueueConsumer = BlockingQueueConsumer()
    with QueueBuilder.builder(zk_client, consumer, JsonSerializer(), QPATH).build_queue() as q:
        for i in range(10):
            q.put(i)
        assert consumer.get(timeout=30) == 0
        assert consumer.take() == 1
        wait_for(lambda: consumer.size() == 8, timeout=30)
        assert consumer.items() == list(range(2, 10))
        assert consumer.drain(3) == [2, 3, 4]
        assert consumer.drain() == [5, 6, 7, 8, 9]
        with pytest.raises(queue.Empty):
            consumer.get(timeout=0.05)
    assert consumer.poll(0.05, default="none") == "none"
    consumer.close()
    with pytest.raises(QueueClosedError):
        consumer.get(timeout=1)


def test_iterator_ends_on_close_after_buffered_items(zk_client) -> None:
    consumer: BlockingQueueConsumer = BlockingQueueConsumer()
    got: list = []
    reader = threading.Thread(target=lambda: got.extend(consumer))
    reader.start()
    with QueueBuilder.builder(zk_client, consumer, JsonSerializer(), QPATH).build_queue() as q:
        for i in range(5):
            q.put(i)
        wait_for(lambda: len(got) == 5, timeout=30)
    consumer.close()
    reader.join(30)
    assert not reader.is_alive()
    assert got == [0, 1, 2, 3, 4]


def test_bounded_buffer_holds_items_under_lock(zk_client) -> None:
    """With capacity 1 and a lock path, the queue waits while the buffer is full: the rest stays in
    ZooKeeper (recoverable), and a closed adapter makes the engine give the waiting item back."""
    consumer: BlockingQueueConsumer = BlockingQueueConsumer(capacity=1)
    b = QueueBuilder.builder(zk_client, consumer, JsonSerializer(), QPATH).lock_path(LPATH).batch_size(1)
    with b.build_queue() as q:
        for i in range(4):
            q.put(i)
        assert q.flush_puts(30)
        wait_for(lambda: consumer.size() == 1, timeout=30)
        # one buffered, one being offered (held under lock), two waiting: none deleted beyond the first
        wait_for(lambda: len(zk_client.get_children(QPATH)) == 3, timeout=30)
        assert consumer.get(timeout=30) == 0
        assert consumer.get(timeout=30) == 1
        consumer.close()
    # items 2 and 3 (and any item refused by the closed adapter) are still queued
    remaining = zk_client.get_children(QPATH)
    assert len(remaining) >= 2


def test_state_changes_forwarded(zk_client) -> None:
    states: list = []
    consumer: BlockingQueueConsumer = BlockingQueueConsumer(on_state=states.append)
    with QueueBuilder.builder(zk_client, consumer, JsonSerializer(), QPATH).build_queue():
        expire_session(zk_client)
        wait_for(lambda: ConnectionState.RECONNECTED in states, timeout=30)
    assert ConnectionState.LOST in states


def test_bad_capacity() -> None:
    with pytest.raises(ConfigurationError):
        BlockingQueueConsumer(capacity=-1)
