"""The queue family against Apache Curator 5.9.0 (a Java peer through zkqueue.interop), both ways:
items put by one side come out of the other in the order Curator defines; delay items are never handed out
early by either side; ids and simple queues are shared."""

from __future__ import annotations

import random
import time

import pytest
from familyutil import Recorder, producer

from zkqueue.engine.parking import parked_count
from zkqueue.formats import buckets, naming
from zkqueue.builder import QueueBuilder
from zkqueue.recipes.delay import now_ms
from zkqueue.formats.serializers import BytesSerializer
from zkqueue.recipes.simple import SimpleDistributedQueue
from zkqueue.server.testing import wait_for

pytestmark = pytest.mark.interop

QPATH = "/family/interop"


def consumer(client, rec, kind: str):
    b = QueueBuilder.builder(client, rec, BytesSerializer(), QPATH)
    return {"priority": lambda: b.build_priority_queue(0), "delay": b.build_delay_queue,
            "id": b.build_id_queue}[kind]()


def prio_items():
    rng = random.Random(17)
    prios = [rng.choice([-(2**31), -7, -1, 0, 1, 5, 2**31 - 1]) for _ in range(30)]
    items = [f"{i}:{p}".encode() for i, p in enumerate(prios)]
    expected = [item for _, _, item in sorted((p, i, item) for i, (p, item) in enumerate(zip(prios, items)))]
    return items, prios, expected


def test_priority_curator_puts_zkqueue_consumes(peer, zk_client) -> None:
    items, prios, expected = prio_items()
    assert peer.put(QPATH, items, kind="priority", values=prios) == len(items)
    rec = Recorder()
    with consumer(zk_client, rec, "priority"):
        wait_for(lambda: len(rec) == len(items), timeout=30)
    assert rec.items == expected


def test_priority_zkqueue_puts_curator_consumes(peer, zk_client) -> None:
    items, prios, expected = prio_items()
    p = producer(zk_client, QPATH, "priority", serializer=BytesSerializer())
    for item, prio in zip(items, prios):
        p.put(item, prio)
    p.put_multi([b"multi-1", b"multi-2"], -3)
    p.close()
    got = peer.consume(QPATH, count=len(items) + 2, timeout=60, kind="priority")
    expected_all = sorted(
        [(pr, i, it) for i, (pr, it) in enumerate(zip(prios, items))] + [(-3, len(items), b"multi")]
    )
    flat: list = []
    for _, _, it in expected_all:
        flat.extend([b"multi-1", b"multi-2"] if it == b"multi" else [it])
    assert got == flat


def delay_items():
    base = now_ms() - 5_000_000
    order = list(range(40))
    random.Random(23).shuffle(order)
    return [(f"d{i:02d}".encode(), base + i * 10) for i in order]


def test_delay_curator_puts_zkqueue_consumes_in_epoch_order_never_early(peer, zk_client) -> None:
    pairs = delay_items()
    far = now_ms() + 3_600_000
    near = now_ms() + 1_500
    pairs_all = pairs + [(b"far", far), (b"near", near)]
    assert peer.put(QPATH, [p for p, _ in pairs_all], kind="delay", values=[e for _, e in pairs_all]) == 42
    rec = Recorder()
    arrived: dict = {}

    def timed(item) -> None:
        arrived[item] = now_ms()
        rec(item)

    with consumer(zk_client, timed, "delay"):
        wait_for(lambda: len(rec) == 41, timeout=30)
        assert [n for n in zk_client.get_children(QPATH)] and naming.parse_delay_epoch(
            zk_client.get_children(QPATH)[0]) == far  # the far item stays queued
    assert rec.items == [p for p, _ in sorted(pairs, key=lambda x: x[1])] + [b"near"]
    assert arrived[b"near"] >= near


