"""Curator -> Curator through the peer: proves the peer moves bytes exactly and drives Curator's semantics."""

from __future__ import annotations

import random

import pytest

from zkqueue.formats.framing import encode_items
from zkqueue.interop import CuratorPeer

pytestmark = pytest.mark.interop

QUEUE = "/queues/jobs"
LOCKS = "/queues/locks"


def _children(zk_client, path: str) -> list[str]:
    return sorted(zk_client.get_children(path))


def test_binary_payloads_round_trip_byte_for_byte(curator_peer: CuratorPeer, zk_client) -> None:
    rng = random.Random(20240501)
    items = [
        b"",
        b"\x00",
        b"\xff",
        bytes(range(256)),
        rng.randbytes(100 * 1024),
        b"abc",
        b"\n\t\r \x00\n",
        "héllo €".encode(),
    ]
    assert curator_peer.put(QUEUE, items) == len(items)
    assert len(_children(zk_client, QUEUE)) == len(items)

    assert curator_peer.consume(QUEUE, count=len(items), timeout=30) == items
    assert _children(zk_client, QUEUE) == []


def test_background_puts_round_trip_in_order(curator_peer: CuratorPeer, zk_client) -> None:
    items = [f"item-{i}".encode() for i in range(25)]
    assert curator_peer.put(QUEUE, items, background=True) == len(items)
    # flushPuts ran before the peer reported: every create is committed
    assert len(_children(zk_client, QUEUE)) == len(items)
    assert curator_peer.consume(QUEUE, count=len(items), timeout=30) == items


def test_consumer_stops_at_count_and_leaves_the_rest(curator_peer: CuratorPeer, zk_client) -> None:
    # Without a lock, Curator deletes a node before it calls the consumer: the peer must not take a node it
    # will not report, or the item would be lost.
    items = [b"a", b"b", b"c", b"d", b"e"]
    curator_peer.put(QUEUE, items)

    assert curator_peer.consume(QUEUE, count=2, timeout=30) == [b"a", b"b"]
    left = _children(zk_client, QUEUE)
    assert [zk_client.get(f"{QUEUE}/{name}")[0] for name in left] == [encode_items([x]) for x in items[2:]]

    assert curator_peer.consume(QUEUE, count=3, timeout=30) == [b"c", b"d", b"e"]
    assert _children(zk_client, QUEUE) == []


def test_lock_requeue_sends_the_failed_item_to_the_tail(curator_peer: CuratorPeer, zk_client) -> None:
    curator_peer.put(QUEUE, [b"a", b"b", b"c"])
    handle = curator_peer.start_consumer(QUEUE, count=3, timeout=30, lock_path=LOCKS, error_mode="requeue",
                                         fail_on=b"b")
    with handle:
        items = handle.wait()
    assert handle.failures() == [b"b"]
    assert items == [b"a", b"c", b"b"]
    assert _children(zk_client, QUEUE) == []
    assert _children(zk_client, LOCKS) == []


def test_lock_delete_mode_drops_the_failed_item(curator_peer: CuratorPeer, zk_client) -> None:
    curator_peer.put(QUEUE, [b"a", b"b", b"c"])
    handle = curator_peer.start_consumer(QUEUE, count=2, timeout=30, lock_path=LOCKS, error_mode="delete",
                                         fail_on=b"b", fail_times=-1)
    with handle:
        items = handle.wait()
    assert items == [b"a", b"c"]
    assert handle.failures() == [b"b"]
    assert _children(zk_client, QUEUE) == []
    assert _children(zk_client, LOCKS) == []


def test_running_consumer_sees_later_puts_and_stops_cleanly(curator_peer: CuratorPeer, zk_client) -> None:
    with curator_peer.start_consumer(QUEUE, timeout=60, lock_path=LOCKS) as handle:
        assert handle.running
        curator_peer.put(QUEUE, [b"x", b"y", b"z"])
        assert handle.wait_for_items(3, timeout=30) == [b"x", b"y", b"z"]
        assert handle.stop() == [b"x", b"y", b"z"]
    assert not handle.running
    assert handle.returncode == 0
    assert handle.done_count() == 3
    assert _children(zk_client, QUEUE) == []
    assert _children(zk_client, LOCKS) == []


def test_killed_consumer_leaves_no_process(curator_peer: CuratorPeer) -> None:
    handle = curator_peer.start_consumer(QUEUE, timeout=60)
    assert handle.running
    handle.kill()
    assert not handle.running
    assert handle.returncode is not None and handle.returncode != 0


def test_simple_queue_round_trip_raw_bytes(curator_peer: CuratorPeer, zk_client) -> None:
    items = [b"x", b"", b"\x00\xff", bytes(range(255, -1, -1))]
    assert curator_peer.simple_offer(QUEUE, items) == len(items)
    names = _children(zk_client, QUEUE)
    assert names == [f"qn-{i:010d}" for i in range(len(items))]
    # SimpleDistributedQueue stores raw bytes: no framing
    assert [zk_client.get(f"{QUEUE}/{name}")[0] for name in names] == items

    assert curator_peer.simple_take(QUEUE, count=len(items), timeout=30) == items
    assert _children(zk_client, QUEUE) == []
