"""Lock-safe consumption: Curator's TestDistributedQueue [L] tests, error modes, lock names, quarantine."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import queueutil

from zkqueue.builder import QueueBuilder
from zkqueue.consumer import ErrorMode
from zkqueue.formats.serializers import JsonSerializer, StrSerializer
from zkqueue.server.testing import lock_nodes, wait_for

QPATH = "/queues/jobs"
LPATH = "/queues/jobs-locks"


def fill(client, items, path=QPATH) -> None:
    queueutil.fill(client, items, path)


def locked_queue(client, consumer, path=QPATH, lock=LPATH, serializer=None, **opts):
    return queueutil.lock_safe_queue(client, consumer, path, lock, serializer, **opts)


def test_safety_basic(zk_client) -> None:
    """Curator testSafetyBasic: 10 items FIFO; locks and fences are cleaned up."""
    got: list = []
    with locked_queue(zk_client, got.append) as q:
        for i in range(10):
            q.put(i)
        wait_for(lambda: len(got) == 10)
        assert got == list(range(10))
        wait_for(lambda: zk_client.get_children(QPATH) == [])
        wait_for(lambda: lock_nodes(zk_client, LPATH) == [])
        assert q.stats().consumed == 10
    assert zk_client.get_children(LPATH) == []  # the session fence goes with the queue


def test_retry_after_failure_curator_56(zk_client) -> None:
    """Throws once -> delivered twice; the requeued node's name does not grow."""
    seen: list = []
    names: list = []
    first = threading.Event()

    def consume(item) -> None:
        seen.append(item)
        names.extend(zk_client.get_children(QPATH))
        if not first.is_set():
            first.set()
            raise RuntimeError("fail once")

    with locked_queue(zk_client, consume) as q:
        q.put("x")
        wait_for(lambda: len(seen) == 2)
        wait_for(lambda: q.stats().requeued == 1)
    assert seen == ["x", "x"]
    assert len(set(names)) == 2 and len({len(n) for n in names}) == 1, names


def test_error_mode_requeue_and_delete(zk_client) -> None:
    """Curator testErrorMode: REQUEUE redelivers after a throw; DELETE does not."""
    counts: Counter = Counter()

    def consume(item) -> None:
        counts[item] += 1
        if counts[item] == 1:
            raise RuntimeError("first attempt fails")

    with locked_queue(zk_client, consume) as q:
        q.put("requeued")
        wait_for(lambda: counts["requeued"] == 2)
        q.set_error_mode(ErrorMode.DELETE)
        q.put("deleted")
        wait_for(lambda: q.stats().deleted_on_error == 1)
        wait_for(lambda: zk_client.get_children(QPATH) == [])
    assert counts == Counter({"requeued": 2, "deleted": 1})


def test_requeue_of_multi_item_does_not_redeliver_consumed_parts(zk_client) -> None:
    seen: list = []

    def consume(item) -> None:
        seen.append(item)
        if item == 2 and seen.count(2) == 1:
            raise RuntimeError("fail on 2 once")

    with locked_queue(zk_client, consume) as q:
        q.put_multi([1, 2, 3])
        wait_for(lambda: len(seen) == 4)
        wait_for(lambda: zk_client.get_children(QPATH) == [])
    assert seen == [1, 2, 2, 3]


def test_custom_executor(zk_client) -> None:
    """Curator testCustomExecutor: 1000 items through a thread pool, each processed exactly once."""
    counts: Counter = Counter()
    lock = threading.Lock()

    def consume(item) -> None:
        with lock:
            counts[item] += 1

    fill(zk_client, range(1000))
    pool = ThreadPoolExecutor(8)
    try:
        with locked_queue(zk_client, consume, executor=pool):
            wait_for(lambda: sum(counts.values()) >= 1000, timeout=60)
    finally:
        pool.shutdown()
    assert set(counts) == set(range(1000))
    assert set(counts.values()) == {1}


