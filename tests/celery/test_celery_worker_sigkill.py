"""acks_late on zkqueue://: a Celery worker SIGKILLed in the middle of a task. Its task comes back when its
ZooKeeper session ends (session_timeout=4 s here), runs again once on the other worker, and nothing is lost."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from celery import Celery
from tests.celery import celery_tasks as t
from tests.celery.worker_procs import Worker


@pytest.fixture(scope="module")
def module_url(zk_server: object) -> str:  # a short session: the dead worker's leases end 4 s after its death
    from zkqueue.server.testing import fresh_chroot

    return "zkqueue://" + fresh_chroot(zk_server.connect_string) + "?session_timeout=4"  # type: ignore[attr-defined]


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def two_workers(module_app: Celery, module_url: str, runs_dir: Path, logs_dir: Path) -> Iterator[list[Worker]]:
    made = [Worker(module_url, runs_dir, logs_dir, name) for name in ("victim", "survivor")]
    yield made
    for w in made:
        w.stop()


def test_sigkilled_worker_task_runs_again_once_and_nothing_is_lost(two_workers: list[Worker]) -> None:
    victim, survivor = two_workers
    victim.start().wait_ready()
    slow = f"slow-{uuid.uuid4().hex}"
    slow_result = t.slow_first.delay(slow)
    wait_until(lambda: len(t.runs(slow)) == 1, 60, "the victim to start the slow task")
    assert t.runs(slow)[0].endswith(" victim")
    tokens = [f"n-{i}-{uuid.uuid4().hex}" for i in range(20)]
    results = [t.counted.delay(tok) for tok in tokens]  # queued behind the slow task (prefetch 1, solo pool)
    survivor.start().wait_ready()
    victim.kill()
    killed_at = time.monotonic()
    assert slow_result.get(timeout=60) == 2
    back_after = time.monotonic() - killed_at
    assert [r.get(timeout=60) for r in results] == tokens
    runs = t.runs(slow)
    assert len(runs) == 2 and runs[1].endswith(" survivor"), runs
    for tok in tokens:
        assert len(t.runs(tok)) == 1, (tok, t.runs(tok))
    print(f"the killed task ran again {back_after:.1f} s after the kill")
