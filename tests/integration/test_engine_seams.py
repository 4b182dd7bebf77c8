"""The engine's seams (zkqueue.engine.seams): node consumers, completions with extra ops, moves to another queue,
and claim hooks. All fenced by the consumer's lease; all-or-nothing."""

from __future__ import annotations

import logging
import threading
import time

import queueutil

from zkqueue.builder import QueueBuilder
from zkqueue.engine.commit import check_op, create_op
from zkqueue.engine.queue import DistributedQueue
from zkqueue.engine.seams import ClaimedNode, ClaimHook, Completion
from zkqueue.formats import framing
from zkqueue.formats.serializers import StrSerializer
from zkqueue.server.testing import expire_session, lock_nodes, wait_for

QPATH = "/seams/jobs"
LPATH = "/seams/jobs-locks"
NEXT = "/seams/next"


def fill(client, items, path=QPATH) -> None:
    queueutil.fill(client, items, path, StrSerializer())


class NodeConsumer:
    """Returns whatever ``decide(node)`` says; records every node it saw."""

    def __init__(self, decide) -> None:
        self.decide = decide
        self.nodes: list[ClaimedNode] = []

    def consume_node(self, node: ClaimedNode) -> Completion | None:
        self.nodes.append(node)
        return self.decide(node)


def lock_safe(client, consumer, **kwargs) -> DistributedQueue:
    return DistributedQueue(client, consumer, StrSerializer(), QPATH, lock_path=LPATH, **kwargs)


def test_ack_with_extra_ops_commits_them_with_the_delete(zk_client) -> None:
    zk_client.ensure_path("/seams/results")
    consumer = NodeConsumer(lambda node: Completion.ack([create_op(f"/seams/results/{node.items[0]}", b"done")]))
    fill(zk_client, ["a", "b"])
    with lock_safe(zk_client, consumer) as q:
        wait_for(lambda: zk_client.get_children(QPATH) == [])
        wait_for(lambda: sorted(zk_client.get_children("/seams/results")) == ["a", "b"])
        assert q.stats().consumed == 2
    assert [n.items for n in consumer.nodes] == [["a"], ["b"]]
    assert all(n.path == f"{QPATH}/{n.name}" and n.version == 0 for n in consumer.nodes)


def test_a_failing_extra_op_commits_nothing(zk_client) -> None:
    """The extra op fails (its node exists already): the ack does not commit either, the node is released and
    delivered again."""
    zk_client.create("/seams/taken", b"", makepath=True)
    calls: list = []

    def decide(node):
        calls.append(node.name)
        if len(calls) == 1:
            return Completion.ack([create_op("/seams/taken", b"")])
        return Completion.ack()

    fill(zk_client, ["x"])
    with lock_safe(zk_client, NodeConsumer(decide)) as q:
        wait_for(lambda: zk_client.get_children(QPATH) == [])
        assert len(calls) == 2 and calls[0] == calls[1]
        assert q.stats().loop_errors == 1  # the failed completion is counted, logged and released


def test_move_to_hands_the_node_to_another_queue_in_one_multi(zk_client) -> None:
    zk_client.ensure_path(NEXT)
    fill(zk_client, ["job-1", "job-2"])
    consumer = NodeConsumer(lambda node: Completion.move_to(NEXT + "/queue-"))
    got: list = []
    with lock_safe(zk_client, consumer) as q:
        wait_for(lambda: zk_client.get_children(QPATH) == [])
        assert q.stats().moved == 2
    with QueueBuilder.builder(zk_client, got.append, StrSerializer(), NEXT).lock_path(NEXT + "-locks").build_queue():
        wait_for(lambda: got == ["job-1", "job-2"])


def test_move_to_new_data_and_a_missing_target_parent(zk_client) -> None:
    """``data`` replaces the node's bytes; a target whose parent does not exist yet is created and the move
    happens on the next try, nothing lost."""
    fill(zk_client, ["in"])
    new = framing.encode_items([b"out"])
    with lock_safe(zk_client, NodeConsumer(lambda node: Completion.move_to("/seams/made/queue-", data=new))) as q:
        wait_for(lambda: zk_client.exists("/seams/made") and len(zk_client.get_children("/seams/made")) == 1)
        wait_for(lambda: zk_client.get_children(QPATH) == [])
        assert q.stats().moved == 1
    (name,) = zk_client.get_children("/seams/made")
    assert framing.decode_items(zk_client.get(f"/seams/made/{name}")[0]) == [b"out"]


