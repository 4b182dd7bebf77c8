"""DistributedPriorityQueue: Curator's TestDistributedPriorityQueue, plus the requeue fix."""

from __future__ import annotations

import random
import threading

import pytest
from familyutil import Recorder, producer

from zkqueue.formats import naming
from zkqueue.builder import QueueBuilder
from zkqueue.errors import ConfigurationError, QueueNotStartedError
from zkqueue.recipes.priority import DistributedPriorityQueue
from zkqueue.formats.serializers import JsonSerializer
from zkqueue.server.testing import wait_for

QPATH = "/family/prio"
LPATH = "/family/prio-locks"


def consumer_queue(client, consumer, min_items: int = 0, lock: bool = False) -> DistributedPriorityQueue:
    b = QueueBuilder.builder(client, consumer, JsonSerializer(), QPATH)
    if lock:
        b = b.lock_path(LPATH)
    return b.build_priority_queue(min_items)


def test_simple_signed_priorities_non_decreasing(zk_client) -> None:
    """Curator testSimple: MIN_VALUE plus 100 random signed priorities come out non-decreasing; equal
    priorities FIFO."""
    rng = random.Random(7)
    prios = [naming.PRIORITY_MIN, naming.PRIORITY_MAX, -1, 0] + [rng.randint(-50, 50) for _ in range(100)]
    p = producer(zk_client, QPATH, "priority")
    for index, prio in enumerate(prios):
        p.put([prio, index], prio)
    p.close()
    rec = Recorder()
    with consumer_queue(zk_client, rec):
        wait_for(lambda: len(rec) == len(prios), timeout=30)
    assert rec.items == sorted(([p, i] for i, p in enumerate(prios)), key=lambda x: (x[0], x[1]))


def test_put_multi_and_names(zk_client) -> None:
    p = producer(zk_client, QPATH, "priority")
    p.put_multi(["a", "b"], 10)
    p.put("z", -3)
    names = zk_client.get_children(QPATH)
    assert sorted(n[: -naming.SEQUENCE_DIGITS] for n in names) == ["queue-0FFFFFFFD", "queue-10000000A"]
    p.close()
    rec = Recorder()
    with consumer_queue(zk_client, rec):
        wait_for(lambda: len(rec) == 3)
    assert rec.items == ["z", "a", "b"]


def test_bad_priority_and_unstarted(zk_client) -> None:
    q = consumer_queue(zk_client, None)
    with pytest.raises(QueueNotStartedError):
        q.put("x", 1)
    with q:
        with pytest.raises(ConfigurationError):
            q.put("x", 2**31)
        with pytest.raises(TypeError):
            q.put("x", 1.5)
    with pytest.raises(ConfigurationError):
        consumer_queue(zk_client, None, min_items=-1)


def arrival_known(q) -> None:
    """Wait until the consumer's child cache knows the listing it holds is out of date (the engine lists
    lazily: a change marks the cache stale and the next check re-lists), so the test does not race the
    watch notification."""
    cache = q._cache
    wait_for(lambda: cache.changed_since(cache.version) or any(
        naming.parse_priority(n) == 1 for n in cache.snapshot.children), timeout=30)


def _blocking_first(rec: Recorder, first, gate: threading.Event, started: threading.Event) -> None:
    def hold() -> None:
        started.set()
        assert gate.wait(30)

    rec.before[first] = hold


@pytest.mark.parametrize("min_items", [0, 3])
def test_min_items_before_refresh(zk_client, min_items) -> None:
    """Curator testMinItemsBeforeRefresh / testSortingWhileTaking: a higher-priority item that arrives while
    the consumer works overtakes after at most ``min_items`` more items (0: right after the current one)."""
    p = producer(zk_client, QPATH, "priority")
    for i in range(20):
        p.put(i, 10)
    rec = Recorder()
    gate, started = threading.Event(), threading.Event()
    _blocking_first(rec, 0, gate, started)
    with consumer_queue(zk_client, rec, min_items=min_items) as q:
        assert started.wait(30)
        p.put("urgent", 1)
        arrival_known(q)
        gate.set()
        wait_for(lambda: len(rec) == 21, timeout=30)
    p.close()
    index = rec.items.index("urgent")
    assert rec.items[0] == 0
    assert 1 <= index <= max(1, min_items), rec.items
    assert [x for x in rec.items if x != "urgent"] == list(range(20))


def test_without_refresh_a_batch_is_not_abandoned(zk_client) -> None:
    """Contrast for the test above (so it can fail): with a large min_items_before_refresh the arrival waits
    for the batch already taken."""
    p = producer(zk_client, QPATH, "priority")
    for i in range(20):
        p.put(i, 10)
    rec = Recorder()
    gate, started = threading.Event(), threading.Event()
    _blocking_first(rec, 0, gate, started)
    with consumer_queue(zk_client, rec, min_items=1000) as q:
        assert started.wait(30)
        p.put("urgent", 1)
        arrival_known(q)
        gate.set()
        wait_for(lambda: len(rec) == 21, timeout=30)
    p.close()
    assert rec.items.index("urgent") > 3


def test_priority_requeue_keeps_priority(zk_client, zk_client_factory) -> None:
    """Curator's requeue re-creates a failed priority item as plain ``queue-<seq>``, which sorts before every
    priority (it jumps the queue). Ours keeps its priority: the retried node is named with priority 5, and an
    item of a more urgent priority that arrived meanwhile comes before the retry."""
    p = producer(zk_client_factory(), QPATH, "priority")
    observer = zk_client_factory()
    attempts: list = []
    retried_names: list = []

    def consume(item) -> None:
        attempts.append(item)
        if item == "x" and attempts.count("x") == 1:
            p.put("more-urgent", 3)  # arrives while "x" is failing
            raise RuntimeError("planned failure")
        if item == "x":  # the retry: its node is still there (lock-safe: deleted after this returns)
            retried_names.extend(observer.get_children(QPATH))

    p.put("x", 5)
    p.put("later", 9)
    with consumer_queue(zk_client, consume, lock=True):
        wait_for(lambda: attempts.count("x") == 2 and "later" in attempts and "more-urgent" in attempts, timeout=30)
    p.close()
    assert attempts[0] == "x"
    retry = len(attempts) - 1 - attempts[::-1].index("x")
    assert attempts.index("more-urgent") < retry, attempts
    assert [naming.parse_priority(n) for n in retried_names if naming.parse_priority(n) != 9] == [5], retried_names


def test_requeue_item_path_keeps_priority(zk_client) -> None:
    q = consumer_queue(zk_client, None)
    assert q.make_requeue_item_path(QPATH + "/queue-1000000050000000007") == QPATH + "/queue-100000005"
    assert q.make_requeue_item_path(QPATH + "/queue-0000000007") == QPATH + "/queue-"