def test_no_duplicate_processing(zk_client_factory) -> None:
    """Curator testNoDuplicateProcessing: 1000 pre-filled items, 4 locked consumers, zero duplicates."""
    counts: Counter = Counter()
    lock = threading.Lock()

    def consume(item) -> None:
        with lock:
            counts[item] += 1

    fill(zk_client_factory(), range(1000))
    queues = [locked_queue(zk_client_factory(), consume, batch_size=50) for _ in range(4)]
    for q in queues:
        q.start()
    try:
        wait_for(lambda: sum(counts.values()) >= 1000, timeout=60)
    finally:
        for q in queues:
            q.close()
    assert set(counts) == set(range(1000))
    assert max(counts.values()) == 1


def test_safety_with_crash(zk_client_factory) -> None:
    """Curator testSafetyWithCrash: consumer 1 fails after 10 items and dies; consumer 2 gets the rest."""
    fill(zk_client_factory(), range(100))
    first: list = []
    second: list = []
    thrown: list = []
    crashed = threading.Event()

    def consume1(item) -> None:
        if len(first) >= 10:
            thrown.append(item)
            crashed.set()
            raise RuntimeError("simulated crash")
        first.append(item)

    q1 = locked_queue(zk_client_factory(), consume1, batch_size=5)
    q1.start()
    wait_for(crashed.is_set)
    q1.close()
    with locked_queue(zk_client_factory(), second.append):
        wait_for(lambda: len(first) + len(second) >= 100, timeout=30)
    assert sorted(first + second) == list(range(100))
    assert not set(first) & set(second)
    assert thrown[0] in second


def test_lock_names_do_not_collide_across_queues(zk_client_factory) -> None:
    """Curator: queues sharing a lock path collide (same item names). Qualified lock names fix it."""
    qa, qb, shared = "/queues/a", "/queues/b", "/queues/shared-locks"
    c = zk_client_factory()
    fill(c, ["a0"], qa)
    fill(c, ["b0"], qb)
    assert c.get_children(qa) == c.get_children(qb)  # both items are queue-0000000000
    hold = threading.Event()
    got_a: list = []
    got_b: list = []

    def consume_a(item) -> None:
        got_a.append(item)
        hold.wait(20)

    with locked_queue(zk_client_factory(), consume_a, path=qa, lock=shared):
        wait_for(lambda: got_a == ["a0"])
        with locked_queue(zk_client_factory(), got_b.append, path=qb, lock=shared):
            wait_for(lambda: got_b == ["b0"])  # not blocked by a's lock on the same item name
        hold.set()


def test_curator_lock_names_match_curator(zk_client) -> None:
    """lock_names('curator'): the lock node is named like the item, as Curator's, so both exclude each other."""
    hold = threading.Event()
    got: list = []

    def consume(item) -> None:
        got.append(item)
        hold.wait(20)

    fill(zk_client, ["x"])
    (name,) = zk_client.get_children(QPATH)
    with locked_queue(zk_client, consume, lock_names="curator"):
        wait_for(lambda: got == ["x"])
        assert zk_client.get_children(LPATH) == [name]
        fences = zk_client.get_children(f"{QPATH}/{name}")
        assert len(fences) == 1 and fences[0].startswith("lock-")
        hold.set()
        wait_for(lambda: zk_client.get_children(LPATH) == [])


def test_item_locked_by_other_is_skipped_then_taken(zk_client_factory) -> None:
    """A foreign (e.g. crashed consumer's) lock on an item: skipped, then taken once the lock is gone."""
    c = zk_client_factory()
    fill(c, ["locked", "free"])
    first = sorted(c.get_children(QPATH))[0]
    other = zk_client_factory()
    other.create(f"{LPATH}/{first}", b"", ephemeral=True, makepath=True)
    got: list = []
    with locked_queue(zk_client_factory(), got.append, lock_names="curator") as q:
        wait_for(lambda: got == ["free"])
        assert q.stats().lock_conflicts >= 1
        other.delete(f"{LPATH}/{first}")
        wait_for(lambda: got == ["free", "locked"])


