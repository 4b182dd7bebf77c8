"""Lock-safe consumption on a 3-node ensemble while the leader is killed: nothing is lost, nothing is left."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from zkqueue.builder import QueueBuilder
from zkqueue.formats.serializers import JsonSerializer
from zkqueue.server.testing import lock_nodes, wait_for

pytestmark = [pytest.mark.ensemble, pytest.mark.faults]

QPATH = "/queues/jobs"
LPATH = "/queues/jobs-locks"


def test_leader_kill_during_lock_safe_consumption(zk_ensemble, ensemble_client_factory) -> None:
    n = 600
    counts: Counter = Counter()
    lock = threading.Lock()
    reached = threading.Event()

    def consume(item) -> None:
        time.sleep(0.003)  # simulated work, so the kill lands mid-consumption
        with lock:
            counts[item] += 1
            if len(counts) >= n // 3:
                reached.set()

    producer = ensemble_client_factory()
    with QueueBuilder.builder(producer, None, JsonSerializer(), QPATH).build_queue() as p:
        for i in range(n):
            p.put(i)
        assert p.flush_puts(60)
    consumer_client = ensemble_client_factory(timeout=15.0)
    q = (
        QueueBuilder.builder(consumer_client, consume, JsonSerializer(), QPATH)
        .lock_path(LPATH)
        .batch_size(20)
        .build_queue()
    )
    with q:
        wait_for(reached.is_set, timeout=60)
        leader = zk_ensemble.leader()
        zk_ensemble.kill(leader)
        with lock:
            at_kill = len(counts)
        assert at_kill < n, "the kill came after the work; the test proves nothing"
        try:
            wait_for(lambda: len(counts) >= n, timeout=90, message=f"consumed {len(counts)} of {n}")
        finally:
            zk_ensemble.start(leader)
        zk_ensemble.wait_ready(60)
        wait_for(lambda: producer.get_children(QPATH) == [] and lock_nodes(producer, LPATH) == [], timeout=60)
    assert set(counts) == set(range(n))  # at-least-once: nothing lost
    stats = q.stats()
    # a duplicate is only possible for an item whose ack was in doubt; there can't be many
    assert sum(counts.values()) - n <= 2 * 20, (sum(counts.values()) - n, stats)