def test_requeue_to_a_prefix_of_the_queue(zk_client) -> None:
    seen: list = []

    def decide(node):
        seen.append(node.name)
        return Completion.requeue(prefix=f"{QPATH}/queue-|retry|") if len(seen) == 1 else Completion.ack()

    fill(zk_client, ["r"])
    with lock_safe(zk_client, NodeConsumer(decide)) as q:
        wait_for(lambda: len(seen) == 2)
        wait_for(lambda: zk_client.get_children(QPATH) == [])
        assert q.stats().requeued == 1
    assert seen[1].startswith("queue-|retry|")


def test_release_and_quarantine(zk_client) -> None:
    seen: list = []

    def decide(node):
        seen.append(node.items[0])
        if node.items[0] == "bad":
            return Completion.quarantine("rejected by its consumer")
        return Completion.release() if seen.count("again") == 1 else Completion.ack()

    fill(zk_client, ["again", "bad"])
    with lock_safe(zk_client, NodeConsumer(decide)) as q:
        wait_for(lambda: zk_client.get_children(QPATH) == [])
        assert seen.count("again") == 2 and seen.count("bad") == 1
        assert q.stats().released == 1 and q.stats().corrupt_quarantined == 1
        (moved,) = zk_client.get_children(q.quarantine_path)
        assert framing.decode_items(zk_client.get(f"{q.quarantine_path}/{moved}")[0]) == [b"bad"]
        wait_for(lambda: lock_nodes(zk_client, LPATH) == [])


def test_a_raising_node_consumer_follows_the_error_mode(zk_client, caplog) -> None:
    calls: list = []

    def decide(node):
        calls.append(node.name)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return None

    fill(zk_client, ["e"])
    with caplog.at_level(logging.ERROR), lock_safe(zk_client, NodeConsumer(decide)) as q:
        wait_for(lambda: zk_client.get_children(QPATH) == [])
        assert q.stats().consumer_errors == 1 and q.stats().requeued == 1
    assert len(calls) == 2


def test_completions_need_a_lock_path(zk_client, caplog) -> None:
    consumer = NodeConsumer(lambda node: Completion.move_to(NEXT + "/queue-"))
    fill(zk_client, ["n"])
    with caplog.at_level(logging.WARNING):
        with DistributedQueue(zk_client, consumer, StrSerializer(), QPATH):
            wait_for(lambda: len(consumer.nodes) == 1)
    assert "need a lock path" in caplog.text
    assert not zk_client.exists(NEXT)


class CountingHook(ClaimHook):
    """Counts each claim in ZooKeeper (a sequential node per claim under /seams/attempts/<item name>)."""

    def __init__(self, client) -> None:
        self.client = client

    def claim_ops(self, node: ClaimedNode):
        self.client.ensure_path(f"/seams/attempts/{node.name}")
        return [create_op(f"/seams/attempts/{node.name}/a-", b"", sequence=True)]


def test_claim_hook_ops_commit_before_each_delivery(zk_client) -> None:
    attempts_seen: list = []

    def decide(node):
        attempts_seen.append(len(zk_client.get_children(f"/seams/attempts/{node.name}")))
        return Completion.requeue(prefix=f"{QPATH}/queue-") if len(attempts_seen) < 3 else Completion.ack()

    fill(zk_client, ["h"])
    q = lock_safe(zk_client, NodeConsumer(decide), claim_hook=CountingHook(zk_client))
    with q:
        wait_for(lambda: zk_client.get_children(QPATH) == [])
    # each delivery saw its own claim counted (the requeued node has a new name, so it counts from 1 again)
    assert attempts_seen == [1, 1, 1]


def test_failed_claim_ops_go_to_claim_failed(zk_client) -> None:
    class Refusing(ClaimHook):
        def __init__(self) -> None:
            self.failed: list = []

        def claim_ops(self, node):
            return [check_op("/seams/no-such-record")]

        def claim_failed(self, node, error):
            self.failed.append((node.name, type(error).__name__))
            return Completion.quarantine("no job record")

    hook = Refusing()
    consumer = NodeConsumer(lambda node: None)
    fill(zk_client, ["orphan"])
    with lock_safe(zk_client, consumer, claim_hook=hook) as q:
        wait_for(lambda: zk_client.get_children(QPATH) == [])
        wait_for(lambda: q.stats().corrupt_quarantined == 1)
    assert consumer.nodes == []  # never delivered
    assert hook.failed and hook.failed[0][1] == "NoNodeError"


