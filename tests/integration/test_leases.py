"""Block and item leases (zkqueue.engine.leases): a fast consumer pays about one write an item, and the two kinds
of lease never let two live consumers hold one item."""

from __future__ import annotations

import threading
from collections import Counter

import queueutil

from zkqueue.builder import QueueBuilder
from zkqueue.formats import naming
from zkqueue.formats.serializers import JsonSerializer, StrSerializer
from zkqueue.ops.inspect import queue_counts
from zkqueue.server.testing import lock_nodes, wait_for

QPATH = "/leases/jobs"
LPATH = "/leases/jobs-locks"


def fill(client, items) -> None:
    queueutil.fill(client, items, QPATH)


def locked_queue(client, consumer, **opts):
    return queueutil.lock_safe_queue(client, consumer, QPATH, LPATH, **opts)


def block_node(client) -> str:
    """The block lock node of the block the queue's first item is in."""
    first = min(client.get_children(QPATH))
    return f"{LPATH}/{naming.block_lock_name(naming.block_of(first), QPATH)}"


def test_a_fast_consumer_takes_block_leases_and_leaves_nothing(zk_client) -> None:
    fill(zk_client, range(1000))
    seen_locks: set = set()
    got: Counter = Counter()

    def consume(item) -> None:
        if item % 100 == 50:
            seen_locks.update(n.split("-")[0] for n in lock_nodes(zk_client, LPATH))
        got[item] += 1

    with locked_queue(zk_client, consume) as q:
        wait_for(lambda: sum(got.values()) >= 1000, timeout=60)
        wait_for(lambda: zk_client.get_children(QPATH) == [] and lock_nodes(zk_client, LPATH) == [])
        assert q.stats().consumed == 1000 and q.stats().lock_lost == 0
    assert set(got) == set(range(1000)) and set(got.values()) == {1}
    assert "block" in seen_locks, seen_locks
    assert zk_client.get_children(LPATH) == []


def test_an_item_claim_is_refused_while_its_block_is_held(zk_client_factory) -> None:
    """A block lease held by another session keeps item claims off every item of the block."""
    observer = zk_client_factory()
    fill(observer, ["a", "b"])
    holder = zk_client_factory()
    holder.create(block_node(observer), b"", ephemeral=True, makepath=True)
    got: list = []
    with locked_queue(zk_client_factory(), got.append) as q:  # its first steps take item leases
        wait_for(lambda: q.stats().lock_conflicts >= 2)
        assert got == []
        holder.delete(block_node(observer))
        wait_for(lambda: sorted(got) == ["a", "b"])


def test_a_block_holder_skips_items_under_an_item_lease(zk_client_factory) -> None:
    """Consumer A holds item 0 with an item lease; consumer B, fast and on block leases, takes the rest of that
    block but never item 0 while A holds it."""
    observer = zk_client_factory()
    fill(observer, ["slow"])
    a_holds, a_go = threading.Event(), threading.Event()
    a_got: list = []

    def consume_a(item) -> None:
        a_got.append(item)
        a_holds.set()
        a_go.wait(30)

    b_got: list = []
    b_locks: set = set()

    def consume_b(item) -> None:
        b_locks.update(n.split("-")[0] for n in lock_nodes(observer, LPATH))
        b_got.append(item)

    with locked_queue(zk_client_factory(), consume_a, batch_size=1):
        wait_for(a_holds.is_set)
        with locked_queue(zk_client_factory(), consume_b) as qb:
            fill(observer, ["warm"])  # B's first step: an item lease; then B knows it is fast
            wait_for(lambda: b_got == ["warm"])
            fill(observer, [f"b{i}" for i in range(20)])  # same block as "slow" (sequences 2..21)
            wait_for(lambda: len(b_got) == 21)
            conflicts = qb.stats().lock_conflicts
            wait_for(lambda: qb.stats().lock_conflicts > conflicts)  # B tries "slow" again and leaves it
            assert "slow" not in b_got
            assert "block" in b_locks, b_locks
            a_go.set()
            wait_for(lambda: observer.get_children(QPATH) == [])
    assert a_got == ["slow"] and "slow" not in b_got