def test_corrupt_znode_quarantined_in_lock_mode(zk_client) -> None:
    zk_client.ensure_path(QPATH)
    zk_client.create(f"{QPATH}/queue-", b"\x00\x01\x00\x02garbage", sequence=True)
    got: list = []
    with locked_queue(zk_client, got.append, serializer=StrSerializer()) as q:
        q.put("good")
        wait_for(lambda: got == ["good"])
        wait_for(lambda: q.stats().corrupt_quarantined == 1)
        wait_for(lambda: zk_client.get_children(QPATH) == [])
        (qname,) = zk_client.get_children(q.quarantine_path)
        data, _ = zk_client.get(f"{q.quarantine_path}/{qname}")
        assert data == b"\x00\x01\x00\x02garbage"
        wait_for(lambda: lock_nodes(zk_client, LPATH) == [])


def test_remove_items_seam_skips_held_items(zk_client) -> None:
    """The seam DistributedIdQueue.remove builds on: an item held by a consumer is not removed (Curator:
    testDeletingWithLock), a free one is."""
    hold = threading.Event()
    got: list = []

    def consume(item) -> None:
        got.append(item)
        hold.wait(20)

    fill(zk_client, ["held"])
    with locked_queue(zk_client, consume) as q:
        wait_for(lambda: got == ["held"])
        (held,) = zk_client.get_children(QPATH)
        with QueueBuilder.builder(zk_client, None, JsonSerializer(), QPATH).lock_path(LPATH).build_queue() as p:
            p.put("free")
            assert p.flush_puts(10)
            free = [n for n in zk_client.get_children(QPATH) if n != held]
            assert p._remove_items([held]) == 0
            assert p._remove_items(free) == 1
            assert p._remove_items(free) == 0  # already gone
        assert zk_client.get_children(QPATH) == [held]
        hold.set()
        wait_for(lambda: zk_client.get_children(QPATH) == [])
    assert q.stats().consumed == 1


@pytest.mark.parametrize("lease", ["item", "block"])
def test_ack_reply_lost_is_not_a_lost_lock(zk_client, monkeypatch, lease) -> None:
    """The ack multi commits but its reply is lost: the retry finds the item gone, knows its own ack went
    through (no lock_lost, no redelivery), and the lease is released. ``item``: the first step, whose pace is
    unknown, takes item leases; ``block``: a known fast consumer takes a block lease."""
    from kazoo.exceptions import ConnectionLoss

    from zkqueue.transport import protocol

    real = protocol.send_multi
    lost: list = []
    armed = threading.Event()

    class LostReply:
        """The multi is sent and commits; its reply is "lost" (ConnectionLoss instead of the result)."""

        def __init__(self, pending, ops) -> None:
            self.pending, self.ops = pending, ops

        def result(self, timeout=None):
            result = self.pending.result(timeout)
            if result.ok and not lost:
                lost.append(self.ops)
                raise ConnectionLoss()
            return result

    def send_multi(client, ops, **kwargs):  # run_multi sends through it too
        ops = list(ops)
        pending = real(client, ops, **kwargs)
        deletes_x = any(isinstance(op, protocol.DeleteOp) and op.path.rsplit("/", 1)[0] == QPATH for op in ops)
        if armed.is_set() and not lost and deletes_x:
            return LostReply(pending, ops)
        return pending

    monkeypatch.setattr(protocol, "send_multi", send_multi)
    got: list = []
    held_while_consuming: list = []

    def consume(item) -> None:
        if item == "x":
            held_while_consuming.extend(lock_nodes(zk_client, LPATH))
        got.append(item)

    with locked_queue(zk_client, consume) as q:
        if lease == "block":
            q.put("warm-up")  # after this step the engine knows the consumer is fast
            wait_for(lambda: got == ["warm-up"])
            wait_for(lambda: zk_client.get_children(QPATH) == [])
        armed.set()
        q.put("x")
        wait_for(lambda: got[-1:] == ["x"])
        wait_for(lambda: zk_client.get_children(QPATH) == [])
        wait_for(lambda: lost)
        wait_for(lambda: lock_nodes(zk_client, LPATH) == [])
        assert q.stats().lock_lost == 0 and q.stats().loop_errors == 0
    assert got.count("x") == 1
    kinds = {n.split("-")[0] for n in held_while_consuming}
    assert kinds == ({"block"} if lease == "block" else {"queue"}), held_while_consuming