def test_delay_zkqueue_puts_curator_consumes_in_epoch_order_never_early(peer, zk_client) -> None:
    pairs = delay_items()
    p = producer(zk_client, QPATH, "delay", serializer=BytesSerializer())
    for payload, epoch in pairs:
        p.put(payload, epoch)
    far = now_ms() + 3_600_000
    p.put(b"far", far)
    p.close()
    got = peer.consume(QPATH, count=len(pairs), timeout=60, kind="delay")
    assert got == [payload for payload, _ in sorted(pairs, key=lambda x: x[1])]
    assert zk_client.get_children(QPATH) == []  # the far item is parked beside the queue, out of Curator's way
    assert parked_count(zk_client, QPATH) == 1


def test_delay_items_zkqueue_parked_reach_a_curator_consumer_on_time(peer, zk_client) -> None:
    """Parked items are moved into the queue node under Curator's delay names ahead of their due time, so a
    Curator DistributedDelayQueue consumer gets them on time (it never hands an item out early itself)."""
    layout = buckets.Layout(hour_s=60, minute_s=2, lead_s=1.0, margin_s=1.0)
    q = (QueueBuilder.builder(zk_client, None, BytesSerializer(), QPATH).put_in_background(False)
         .schedule_layout(layout).build_delay_queue(park_after=0.0))
    with q:  # a started zkqueue instance runs the mover
        base = now_ms()
        due = {f"p{i}".encode(): base + 5000 + 150 * i for i in range(20)}
        for payload, epoch in due.items():
            q.put(payload, epoch)
        assert q.stats().parked == 20 and zk_client.get_children(QPATH) == []
        seen: dict[bytes, int] = {}
        with peer.start_consumer(QPATH, count=20, timeout=60, kind="delay") as handle:
            deadline = time.monotonic() + 40
            while len(seen) < 20 and time.monotonic() < deadline:
                for item in handle.items():
                    seen.setdefault(item, now_ms())
                time.sleep(0.02)
    assert sorted(seen) == sorted(due)
    late = {item: seen[item] - due[item] for item in due}
    assert max(late.values()) < 2000, late  # on time (Curator's own check keeps it from being early)
    wait_for(lambda: q.stats().unparked >= 20, timeout=10)  # counted once the move's reply is back on its thread
    assert q.stats().unparked == 20


def test_id_curator_puts_zkqueue_consumes_and_removes(peer, zk_client) -> None:
    ids = [f"job-{i}" for i in range(10)] + ["dup", "dup"]
    items = [f"item-{i}".encode() for i in range(len(ids))]
    assert peer.put(QPATH, items, kind="id", values=ids) == len(ids)
    q = QueueBuilder.builder(zk_client, None, BytesSerializer(), QPATH).build_id_queue()
    with q:
        assert q.is_queued("job-3")
        assert q.remove("job-3") == 1
        assert q.remove("dup") == 2
    rec = Recorder()
    with consumer(zk_client, rec, "id"):
        wait_for(lambda: len(rec) == 9, timeout=30)
    assert rec.items == [items[i] for i in range(10) if i != 3]


def test_id_zkqueue_puts_curator_removes_and_consumes(peer, zk_client) -> None:
    ids = [f"job-{i}" for i in range(10)]
    items = [f"item-{i}".encode() for i in range(10)]
    p = producer(zk_client, QPATH, "id", serializer=BytesSerializer())
    for item, item_id in zip(items, ids):
        p.put(item, item_id)
    p.close()
    assert peer.id_remove(QPATH, "job-4") == 1
    got = peer.consume(QPATH, count=9, timeout=60, kind="id")
    assert got == [items[i] for i in range(10) if i != 4]


def test_simple_both_ways(peer, zk_client) -> None:
    q = SimpleDistributedQueue(zk_client, QPATH)
    assert peer.simple_offer(QPATH, [b"c1", b"c2", b"\x00raw"]) == 3
    assert [q.take(30), q.take(30), q.take(30)] == [b"c1", b"c2", b"\x00raw"]
    for item in (b"z1", b"z2"):
        q.offer(item)
    assert peer.simple_take(QPATH, count=2, timeout=60) == [b"z1", b"z2"]
