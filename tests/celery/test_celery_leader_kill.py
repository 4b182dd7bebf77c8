"""A ZooKeeper leader SIGKILLed under load (3-node ensemble): every task's result arrives, and no task runs twice.

Two prefork workers run ``acks_late`` tasks while the test publishes; the leader is killed in the middle of the
publishing and started again afterwards. A leader election moves each session to another server without ending
it, so no lease ends and no message is delivered twice; requests of the election's seconds are retried."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery import Celery
from tests.celery import celery_tasks as t
from tests.celery.worker_procs import Worker, running_workers
from zkqueue.server.testing import fresh_chroot

pytestmark = [pytest.mark.ensemble, pytest.mark.faults, pytest.mark.timeout(600)]

TASKS = 200


@pytest.fixture(scope="module")
def module_url(zk_ensemble: Any) -> str:
    return "zkqueue://" + fresh_chroot(zk_ensemble.connect_string) + "?session_timeout=10"


@pytest.fixture(scope="module")
def workers(module_app: Celery, module_url: str, runs_dir: Path, logs_dir: Path) -> Iterator[list[Worker]]:
    with running_workers(module_url, runs_dir, logs_dir, ["lk1", "lk2"], pool="prefork",
                         concurrency=2) as started:
        yield started


def test_leader_kill_under_load(workers: list[Worker], zk_ensemble: Any) -> None:
    tokens = [f"lk-{i}-{uuid.uuid4().hex}" for i in range(TASKS)]
    results = []
    leader = None
    t0 = time.monotonic()
    try:
        for i, tok in enumerate(tokens):
            if i == TASKS // 2:
                leader = zk_ensemble.leader()
                zk_ensemble.kill(leader)
                killed_at = time.monotonic()
            results.append(t.counted.delay(tok))
        assert [r.get(timeout=180) for r in results] == tokens
    finally:
        if leader is not None and not zk_ensemble.is_running(leader):
            zk_ensemble.start(leader)
        zk_ensemble.wait_ready(180)
    elapsed = time.monotonic() - t0
    twice = [tok for tok in tokens if len(t.runs(tok)) != 1]
    assert not twice, {tok: t.runs(tok) for tok in twice[:10]}
    print(f"{TASKS} tasks, leader {leader} killed after {TASKS // 2} sends ({killed_at - t0:.1f} s): all results in "
          f"{elapsed:.1f} s, each task ran once")
