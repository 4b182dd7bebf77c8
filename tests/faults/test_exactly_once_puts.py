"""Exactly-once puts through leader kills on the 3-node ensemble: a put whose reply is lost learns from its
producer marker whether it committed, is sent again only when it did not, and never raises for the connection.

Foreground puts from 4 threads and background puts from a second queue instance run through two leader kills;
afterwards every put returned True, and every item is stored exactly once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import pytest

from faultrun import strike  # type: ignore[import-not-found]

from zkqueue import QueueBuilder, StrSerializer
from zkqueue.formats import framing
from zkqueue.server.testing import fresh_chroot, make_client, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.timeout(600)]

FOREGROUND_THREADS = 4
PER_THREAD = 450
BACKGROUND = 3000
#: Job adds from one thread; the leader is killed after the 300th, with 500 still to come.
JOB_ADDS = 800


def _stored(client, path: str) -> Counter:
    counts: Counter = Counter()
    for name in client.get_children(path):
        data, _stat = client.get(f"{path}/{name}")
        for payload in framing.decode_items(data):
            counts[payload.decode()] += 1
    return counts


def test_puts_through_two_leader_kills_are_stored_exactly_once(ensemble, caplog) -> None:
    caplog.set_level(logging.INFO, logger="zkqueue.engine.put_markers")
    hosts = fresh_chroot(ensemble.connect_string, "/exactly-once-")
    client = make_client(hosts, timeout=10.0)
    fg = QueueBuilder.builder(client, None, StrSerializer(), "/q").put_in_background(False).build_queue()
    bg = QueueBuilder.builder(client, None, StrSerializer(), "/q").producer_id("bg-producer").build_queue()
    results: dict[int, list] = {t: [] for t in range(FOREGROUND_THREADS)}
    errors: list[BaseException] = []
    failed: list = []
    bg.put_listeners.add(type("L", (), {"put_completed": lambda self, i: None,
                                        "put_multi_completed": lambda self, i: None,
                                        "put_failed": lambda self, i, e: failed.append((i, e))})())
    stop = threading.Event()

    def foreground(t: int) -> None:
        try:
            for i in range(PER_THREAD):
                results[t].append(fg.put(f"fg-{t}-{i}"))
                time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    def background() -> None:
        for i in range(BACKGROUND):
            bg.put(f"bg-{i}")
            if i % 20 == 19:
                time.sleep(0.05)
            if stop.is_set():
                return

    try:
        fg.start()
        bg.start()
        threads = [threading.Thread(target=foreground, args=(t,)) for t in range(FOREGROUND_THREADS)]
        threads.append(threading.Thread(target=background))
        for thread in threads:
            thread.start()
        for done in (FOREGROUND_THREADS * PER_THREAD // 4, FOREGROUND_THREADS * PER_THREAD // 2):
            wait_for(lambda: sum(len(r) for r in results.values()) >= done or errors, timeout=120, interval=0.05)
            strike("leader_kill", ensemble)
        for thread in threads:
            thread.join(300)
        assert bg.flush_puts(120)
    finally:
        stop.set()
        fg.close()
        bg.close()
    try:
        assert errors == [], errors  # no put raised
        assert failed == [], failed[:5]
        assert all(r == [True] * PER_THREAD for r in results.values())
        stored = _stored(client, "/q")
        expected = {f"fg-{t}-{i}" for t in range(FOREGROUND_THREADS) for i in range(PER_THREAD)}
        expected |= {f"bg-{i}" for i in range(BACKGROUND)}
        assert set(stored) == expected  # nothing lost
        assert [k for k, n in stored.items() if n > 1] == []  # nothing twice
        settled = [r.getMessage() for r in caplog.records if "reply lost" in r.getMessage()]
        print(f"lost replies settled by the marker: {len(settled)}: {settled[:4]}")
    finally:
        client.stop()
        client.close()


def test_job_adds_through_a_leader_kill_are_exactly_once(ensemble) -> None:
    """JobQueue.add through a leader kill: every add returns its id (a lost reply that committed is not taken
    for a duplicate id), and every job has one record and one queue item."""
    from zkqueue.jobs import JobQueue

    hosts = fresh_chroot(ensemble.connect_string, "/exactly-once-jobs-")
    client = make_client(hosts, timeout=10.0)
    returned: list = []
    errors: list[BaseException] = []
    try:
        with JobQueue(client, "/jobs") as jq:
            def add_all() -> None:
                try:
                    for i in range(JOB_ADDS):
                        returned.append(jq.add({"n": i}, job_id=f"job-{i:05d}"))
                        time.sleep(0.003)
                except BaseException as exc:  # noqa: BLE001 - the test reports it
                    errors.append(exc)

            adder = threading.Thread(target=add_all)
            adder.start()
            wait_for(lambda: len(returned) >= 300 or errors, timeout=120, interval=0.05)
            strike("leader_kill", ensemble)
            adder.join(300)
            assert errors == [], errors
            assert returned == [f"job-{i:05d}" for i in range(JOB_ADDS)]  # none refused, none raised
            assert jq.counts()["queued"] == JOB_ADDS
        assert len(client.get_children("/jobs/queue")) == JOB_ADDS  # one item per job: nothing added twice
    finally:
        client.stop()
        client.close()


def test_a_producer_killed_mid_batch_replays_its_last_batch_without_a_duplicate(ensemble, journal_dir) -> None:
    """A producer numbering its batches (``put_multi(..., sequence=n)``, fixed ``producer_id``) is SIGKILLed three
    times and restarted; each restart replays the last batch it sent. Every item is stored exactly once."""
    import json
    import signal
    import subprocess
    import sys
    from pathlib import Path

    hosts = fresh_chroot(ensemble.connect_string, "/exactly-once-restart-")
    client = make_client(hosts, timeout=10.0)
    journal = journal_dir / "producer.journal"
    cfg = {"hosts": hosts, "path": "/q", "journal": str(journal), "producer_id": "restarting", "batches": 300,
           "batch_size": 5, "pause": 0.004}
    script = Path(__file__).with_name("seqproducer.py")

    def acks() -> int:
        return journal.read_text().count("ack ") if journal.exists() else 0

    try:
        client.ensure_path("/q")
        for kill in range(3):
            proc = subprocess.Popen([sys.executable, str(script), json.dumps(cfg)])
            before = acks()
            wait_for(lambda: acks() >= before + 40 or proc.poll() is not None, timeout=120, interval=0.005)
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        proc = subprocess.Popen([sys.executable, str(script), json.dumps(cfg)])
        assert proc.wait(300) == 0
        assert journal.read_text().rstrip().endswith("done")
        stored = _stored(client, "/q")
        expected = {f"b{n}-{k}" for n in range(1, 301) for k in range(5)}
        assert set(stored) == expected
        assert [k for k, n in stored.items() if n > 1] == []
        assert client.get("/q-producers/restarting.seq")[0] == b"300"
    finally:
        client.stop()
        client.close()