def test_an_expired_consumer_cannot_apply_its_completion(zk_client_factory) -> None:
    """A move whose consumer's session expired mid-node does not happen: the node stays for its new owner."""
    a_client, observer = zk_client_factory(), zk_client_factory()
    observer.ensure_path(NEXT)
    started, go = threading.Event(), threading.Event()

    def decide(node):
        started.set()
        go.wait(30)
        return Completion.move_to(NEXT + "/queue-")

    fill(observer, ["m"])
    q = lock_safe(a_client, NodeConsumer(decide))
    with q:
        wait_for(started.is_set)
        expire_session(a_client)
        go.set()
        wait_for(lambda: q.stats().lock_lost == 1)
        assert observer.get_children(NEXT) == []
    assert len(observer.get_children(QPATH)) == 1


def test_pull_mode_claims_completes_and_releases(zk_client) -> None:
    """claim_nodes on a lock-safe queue without a consumer: blocks for due nodes, holds them under leases until
    complete_nodes or release_nodes."""
    fill(zk_client, ["p1", "p2", "p3"])
    q = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with q:
        first = q.claim_nodes(2, timeout=5)
        assert [o.items for o in first] == [["p1"], ["p2"]]
        assert len(lock_nodes(zk_client, LPATH)) == 2  # item leases while held
        rest = q.claim_nodes(5, timeout=5)
        assert [o.items for o in rest] == [["p3"]]  # held nodes are not claimed twice
        assert q.claim_nodes(5, timeout=0.2) == []
        first[0].completion = Completion.ack()
        first[1].completion = Completion.move_to(NEXT + "/queue-")
        zk_client.ensure_path(NEXT)
        q.complete_nodes(first)
        q.release_nodes(rest)
        assert [o.items for o in q.claim_nodes(5, timeout=5)] == [["p3"]]  # released: claimable again
        assert len(zk_client.get_children(NEXT)) == 1 and q.stats().moved == 1


def test_held_nodes_end_themselves_each_way(zk_client) -> None:
    """The held node of the pull seam: ``finish`` (an ack, or a completion), ``release``, ``ack_ops`` committed in
    a multi of one's own and then ``forget``, and ``commit_while_held`` fenced by the lease while it stays held."""
    import pytest

    from zkqueue.engine.api import HeldNode, commit_while_held, run_multi
    from zkqueue.errors import QueueStateError

    fill(zk_client, ["f1", "f2", "f3", "f4"])
    zk_client.ensure_path("/seams/side")
    q = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with q:
        acked, given_back, own, kept = q.claim_nodes(4, timeout=5)
        assert isinstance(acked, HeldNode) and acked.path == f"{QPATH}/{acked.name}" and acked.queue_path == QPATH
        assert (acked.items, acked.version, acked.settled) == (["f1"], 0, None)
        assert acked.finish() == "done"
        given_back.release()  # claimable again at once (below)
        ops, first_extra = own.ack_ops([create_op("/seams/side/own", b"x")])
        assert run_multi(zk_client, ops).ok and first_extra == len(ops) - 2  # the extra op, then the lease's lock
        own.forget()
        (write,) = commit_while_held([kept], [[create_op("/seams/side/kept", b"y")]])
        assert write.ok and zk_client.exists(kept.path)  # committed, and the node is still held
        zk_client.ensure_path(NEXT)
        assert kept.finish(Completion.move_to(NEXT + "/queue-")) == "done"
        assert sorted(zk_client.get_children("/seams/side")) == ["kept", "own"]
        (again,) = q.claim_nodes(5, timeout=5, block_leases=True)  # only the one given back
        assert again.items == ["f2"]
        assert again.finish() == "done"
        again.forget()  # ended already: nothing to do, nothing raised
        gone = q.claim_nodes(1, timeout=0.2)
        assert gone == []
        with pytest.raises(QueueStateError, match="not held"):
            HeldNode(type(acked._outcome)(None, "x", b"", 0, []), acked._puller).ack_ops()
    assert zk_client.get_children(QPATH) == [] and len(zk_client.get_children(NEXT)) == 1


def _block_locks(client) -> list[str]:
    return [n for n in client.get_children(LPATH) if n.startswith("block-")]


