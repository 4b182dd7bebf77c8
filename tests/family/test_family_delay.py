"""DistributedDelayQueue: Curator's TestDistributedDelayQueue, plus FIFO for equal due times and requeue
keeping the due time. Delays are a few hundred ms; assertions are about order and "never early"."""

from __future__ import annotations

import random
import threading

import pytest
from familyutil import Recorder, producer

from zkqueue.engine.parking import parked_count
from zkqueue.formats import naming
from zkqueue.builder import QueueBuilder
from zkqueue.recipes.delay import DistributedDelayQueue, now_ms
from zkqueue.errors import ConfigurationError
from zkqueue.formats.serializers import JsonSerializer
from zkqueue.server.testing import wait_for

QPATH = "/family/delay"
LPATH = "/family/delay-locks"


class TimedRecorder(Recorder):
    """Also records the wall-clock ms at which each item arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.at: dict = {}

    def __call__(self, item) -> None:
        self.at.setdefault(repr(item), []).append(now_ms())
        super().__call__(item)


def delay_queue(client, consumer, lock: bool = False, **kw) -> DistributedDelayQueue:
    b = QueueBuilder.builder(client, consumer, JsonSerializer(), QPATH)
    if lock:
        b = b.lock_path(LPATH)
    return b.build_delay_queue(**kw)


def test_late_addition(zk_client) -> None:
    """Curator testLateAddition: an item due far in the future is not handed out; one due now is."""
    rec = Recorder()
    with delay_queue(zk_client, rec) as q:
        q.put("far", now_ms() + 2**31 - 1)
        q.put("now", now_ms())
        wait_for(lambda: len(rec) == 1)
        q.put("now-2", now_ms())
        wait_for(lambda: len(rec) == 2)
        assert rec.items == ["now", "now-2"]
        assert len(zk_client.get_children(QPATH)) == 0  # the far item is parked, not in the queue node
        assert parked_count(zk_client, QPATH) == 1


def test_late_addition_flat_layout(zk_client) -> None:
    """Curator testLateAddition as Curator lays it out (park_after=None): the far item stays in the queue node."""
    rec = Recorder()
    with delay_queue(zk_client, rec, park_after=None) as q:
        q.put("far", now_ms() + 2**31 - 1)
        q.put("now", now_ms())
        wait_for(lambda: len(rec) == 1)
        assert rec.items == ["now"]
        assert len(zk_client.get_children(QPATH)) == 1


def test_basic_never_early(zk_client) -> None:
    """Curator testBasic: an item due in a few hundred ms arrives, and not before its time."""
    rec = TimedRecorder()
    with delay_queue(zk_client, rec) as q:
        due = now_ms() + 400
        q.put("x", due)
        wait_for(lambda: len(rec) == 1, timeout=30)
    assert rec.at["'x'"][0] >= due


def test_simple_random_delays_in_due_order(zk_client) -> None:
    """Curator testSimple: random delays come out in due-time order, none early."""
    rng = random.Random(3)
    base = now_ms() + 300
    dues = [base + rng.randint(0, 300) for _ in range(10)]
    rec = TimedRecorder()
    with delay_queue(zk_client, rec) as q:
        for i, due in enumerate(dues):
            q.put([due, i], due)
        wait_for(lambda: len(rec) == 10, timeout=30)
    assert rec.items == sorted(([d, i] for i, d in enumerate(dues)), key=lambda x: (x[0], x[1]))
    for due, i in rec.items:
        assert rec.at[repr([due, i])][0] >= due


def test_sorting_prefilled(zk_client) -> None:
    """Curator testSorting: shuffled distinct (past) epochs, queue pre-filled, consumer started later:
    received exactly in epoch order."""
    n = 500
    base = now_ms() - 10_000_000
    order = list(range(n))
    random.Random(5).shuffle(order)
    p = producer(zk_client, QPATH, "delay")
    for i in order:
        p.put(i, base + i)
    p.close()
    rec = Recorder()
    with delay_queue(zk_client, rec):
        wait_for(lambda: len(rec) == n, timeout=60)
    assert rec.items == list(range(n))


def test_curator_116_equal_epochs_fifo(zk_client) -> None:
    """CURATOR-115/116 made the sort stable but left equal epochs in getChildren order; ours are FIFO."""
    due = now_ms() + 300
    p = producer(zk_client, QPATH, "delay")
    for i in range(40):
        p.put(i, due)
    p.put("earlier", due - 100)
    p.close()
    rec = TimedRecorder()
    with delay_queue(zk_client, rec):
        wait_for(lambda: len(rec) == 41, timeout=30)
    assert rec.items == ["earlier"] + list(range(40))
    assert min(rec.at[repr(i)][0] for i in range(40)) >= due


def test_loop_sleeps_until_due(zk_client) -> None:
    """No polling spin: while the only item is not due, the loop looks at it a handful of times, not
    thousands (it sleeps until the head is due or the children change)."""
    rec = Recorder()
    q = delay_queue(zk_client, rec)
    calls = []
    original = q.get_delay

    def counting(name: str) -> float:
        calls.append(name)
        return original(name)

    q.get_delay = counting  # type: ignore[method-assign]
    with q:
        q.put("x", now_ms() + 800)
        wait_for(lambda: len(rec) == 1, timeout=30)
    assert len(calls) < 20, len(calls)


def test_wakes_early_for_an_earlier_arrival(zk_client) -> None:
    """While sleeping until a far head, an arrival due now is handed out (the wait ends on a change)."""
    rec = Recorder()
    with delay_queue(zk_client, rec) as q:
        q.put("far", now_ms() + 3_600_000)
        wait_for(lambda: q.stats().listings >= 1)
        q.put("now", now_ms())
        wait_for(lambda: rec.items == ["now"], timeout=30)


def test_delay_requeue_keeps_due_time(zk_client, zk_client_factory) -> None:
    """Curator requeues a failed delay item as plain ``queue-<seq>`` (epoch 0: it jumps ahead of everything).
    Ours keeps its due time: an item due earlier that arrived meanwhile still comes first."""
    due = now_ms() - 60_000
    p = producer(zk_client_factory(), QPATH, "delay")
    rec = Recorder().fail_on("a", 1)
    rec.before["a"] = lambda: p.put("earlier", due - 1000)  # arrives while "a" is failing
    p.put("a", due)
    p.put("c", due + 1000)
    q = QueueBuilder.builder(zk_client, rec, JsonSerializer(), QPATH).lock_path(LPATH).batch_size(1)
    with q.build_delay_queue():
        wait_for(lambda: len(rec) == 3, timeout=30)
    p.close()
    # "c" may come before or after (it was in the listing "a" came from); "earlier" always precedes the retry
    assert rec.attempts[0] == "a" and sorted(rec.attempts) == ["a", "a", "c", "earlier"]
    retry = len(rec.attempts) - 1 - rec.attempts[::-1].index("a")
    assert rec.attempts.index("earlier") < retry, rec.attempts


def test_requeue_item_path_keeps_epoch(zk_client) -> None:
    q = delay_queue(zk_client, None)
    due = 0x18BCFE56800
    assert q.make_requeue_item_path(QPATH + "/queue-|18BCFE56800|0000000003") == QPATH + "/" + naming.delay_prefix(due)


def test_requeue_backoff_delays_retry(zk_client) -> None:
    """With requeue_backoff, a failed item comes back no earlier than failure time + backoff."""
    rec = TimedRecorder().fail_on("a", 1)
    with delay_queue(zk_client, rec, lock=True, requeue_backoff=0.4) as q:
        q.put("a", now_ms())
        wait_for(lambda: len(rec) == 1, timeout=30)
    first, second = rec.at["'a'"]
    assert second >= first + 400


def test_requeue_path_without_epoch_and_bad_args(zk_client) -> None:
    q = delay_queue(zk_client, None)
    assert q.make_requeue_item_path(QPATH + "/queue-0000000001") == QPATH + "/queue-"
    with q:
        with pytest.raises(ConfigurationError):
            q.put("x", 0)
        with pytest.raises(ConfigurationError):
            q.put("x", -5)
    with pytest.raises(ConfigurationError):
        delay_queue(zk_client, None, requeue_backoff=-1)


def test_put_multi_delivered_together_when_due(zk_client) -> None:
    rec = TimedRecorder()
    due = now_ms() + 300
    with delay_queue(zk_client, rec) as q:
        q.put_multi(["m1", "m2", "m3"], due)
        wait_for(lambda: len(rec) == 3, timeout=30)
    assert rec.items == ["m1", "m2", "m3"]
    assert rec.at["'m1'"][0] >= due


def test_consumer_thread_is_not_held_by_a_far_item(zk_client) -> None:
    """close() returns promptly while the loop sleeps until a far due time."""
    rec = Recorder()
    q = delay_queue(zk_client, rec)
    q.start()
    q.put("far", now_ms() + 3_600_000)
    wait_for(lambda: q.stats().listings >= 1)
    closer = threading.Thread(target=q.close)
    closer.start()
    closer.join(30)
    assert not closer.is_alive()