def test_a_block_held_too_long_is_downgraded_to_item_leases(zk_client_factory) -> None:
    """One slow item in a fast consumer's block: after DOWNGRADE_AFTER its unfinished items move to item leases
    and the block is released, so another consumer takes items that arrive in that block meanwhile."""
    observer = zk_client_factory()
    stuck, go = threading.Event(), threading.Event()
    a_got: list = []

    def consume_a(item) -> None:
        if item == "stuck":
            stuck.set()
            go.wait(30)
        a_got.append(item)

    b_got: list = []
    with locked_queue(zk_client_factory(), consume_a) as qa:
        fill(observer, ["warm"])
        wait_for(lambda: a_got == ["warm"])
        fill(observer, ["x0", "stuck", "x2", "x3"])
        wait_for(stuck.is_set)
        wait_for(lambda: qa.stats().leases_downgraded == 1, timeout=10)
        held = lock_nodes(observer, LPATH)
        assert held and not any(n.startswith("block-") for n in held), held  # x2, x3 and "stuck" by item
        with locked_queue(zk_client_factory(), b_got.append):
            fill(observer, ["late"])  # in the same block as "stuck"
            wait_for(lambda: b_got == ["late"])
            assert "x2" not in b_got and "x3" not in b_got  # still A's, under item leases
            go.set()
            wait_for(lambda: observer.get_children(QPATH) == [])
    assert a_got == ["warm", "x0", "stuck", "x2", "x3"]
    assert observer.get_children(LPATH) == []


def test_four_fast_consumers_share_a_queue_exactly_once(zk_client_factory) -> None:
    fill(zk_client_factory(), range(3000))
    counts: Counter = Counter()
    lock = threading.Lock()

    def consume(item) -> None:
        with lock:
            counts[item] += 1

    queues = [locked_queue(zk_client_factory(), consume) for _ in range(4)]
    for q in queues:
        q.start()
    try:
        wait_for(lambda: sum(counts.values()) >= 3000, timeout=90)
    finally:
        for q in queues:
            q.close()
    assert set(counts) == set(range(3000)) and max(counts.values()) == 1


def test_queue_counts_see_block_leases_and_consumers(zk_client_factory) -> None:
    observer = zk_client_factory()
    stuck, go = threading.Event(), threading.Event()
    got: list = []

    def consume(item) -> None:
        got.append(item)
        if item == "hold":
            stuck.set()
            go.wait(30)

    with locked_queue(zk_client_factory(), consume, batch_size=5):
        fill(observer, ["warm"])
        wait_for(lambda: got == ["warm"])
        fill(observer, ["hold", "a", "b"])
        wait_for(stuck.is_set)
        counts = queue_counts(observer, QPATH, lock_path=LPATH)
        assert counts["locked"] == 3 and counts["pending"] == 0 and counts["consumers"] == 1, counts
        go.set()
        wait_for(lambda: observer.get_children(QPATH) == [])
    assert queue_counts(observer, QPATH, lock_path=LPATH)["consumers"] == 0


def test_curator_lock_names_never_take_block_leases(zk_client) -> None:
    fill(zk_client, range(300))
    seen: set = set()

    def consume(item) -> None:
        seen.update(n.split("-")[0] for n in zk_client.get_children(LPATH))

    with locked_queue(zk_client, consume, lock_names="curator"):
        wait_for(lambda: zk_client.get_children(QPATH) == [], timeout=60)
    assert seen == {"queue"}, seen


def test_str_items_round_trip_under_block_leases(zk_client) -> None:
    got: list = []
    with QueueBuilder.builder(zk_client, got.append, StrSerializer(), QPATH).lock_path(LPATH).build_queue() as q:
        for i in range(200):
            q.put(f"s{i}")
        wait_for(lambda: len(got) == 200)
    assert got == [f"s{i}" for i in range(200)]  # one consumer: FIFO under either lease


def test_a_completion_waiting_for_its_reply_holds_up_no_other(zk_client, monkeypatch) -> None:
    """No lock is held across a request to ZooKeeper: while the ack of one held node waits for its reply, the ack
    of another node of the same queue (another thread) is sent, answered and settled."""
    from zkqueue.engine.queue import DistributedQueue
    from zkqueue.transport import protocol

    fill(zk_client, ["slow", "quick"])
    real = protocol.send_multi
    slow_sent, go = threading.Event(), threading.Event()

    class HeldBack:
        def __init__(self, pending) -> None:
            self._pending = pending

        def result(self, timeout=None):
            slow_sent.set()
            assert go.wait(30), "the other ack never settled while this one waited"
            return self._pending.result(timeout)

    def send_multi(client, ops, **kw):
        ops = list(ops)
        pending = real(client, ops, **kw)
        return HeldBack(pending) if any(op.path.endswith(slow_path) for op in ops) else pending

    q = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with q:
        slow, quick = q.claim_nodes(2, timeout=5)
        slow_path = slow.path
        monkeypatch.setattr(protocol, "send_multi", send_multi)
        waiting = threading.Thread(target=slow.finish, name="slow-ack")
        waiting.start()
        assert slow_sent.wait(10)
        assert quick.finish() == "done"  # settled while the slow ack still waits for its reply
        go.set()
        waiting.join(30)
        assert not waiting.is_alive() and slow.settled == "done"
    assert zk_client.get_children(QPATH) == []
