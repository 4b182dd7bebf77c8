"""The mover of parked items through faults on the 3-node ensemble, with exact accounting.

Two processes contend for the mover of one parking delay queue. The active one is SIGKILLed while it moves a
bucket, then the ZooKeeper leader is killed. Every parked item must reach the lock-safe consumers exactly once and
none before its due time: a move is one version-checked multi per chunk, so a dead or expired mover can neither
lose nor duplicate an item."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from faultrun import stop_processes, strike  # type: ignore[import-not-found]

from zkqueue.builder import QueueBuilder
from zkqueue.engine.parking import parked_count
from zkqueue.formats import buckets
from zkqueue.formats.serializers import JsonSerializer
from zkqueue.recipes.delay import now_ms
from zkqueue.server.testing import fresh_chroot, make_client, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.timeout(400)]

HERE = Path(__file__).parent
ITEMS = 30_000
LAYOUT = {"hour_s": 60, "minute_s": 5, "lead_s": 3.0, "margin_s": 1.0}


def test_mover_killed_mid_move_then_leader_kill(ensemble, journal_dir) -> None:
    hosts = fresh_chroot(ensemble.connect_string, "/mover-faults-")
    path = "/sched/q"
    client = make_client(hosts, timeout=10.0)
    layout = buckets.Layout(**LAYOUT)
    procs: list[subprocess.Popen] = []
    got: list[tuple[int, int, int]] = []
    lock = threading.Lock()

    def record(item: list) -> None:
        at = now_ms()
        with lock:
            got.append((item[0], item[1], at))

    try:
        producer = (QueueBuilder.builder(client, None, JsonSerializer(), path).schedule_layout(layout)
                    .run_mover(False).build_delay_queue(park_after=0.0))
        with producer:
            base = now_ms() + 14_000
            for i in range(ITEMS):  # due over 10 s, in two 5-second buckets of 15,000 items
                due = base + (i * 10_000) // ITEMS
                producer.put([i, due], due)
            assert producer.flush_puts(120) and producer.stats().put_failed == 0
            assert parked_count(client, path) == ITEMS
        for w in range(2):
            cfg = {"hosts": hosts, "path": path, "session_timeout": 4.0, "layout": LAYOUT}
            log = open(journal_dir / f"mover{w}.log", "w")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen([sys.executable, str(HERE / "moverproc.py"), json.dumps(cfg)],
                                          stdout=log, stderr=subprocess.STDOUT, cwd=HERE))
        election = client.Election(buckets.mover_path(path))
        wait_for(lambda: len(election.contenders()) == 2, timeout=60)
        leader_pid = int(election.contenders()[0].split(":")[1])
        victim = next(p for p in procs if p.pid == leader_pid)

        # SIGKILL the active mover while it moves the first bucket: items are arriving in the queue node and some
        # of that bucket are still parked
        def mid_move() -> bool:
            moved = len(client.get_children(path))
            return moved > 0 and parked_count(client, path) > ITEMS // 2
        wait_for(mid_move, timeout=60, interval=0.005)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        killed_at = parked_count(client, path)
        assert 0 < killed_at < ITEMS
        strike("leader_kill", ensemble)

        consumers = [QueueBuilder.builder(client, record, JsonSerializer(), path).lock_path(path + "-locks")
                     .schedule_layout(layout).run_mover(False).build_delay_queue(park_after=0.0) for _ in range(2)]
        for c in consumers:
            c.start()
        try:
            wait_for(lambda: len(got) >= ITEMS, timeout=180, interval=0.2,
                     message=f"{len(got)} of {ITEMS} delivered, {parked_count(client, path)} still parked")
            # Nothing left to deliver a second time: no item parked or queued (a held one stays queued until acked).
            wait_for(lambda: parked_count(client, path) == 0 and client.get_children(path) == [], timeout=30,
                     interval=0.1, message="items left after every item was delivered")
        finally:
            for c in consumers:
                c.close()
        numbers = [n for n, _d, _a in got]
        assert len(numbers) == ITEMS and set(numbers) == set(range(ITEMS)), "lost or duplicated items"
        early = [g for g in got if g[2] < g[1]]
        assert not early, f"{len(early)} early, e.g. {early[:3]}"
        assert parked_count(client, path) == 0 and client.get_children(path) == []
    finally:
        stop_processes(procs)
        client.stop()