def test_flush_acks_waits_for_acks_of_returned_items(zk_client) -> None:
    """After consume_message returned, flush_acks() guarantees the ack landed (the CLI stops its client
    right after, to leave a held item queued)."""
    hold = threading.Event()
    got: list = []

    def consume(item) -> None:
        got.append(item)
        if item == "held":
            hold.wait(20)

    fill(zk_client, ["done", "held"])
    q = locked_queue(zk_client, consume, batch_size=1)
    q.start()
    try:
        wait_for(lambda: got == ["done", "held"])
        assert q.flush_acks(10)
        assert len(zk_client.get_children(QPATH)) == 1  # only "held" is left
    finally:
        hold.set()
        q.close()
    assert zk_client.get_children(QPATH) == []


def test_a_slow_consumer_holds_only_about_half_a_second_of_work(zk_client) -> None:
    """After its first step the engine knows the consumer's pace (0.1 s per item) and locks about 0.5 s of
    work per step (5 items), not a whole batch that other consumers could be doing meanwhile."""
    fill(zk_client, [f"item-{i}" for i in range(30)])
    held_while_consuming: list[int] = []
    got: list[str] = []

    def slow(item: str) -> None:
        held_while_consuming.append(len(lock_nodes(zk_client, LPATH)))
        got.append(item)
        time.sleep(0.1)

    with locked_queue(zk_client, slow):
        wait_for(lambda: len(got) == 30, timeout=60)
    first_step = held_while_consuming[0]
    assert first_step > 5, "the first step (pace unknown) takes a plain batch"
    later = held_while_consuming[first_step:]
    assert later and max(later) <= 5, held_while_consuming
    assert got == [f"item-{i}" for i in range(30)]


def test_a_lost_claim_reply_checked_over_a_flapping_connection_holds_nothing(zk_client, monkeypatch) -> None:
    """An item claim commits but its reply is lost, and the first check of its fences meets a lost connection too.
    No answer is not "not committed": the claim is checked again, found committed, and the items are consumed
    (before the fix they stayed locked by this live session for good)."""
    from kazoo.exceptions import ConnectionLoss

    from zkqueue.transport import protocol

    real_send, real_get_many = protocol.send_multi, protocol.get_many
    state = {"claims": 0, "checks": 0}

    class LostReply:
        def __init__(self, pending) -> None:
            self.pending = pending

        def result(self, timeout=None):
            self.pending.result(timeout)
            raise ConnectionLoss()

    def send_multi(client, ops, **kwargs):
        ops = list(ops)
        pending = real_send(client, ops, **kwargs)
        claims_items = any(isinstance(op, protocol.CreateOp) and "/lock-" in op.path for op in ops)
        if claims_items and not state["claims"]:
            state["claims"] += 1
            return LostReply(pending)
        return pending

    def get_many(client, paths, **kwargs):
        paths = list(paths)
        if any("/lock-" in p for p in paths) and not state["checks"]:
            state["checks"] += 1
            return [ConnectionLoss() for _ in paths]
        return real_get_many(client, paths, **kwargs)

    monkeypatch.setattr(protocol, "send_multi", send_multi)
    monkeypatch.setattr(protocol, "get_many", get_many)
    fill(zk_client, ["a", "b", "c"])
    got: list = []
    with locked_queue(zk_client, got.append):  # a first step: item leases
        wait_for(lambda: sorted(got) == ["a", "b", "c"], timeout=15)
        wait_for(lambda: lock_nodes(zk_client, LPATH) == [])
    assert state == {"claims": 1, "checks": 1}