def test_acks_of_ones_own_under_a_block_lease_give_the_block_back_in_the_same_multi(zk_client) -> None:
    """Under a block lease ``ack_ops`` is the node's delete (fenced by the session) and the extra ops;
    ``block_tail`` of the nodes a multi ends gives the deletes of the block locks they empty, to commit in that
    multi. A block with members left keeps its lock; ``committed()`` before ``forget`` keeps the engine from
    deleting the lock again."""
    from zkqueue.engine.api import block_tail, run_multi

    fill(zk_client, ["b1", "b2", "b3"])
    zk_client.ensure_path("/seams/side")
    q = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with q:
        first, second, third = q.claim_nodes(3, timeout=5, block_leases=True)
        assert len(_block_locks(zk_client)) == 1
        ops, first_extra = first.ack_ops([create_op("/seams/side/b1", b"x")])
        assert first_extra == len(ops) - 1 and ops[first_extra - 1].path == first.path  # no lease op of its own
        tail = block_tail([first])
        assert tail.ops == []  # two members left: the block stays held
        assert run_multi(zk_client, ops).ok
        first.forget()
        assert len(_block_locks(zk_client)) == 1
        both = [op for node in (second, third) for op in node.ack_ops([])[0]]
        tail = block_tail([second, third])
        assert len(tail.ops) == 1
        assert run_multi(zk_client, both + tail.ops).ok
        assert _block_locks(zk_client) == []  # gone with the acks
        tail.committed()
        second.forget()
        third.forget()
        fill(zk_client, ["b4"])
        (again,) = q.claim_nodes(1, timeout=5, block_leases=True)  # the block is free again
        assert again.items == ["b4"] and again.finish() == "done"
    assert zk_client.get_children(QPATH) == [] and sorted(zk_client.get_children("/seams/side")) == ["b1"]


def test_no_node_joins_a_block_lease_whose_lock_a_planned_multi_deletes(zk_client, zk_client_factory) -> None:
    """A claim's next nodes in a block this consumer holds join that lease, but not once ``block_tail`` planned
    the lock's delete with the acks of its members: the joined node would be held with no lock after that multi
    (another consumer could take it). They are left for a later claim, which takes the block afresh."""
    from zkqueue.engine.api import block_tail, run_multi

    fill(zk_client, [f"j{i}" for i in range(6)])
    q = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    other = DistributedQueue(zk_client_factory(), None, StrSerializer(), QPATH, lock_path=LPATH)
    with q, other:
        first = q.claim_nodes(2, timeout=5, block_leases=True)
        assert [n.items[0] for n in first] == ["j0", "j1"]
        ops = [op for node in first for op in node.ack_ops([])[0]]
        tail = block_tail(first)  # the lock goes with these acks: the lease is sealed
        assert len(tail.ops) == 1
        assert q.claim_nodes(2, timeout=0, block_leases=True) == []  # j2, j3 may not join it
        assert q.stats().block_joins == 0
        assert run_multi(zk_client, ops + tail.ops).ok
        tail.committed()
        for node in first:
            node.forget()
        assert _block_locks(zk_client) == []
        later = q.claim_nodes(2, timeout=5, block_leases=True)  # the block, claimed afresh
        assert [n.items[0] for n in later] == ["j2", "j3"] and len(_block_locks(zk_client)) == 1
        joined = q.claim_nodes(1, timeout=5, block_leases=True)  # an open lease: j4 joins it
        assert [n.items[0] for n in joined] == ["j4"] and q.stats().block_joins == 1
        assert other.claim_nodes(5, timeout=0.3, block_leases=True) == []  # the block covers j4 and j5
        for node in later + joined:
            node.completion = Completion.ack()
        q.complete_nodes(later + joined)
        assert [n.items[0] for n in other.claim_nodes(5, timeout=5, block_leases=True)] == ["j5"]


def test_a_block_lease_whose_ack_ops_were_built_is_not_moved_to_item_leases(zk_client) -> None:
    """From ``ack_ops`` until the node is forgotten or released its block lease stays a block lease (the lease
    keeper moves the unfinished items of a block held too long to item leases; the ops built would then fail)."""
    from zkqueue.engine import leases as engine_leases
    from zkqueue.engine.api import block_tail, run_multi

    fill(zk_client, ["s1", "s2"])
    q = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with q:
        built, idle = q.claim_nodes(2, timeout=5, block_leases=True)
        ops, _first = built.ack_ops([])
        time.sleep(engine_leases.DOWNGRADE_AFTER + 1.0)  # the keeper looks every 0.25 s
        assert zk_client.get_children(built.path) == [] and len(_block_locks(zk_client)) == 1  # not downgraded
        assert run_multi(zk_client, ops).ok
        built.forget()
        # Once no ack of its own is under way, the block held too long is moved to an item lease as before.
        wait_for(lambda: _block_locks(zk_client) == [] and zk_client.get_children(idle.path) != [], timeout=10)
        ops, _first = idle.ack_ops([])
        assert block_tail([idle]).ops == []  # an item lease: its lock goes in its own ops
        assert run_multi(zk_client, ops).ok
        idle.forget()
    assert zk_client.get_children(QPATH) == [] and _block_locks(zk_client) == []


