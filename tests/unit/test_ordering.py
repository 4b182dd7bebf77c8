"""KeptOrder: the consumption order kept across listings must equal a fresh sort of each listing."""

from __future__ import annotations

import random
import time

from zkqueue.engine.ordering import DueScan, KeptOrder
from zkqueue.jobs import names


def job_name(seq: int, due_ms: int = 0, priority: int = 0) -> str:
    return names.item_name_prefix(f"j{seq}", due_ms=due_ms, priority=priority, kind=names.NEW) + f"{seq:010d}"


def delay_of(name: str) -> float:
    item = names.parse_item(name)
    return 0.0 if item is None else (item.due_ms - time.time() * 1000) / 1000.0


def test_the_kept_order_matches_a_fresh_sort_through_many_listings() -> None:
    rng = random.Random(7)
    now_ms = int(time.time() * 1000)
    kept = KeptOrder(names.sort_key, delay_of)
    present: set[str] = set()
    seq = 0
    for _listing in range(60):
        for name in rng.sample(sorted(present), k=min(len(present), rng.randint(0, 40))):
            present.discard(name)  # taken or finished
        for _ in range(rng.randint(0, 50)):
            due = 0 if rng.random() < 0.7 else now_ms - rng.randint(1, 10_000)
            present.add(job_name(seq, due, rng.choice([-1, 0, 5])))
            seq += 1
        listing = list(present)
        rng.shuffle(listing)  # ZooKeeper lists children in no particular order
        scan = kept.due(listing, lambda n: False)
        assert scan.take(10_000) == sorted(present, key=names.sort_key)


def test_names_not_due_wait_and_excluded_names_are_skipped() -> None:
    now_ms = int(time.time() * 1000)
    later = job_name(1, now_ms + 30_000)
    a, b, c = job_name(2), job_name(3), job_name(4)
    scan = KeptOrder(names.sort_key, delay_of).due([later, c, b, a], lambda n: n == b)
    assert scan.take(1) == [a]
    scan.give_back([a])  # not tried: handed out again first
    assert scan.take(5) == [a, c]
    assert scan.take(5) == []
    assert scan.next_due is not None and 25 < scan.next_due - time.monotonic() <= 30


def test_a_name_that_comes_back_is_ordered_again() -> None:
    kept = KeptOrder(names.sort_key, delay_of)
    a, b = job_name(1), job_name(2)
    assert kept.due([a, b], lambda n: False).take(5) == [a, b]
    assert kept.due([b], lambda n: False).take(5) == [b]
    assert kept.due([b, a], lambda n: False).take(5) == [a, b]


def test_a_plain_scan_hands_out_its_list_in_batches() -> None:
    scan = DueScan(["x", "y", "z"], wait=2.0)
    assert scan.take(2) == ["x", "y"] and scan.take(2) == ["z"] and scan.take(2) == []
    assert scan.next_due is not None and 1.5 < scan.next_due - time.monotonic() <= 2.0


def test_a_slow_parse_never_makes_a_name_due_early() -> None:
    """Each kept due instant is the one in the name: the time spent parsing the other new names does not move it
    earlier (it was read as now + delay with "now" taken before the parse)."""
    due_ms = int(time.time() * 1000) + 1000
    listing = [job_name(i, due_ms) for i in range(150)]

    def slow_delay(name: str) -> float:
        time.sleep(0.004)  # 150 names: 0.6 s of parsing, well before the due time
        return delay_of(name)

    scan = KeptOrder(names.sort_key, slow_delay).due(listing, lambda n: False)
    assert time.time() * 1000 < due_ms  # still before the due time
    assert scan.take(1000) == []
