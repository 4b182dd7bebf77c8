"""Large items through a producer killed mid-blob, on the 3-node ensemble, with exact accounting.

A producer process is SIGKILLed while the chunks of a 20 MiB item are going in. No consumer may ever see a
partial item; once the producer's session has expired and the grace period has passed, a running queue's reaper
has reclaimed the blob and the nodes and bytes stored under the queue's paths are what they were before. A second
producer then puts the same kind of item through, and it arrives byte for byte, once.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue as stdqueue
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from zkqueue import BytesSerializer, QueueBuilder
from zkqueue.formats import large_ref
from zkqueue.server.testing import fresh_chroot, make_client, stored_under, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.timeout(300)]

HERE = Path(__file__).parent
SIZE = 8 * 2**20  # 8 chunks: the producer is killed after 4
PATH = "/large/faults"
ROOTS = (PATH, PATH + "-blobs", PATH + "-locks", PATH + "-quarantine")


def stored(client: Any) -> tuple[int, int]:
    return stored_under(client, *ROOTS)


def producer(hosts: str, seed: int, chunk_delay: float, log: Path) -> subprocess.Popen:
    cfg = {"hosts": hosts, "path": PATH, "size": SIZE, "seed": seed, "chunk_delay": chunk_delay,
           "session_timeout": 4.0}
    return subprocess.Popen([sys.executable, str(HERE / "largeproducer.py"), json.dumps(cfg)],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=HERE)  # noqa: SIM115


def test_producer_killed_mid_blob_leaves_nothing_behind(ensemble, journal_dir) -> None:
    hosts = fresh_chroot(ensemble.connect_string, "/large-faults-")
    client = make_client(hosts, timeout=10.0)
    got: stdqueue.Queue[bytes] = stdqueue.Queue()
    consumer = (QueueBuilder.builder(client, got.put, BytesSerializer(), PATH).lock_path(PATH + "-locks")
                .large_items(orphan_grace=2.0).build_queue())
    try:
        with consumer:
            for r in ROOTS[1:]:
                client.ensure_path(r)
            before = stored(client)

            killed = producer(hosts, 1, 0.3, journal_dir / "killed.log")
            blob_root = PATH + "-blobs"

            def chunks_written() -> int:
                names = client.get_children(blob_root)
                return max((len(client.get_children(f"{blob_root}/{n}")) for n in names), default=0)

            wait_for(lambda: chunks_written() >= 4, timeout=60, message="the producer never wrote a chunk")
            killed.send_signal(signal.SIGKILL)
            killed.wait(10)
            assert got.get(timeout=30) == b"before"
            (blob,) = client.get_children(blob_root)
            state = large_ref.BlobState.decode(client.get(f"{blob_root}/{blob}")[0])
            assert state.state == "writing"  # half written, never committed
            assert stored(client) > before
            # Nothing reaches the consumer while the garbage waits for the reaper, and it goes after the grace.
            wait_for(lambda: stored(client) == before, timeout=60, interval=0.2,
                     message=f"stored {stored(client)}, before {before}")
            assert consumer.stats().blobs_reclaimed == 1
            assert got.empty()

            # The same put, not killed, goes through whole.
            done = producer(hosts, 2, 0.0, journal_dir / "done.log")
            assert done.wait(120) == 0, (journal_dir / "done.log").read_text()
            out = [got.get(timeout=60) for _ in range(3)]
            expected = random.Random(2).randbytes(SIZE)
            assert out[0] == b"before" and out[2] == b"after"
            assert hashlib.sha256(out[1]).digest() == hashlib.sha256(expected).digest()
            assert consumer.flush_acks(10)
            wait_for(lambda: stored(client) == before, timeout=30, message="the acked item left nodes behind")
            time.sleep(0.5)
            assert got.empty()  # exactly once each
            stats = consumer.stats()
            assert stats.consumed == 4 and stats.corrupt_quarantined == 0 and stats.blobs_reclaimed == 1
    finally:
        client.stop()
        client.close()
    assert os.path.exists(journal_dir / "killed.log")
