"""Responsiveness of the transport: a message to ANY consumed queue, or a prefetch slot opening, wakes a waiting
``drain_events`` at once; a real prefork worker drains a backlog steadily and answers ``inspect ping`` promptly
while busy.

Bounds are generous for a loaded 2-core machine (measured: gaps under 0.06 s, pings of 0.07-0.2 s) and still fail
on what the transport did before (a wait of about 1 s on one queue at a time; a synchronous worker loop that
answered a ping only once a pool slot was free)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu
import pytest
from celery import Celery

from tests.celery import celery_tasks as t
from tests.celery.worker_procs import ROOT, Worker, celery_env

pytestmark = pytest.mark.timing

#: Most seconds between two consecutive task starts of a backlog (the old transport paused about 1 s).
MAX_GAP = 0.3
#: Most seconds an ``inspect().ping()`` may take while the worker's pool is busy (old: a task's length or more).
MAX_PING = 1.5


def _publish(conn: kombu.Connection, queue: kombu.Queue, body: Any) -> None:
    with conn.channel() as channel:
        kombu.Producer(channel).publish(body, exchange=queue.exchange, routing_key=queue.routing_key,
                                        declare=[queue])


def test_a_message_to_any_of_several_queues_is_delivered_at_once(connection_factory: Any) -> None:
    consumer_conn, producer_conn = connection_factory(), connection_factory()
    queues = [kombu.Queue(f"any{i}", routing_key=f"any{i}") for i in range(4)]
    got: list[tuple[Any, float]] = []
    with consumer_conn.Consumer(queues, callbacks=[lambda body, m: (got.append((body, time.monotonic())),
                                                                    m.ack())]):
        for i in (3, 1, 2, 0, 3):
            for q in queues:
                q(producer_conn.default_channel).declare()
            sent: list[float] = []

            def put(q: kombu.Queue = queues[i], body: int = i, at: list[float] = sent) -> None:
                at.append(time.monotonic())
                _publish(producer_conn, q, body)

            timer = threading.Timer(0.2, put)
            timer.start()
            before = len(got)
            consumer_conn.drain_events(timeout=10)  # one wait, woken by whichever queue gets the message
            timer.join()
            assert len(got) == before + 1 and got[-1][0] == i
            assert got[-1][1] - sent[0] < 0.15, f"queue any{i}: delivered {got[-1][1] - sent[0]:.3f} s after put"


def test_an_ack_from_another_thread_wakes_a_drain_at_its_prefetch_limit(connection_factory: Any) -> None:
    consumer_conn, producer_conn = connection_factory(), connection_factory()
    queue = kombu.Queue("pfwake", routing_key="pfwake")
    for n in range(2):
        _publish(producer_conn, queue, n)
    got: list[tuple[Any, Any, float]] = []
    with consumer_conn.Consumer([queue], prefetch_count=1,
                                callbacks=[lambda body, m: got.append((body, m, time.monotonic()))]):
        consumer_conn.drain_events(timeout=10)
        assert [b for b, _m, _t in got] == [0]
        acked: list[float] = []
        timer = threading.Timer(0.2, lambda: (got[0][1].ack(), acked.append(time.monotonic())))
        timer.start()
        consumer_conn.drain_events(timeout=10)  # at the limit: nothing to take until the ack
        timer.join()
        assert [b for b, _m, _t in got] == [0, 1]
        assert got[1][2] - acked[0] < 0.15, f"delivered {got[1][2] - acked[0]:.3f} s after the ack"
        got[1][1].ack()


@pytest.fixture(scope="module")
def prefork_worker(module_app: Celery, module_url: str, runs_dir: Path, logs_dir: Path) -> Iterator[Worker]:
    worker = Worker(module_url, runs_dir, logs_dir, "busy", pool="prefork", concurrency=2).start()
    try:
        worker.wait_ready()
        yield worker
    finally:
        worker.stop()


def test_a_backlog_drains_without_pauses(prefork_worker: Worker) -> None:
    name = uuid.uuid4().hex
    results = [t.stamped.delay(name) for _ in range(200)]
    for result in results:
        result.get(timeout=120)
    starts = t.start_times(name)
    assert len(starts) == 200
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    slow = [round(g, 3) for g in gaps if g > MAX_GAP]
    print(f"200 tasks started within {starts[-1] - starts[0]:.2f} s; largest gap {max(gaps):.3f} s")
    assert not slow, f"pauses between task starts: {slow}"


def _ping(url: str, runs: Path, hostname: str) -> float:
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "celery" / "ping_proc.py"), hostname], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=celery_env(url, runs))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    took, _, replies = proc.stdout.strip().partition(" ")
    assert json.loads(replies) == {hostname: {"ok": "pong"}}, proc.stdout
    return float(took)


def test_inspect_ping_answers_promptly_while_the_pool_is_busy(prefork_worker: Worker, module_url: str,
                                                              runs_dir: Path) -> None:
    results = [t.nap.delay(2.0) for _ in range(6)]  # both pool processes busy for about 6 s
    time.sleep(0.5)
    took = [_ping(module_url, runs_dir, prefork_worker.hostname) for _ in range(3)]
    print("inspect ping while busy: " + ", ".join(f"{s:.3f} s" for s in took))
    assert max(took) < MAX_PING, took
    assert [r.get(timeout=60) for r in results] == [2.0] * 6
