"""DistributedIdQueue: Curator's TestDistributedIdQueue, plus every id working and requeue keeping the id."""

from __future__ import annotations

import random
import threading

import pytest
from familyutil import Recorder, producer

from zkqueue.formats import naming
from zkqueue.builder import QueueBuilder
from zkqueue.errors import ConfigurationError, QueueNotStartedError
from zkqueue.recipes.ids import DistributedIdQueue
from zkqueue.formats.serializers import JsonSerializer
from zkqueue.server.testing import wait_for

QPATH = "/family/ids"
LPATH = "/family/ids-locks"

ODD_IDS = ["a/b", "a|b", "|", "/", "%", "%41", "x\x00y", "snow\u2603man", "emoji\U0001F600", ".", "..", " ", "a_b"]


def id_queue(client, consumer, lock: bool = False) -> DistributedIdQueue:
    b = QueueBuilder.builder(client, consumer, JsonSerializer(), QPATH)
    if lock:
        b = b.lock_path(LPATH)
    return b.build_id_queue()


def test_ordering_fifo(zk_client) -> None:
    """Curator testOrdering: 100 random ids come out in put order."""
    rng = random.Random(11)
    ids = [f"id-{rng.randint(0, 10**9)}" for _ in range(100)]
    p = producer(zk_client, QPATH, "id")
    for i, item_id in enumerate(ids):
        p.put(i, item_id)
    p.close()
    rec = Recorder()
    with id_queue(zk_client, rec):
        wait_for(lambda: len(rec) == 100, timeout=30)
    assert rec.items == list(range(100))


def test_id_remove_with_slash_and_pipe(zk_client) -> None:
    """Curator's fixId maps '/' and '|' to '_' and then compares the raw id, so such items can never be
    removed or found. Every id works here, and ids that only differ in those characters stay apart."""
    with id_queue(zk_client, None) as q:
        for i, item_id in enumerate(ODD_IDS):
            q.put(i, item_id)
        assert q.flush_puts(30)
        for item_id in ODD_IDS:
            assert q.is_queued(item_id), item_id
        assert not q.is_queued("a_b_")
        for item_id in ODD_IDS:
            assert q.remove(item_id) == 1, item_id
            assert not q.is_queued(item_id)
        assert zk_client.get_children(QPATH) == []


def test_remove_counts_every_item_with_the_id(zk_client) -> None:
    with id_queue(zk_client, None) as q:
        q.put("x1", "job")
        q.put("y", "other")
        q.put_multi(["x2", "x3"], "job")
        assert q.flush_puts(30)
        assert q.remove("job") == 2
        assert q.remove("job") == 0
        assert q.is_queued("other")


def test_odd_ids_are_consumed_fifo(zk_client) -> None:
    p = producer(zk_client, QPATH, "id")
    for i, item_id in enumerate(ODD_IDS):
        p.put(i, item_id)
    p.close()
    rec = Recorder()
    with id_queue(zk_client, rec):
        wait_for(lambda: len(rec) == len(ODD_IDS), timeout=30)
    assert rec.items == list(range(len(ODD_IDS)))


def test_deleting_with_lock(zk_client, zk_client_factory) -> None:
    """Curator testDeletingWithLock: remove(id) returns 0 while a consumer holds the item; the item is then
    consumed normally."""
    held, release = threading.Event(), threading.Event()
    rec = Recorder()

    def hold() -> None:
        held.set()
        assert release.wait(30)

    rec.before["x"] = hold
    with id_queue(zk_client, rec, lock=True) as q, id_queue(zk_client_factory(), None, lock=True) as other:
        q.put("x", "id")
        assert held.wait(30)
        assert other.remove("id") == 0
        assert other.is_queued("id")
        release.set()
        wait_for(lambda: rec.items == ["x"], timeout=30)
        wait_for(lambda: not other.is_queued("id"), timeout=30)


def test_requeuing_with_lock(zk_client) -> None:
    """Curator testRequeuingWithLock: a consumer that always fails leaves the item queued under its id."""
    rec = Recorder().fail_on("x", 10**6)
    with id_queue(zk_client, rec, lock=True) as q:
        q.put("x", "the/id")
        wait_for(lambda: len(rec.attempts) >= 3, timeout=30)
        assert q.is_queued("the/id")
        names = zk_client.get_children(QPATH)
        assert [naming.parse_id(n)[0] for n in names] == ["the/id"]
        assert all(len(n) == len("queue-|the%2Fid|0000000000") for n in names)  # no name growth (CURATOR-56)
        assert q.remove("the/id") in (0, 1)  # held at the moment (0) or between attempts (1)
    # the final removal or the close leaves nothing behind but possibly the item itself, never a copy
    assert len(zk_client.get_children(QPATH)) <= 1


def test_curator_224_id_requeue_keeps_id(zk_client) -> None:
    """CURATOR-224: a requeued item keeps its id, so remove(id)/is_queued(id) still find it."""
    retried, release = threading.Event(), threading.Event()
    attempts: list = []
    seen: list = []

    def consume(item) -> None:
        attempts.append(item)
        if len(attempts) == 1:
            raise RuntimeError("planned failure")
        seen.extend(zk_client.get_children(QPATH))  # the requeued node, held by us now
        retried.set()
        assert release.wait(30)

    with id_queue(zk_client, consume, lock=True) as q:
        q.put("x", "a|b")
        assert retried.wait(30)
        assert [naming.parse_id(n)[0] for n in seen] == ["a|b"]
        assert q.is_queued("a|b")
        assert q.remove("a|b") == 0  # held by the consumer
        release.set()
        wait_for(lambda: not q.is_queued("a|b"), timeout=30)
    assert attempts == ["x", "x"]


def test_requeue_item_path_keeps_escaped_id(zk_client) -> None:
    q = id_queue(zk_client, None)
    assert q.make_requeue_item_path(QPATH + "/queue-|a%2Fb|0000000042") == QPATH + "/queue-|a%2Fb|"
    assert q.make_requeue_item_path(QPATH + "/queue-0000000042") == QPATH + "/queue-"


def test_bad_ids(zk_client) -> None:
    q = id_queue(zk_client, None)
    with pytest.raises(QueueNotStartedError):
        q.remove("x")
    with q:
        with pytest.raises(ConfigurationError):
            q.put("x", "")
        with pytest.raises(TypeError):
            q.put("x", b"bytes")
        with pytest.raises(ConfigurationError):
            q.remove("")