def test_complete_nodes_says_how_each_node_ended(zk_client, zk_client_factory) -> None:
    """After complete_nodes each outcome's ``settled`` is "done", "quarantined" or "lost" (the lease went with an
    expired session: nothing committed); None before."""
    fill(zk_client, ["a", "b", "c"])
    client = zk_client_factory()
    q = DistributedQueue(client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with q:
        acked, quarantined = q.claim_nodes(2, timeout=5)
        assert acked.settled is None and quarantined.settled is None
        quarantined.completion = Completion.quarantine("no good")
        q.complete_nodes([acked, quarantined])
        assert (acked.settled, quarantined.settled) == ("done", "quarantined")
        (late,) = q.claim_nodes(1, timeout=5)
        expire_session(client)  # the lease goes with the session; the ack is refused by the fence
        wait_for(lambda: client.connected, timeout=30)
        q.complete_nodes([late])
        assert late.settled == "lost"
    assert zk_client.get_children(QPATH) == [late.name]  # still there, for its next owner


def test_pull_claims_never_retry_names_they_finished_while_the_listing_still_shows_them(zk_client) -> None:
    """A claim right after complete_nodes must not try the names just finished (the children cache may still list
    them): each would fail the claim's multi and split it into one round trip per name."""
    fill(zk_client, [f"s{i}" for i in range(60)])
    q = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with q:
        for _round in range(6):
            held = q.claim_nodes(10, timeout=5)
            assert len(held) == 10
            for o in held:
                o.completion = Completion.ack()
            q.complete_nodes(held)
        assert q.stats().lost_races == 0 and q.stats().lock_conflicts == 0
        assert zk_client.get_children(QPATH) == []


def test_pull_claims_under_block_leases_hold_one_lock_per_block(zk_client) -> None:
    """claim_nodes(block_leases=True): 130 nodes (sequences 0..129, three blocks of 64) are held under 3 block
    locks, not 260 lock and fence nodes; completing every node of a block releases its lock; what is left of a
    block we hold joins its lease (the claim keeps the queue's order, with no lock of its own); a released node is
    claimable again."""
    fill(zk_client, [f"b{i}" for i in range(130)])
    q = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with q:
        held = q.claim_nodes(100, timeout=5, block_leases=True)
        assert [o.items[0] for o in held] == [f"b{i}" for i in range(100)]
        assert len(lock_nodes(zk_client, LPATH)) == 2  # blocks 0-63 and 64-127 (partly)
        assert all(not zk_client.get_children(f"{QPATH}/{o.name}") for o in held)  # no fence children
        first_block, second_block = held[:64], held[64:]
        for o in first_block:
            o.completion = Completion.ack()
        q.complete_nodes(first_block)
        assert len(lock_nodes(zk_client, LPATH)) == 1  # its last node finished: the block's lock is gone
        rest = q.claim_nodes(100, timeout=5, block_leases=True)  # 100..127 join block 64's lease (still ours)
        assert [o.items[0] for o in rest] == [f"b{i}" for i in range(100, 130)]
        assert len(lock_nodes(zk_client, LPATH)) == 2  # block 64's and block 128's: none for the joined nodes
        assert q.stats().block_joins == 28
        q.release_nodes(second_block[:1])
        for o in second_block[1:]:
            o.completion = Completion.ack()
        q.complete_nodes(second_block[1:])
        assert len(lock_nodes(zk_client, LPATH)) == 2  # block 64 still covers b100..b127
        again = q.claim_nodes(100, timeout=5, block_leases=True)
        assert [o.items[0] for o in again] == ["b64"]  # given back: claimed again, under the lease it left
        for o in rest + again:
            o.completion = Completion.ack()
        q.complete_nodes(rest + again)
        assert zk_client.get_children(QPATH) == [] and lock_nodes(zk_client, LPATH) == []
        assert q.stats().lost_races == 0 and q.stats().lock_lost == 0


def test_a_pull_completion_refused_after_a_session_expiry_leaves_the_node_claimable(zk_client) -> None:
    """The name of a node whose completion was refused (the session expired: lock lost, the node stays) must not
    stay skipped as if it were gone: a later claim gets it again."""
    fill(zk_client, ["a"])
    q = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with q:
        held = q.claim_nodes(1, timeout=5)
        assert [o.items for o in held] == [["a"]]
        expire_session(zk_client)
        held[0].completion = Completion.ack()
        q.complete_nodes(held)
        assert q.stats().lock_lost == 1 and len(zk_client.get_children(QPATH)) == 1
        again = q.claim_nodes(1, timeout=10)
        assert [o.items for o in again] == [["a"]]
        again[0].completion = Completion.ack()
        q.complete_nodes(again)
        assert zk_client.get_children(QPATH) == []


def test_closing_a_pull_queue_gives_back_what_it_holds(zk_client) -> None:
    """Nodes claimed and never ended are given back when their queue closes: their leases do not outlive it (on a
    client that stays up, they would keep the nodes from every other consumer until the session ended)."""
    fill(zk_client, ["c1", "c2", "c3"])
    q = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with q:
        held = q.claim_nodes(2, timeout=5)
        assert len(held) == 2 and len(lock_nodes(zk_client, LPATH)) == 2
    assert lock_nodes(zk_client, LPATH) == []
    again = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with again:
        assert sorted(o.items[0] for o in again.claim_nodes(5, timeout=5)) == ["c1", "c2", "c3"]
    assert held[0].finish() == "lost"  # ended after its queue gave it back: its lease is gone


def test_checks_of_commit_while_held_go_once_per_multi_and_fail_every_group(zk_client) -> None:
    """``commit_while_held(..., checks)``: ops every group depends on (a queue's pause check) lead each multi once;
    when one fails, every group fails with it (``op`` is the check's index) and nothing commits."""
    from kazoo.exceptions import BadVersionError

    from zkqueue.engine.api import commit_while_held

    fill(zk_client, ["c1", "c2", "c3"])
    zk_client.ensure_path("/seams/side")
    zk_client.create("/seams/gate", b"")
    q = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with q:
        nodes = q.claim_nodes(3, timeout=5)
        ops_of = [[create_op(f"/seams/side/{n.name}", b"")] for n in nodes]
        zk_client.set("/seams/gate", b"paused")  # version 1: the check of version 0 fails
        results = commit_while_held(nodes, ops_of, [check_op("/seams/gate", 0)])
        assert [(r.ok, r.op, type(r.error)) for r in results] == [(False, 0, BadVersionError)] * 3
        assert zk_client.get_children("/seams/side") == []
        results = commit_while_held(nodes, ops_of, [check_op("/seams/gate", 1)])
        assert all(r.ok for r in results) and len(zk_client.get_children("/seams/side")) == 3
        for n in nodes:
            assert n.finish() == "done"


def test_a_block_lock_deleted_by_a_tail_is_not_deleted_again_however_its_nodes_end(zk_client,
                                                                                   zk_client_factory) -> None:
    """Once a multi of one's own acks carried a block's lock delete (``tail.committed()``), the block may be another
    consumer's at once: ending the nodes afterwards by ``release`` (not only ``forget``) must not delete its lock."""
    from zkqueue.engine.api import block_tail, run_multi

    fill(zk_client, ["t1", "t2"])
    other = DistributedQueue(zk_client_factory(), None, StrSerializer(), QPATH, lock_path=LPATH)
    q = DistributedQueue(zk_client, None, StrSerializer(), QPATH, lock_path=LPATH)
    with q, other:
        first, second = q.claim_nodes(2, timeout=5, block_leases=True)
        ops = [op for node in (first, second) for op in node.ack_ops([])[0]]
        tail = block_tail([first, second])
        assert run_multi(zk_client, ops + tail.ops).ok
        tail.committed()
        fill(zk_client, ["t3"])  # in the same block of sequence numbers
        (theirs,) = other.claim_nodes(1, timeout=5, block_leases=True)
        (lock,) = _block_locks(zk_client)
        first.forget()
        second.release()  # the block's last member, ended by a give-back (e.g. an end that raised after its batch)
        assert _block_locks(zk_client) == [lock]  # still the other consumer's
        assert theirs.finish() == "done"
    assert _block_locks(zk_client) == []
