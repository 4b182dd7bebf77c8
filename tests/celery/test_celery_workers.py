"""Real Celery worker processes on zkqueue:// (broker and result backend): two prefork workers of two processes
each for the whole module, driven by this process."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from celery import Celery, chain, chord, group
from celery.exceptions import ChordError
from tests.celery import celery_tasks as t
from tests.celery.worker_procs import ROOT, Worker, celery_command, celery_env, running_workers


@pytest.fixture(scope="module")
def workers(module_app: Celery, module_url: str, runs_dir: Path, logs_dir: Path) -> Iterator[list[Worker]]:
    with running_workers(module_url, runs_dir, logs_dir, ["w1", "w2"], pool="prefork",
                         concurrency=2) as started:
        yield started


def token() -> str:
    return uuid.uuid4().hex


def test_delay_get(workers: list[Worker]) -> None:
    assert t.add.delay(2, 3).get(timeout=30) == 5


def test_retry(workers: list[Worker]) -> None:
    name = token()
    assert t.retry_once.delay(name).get(timeout=30) == 2
    assert len(t.runs(name)) == 2


def test_chain(workers: list[Worker]) -> None:
    assert chain(t.add.s(1, 2), t.add.s(3), t.mul.s(10)).delay().get(timeout=30) == 60


def test_group(workers: list[Worker]) -> None:
    result = group(t.add.s(i, i) for i in range(20)).delay()
    assert result.get(timeout=30) == [2 * i for i in range(20)]


def test_chord_body_runs_once(workers: list[Worker]) -> None:
    name = token()
    result = chord((t.add.s(i, i) for i in range(20)), t.xsum.s(token=name)).delay()
    assert result.get(timeout=60) == sum(2 * i for i in range(20))
    assert len(t.runs(name)) == 1


def test_chord_with_a_failing_part_fails(workers: list[Worker]) -> None:
    result = chord([t.add.s(1, 1), t.boom.s(2)], t.xsum.s()).delay()
    with pytest.raises(ValueError, match="boom 2"):  # the part's own error, as on Celery's Redis backend
        result.get(timeout=60)
    body = result.app.AsyncResult(result.id)  # the body alone: failed with a ChordError naming the part
    with pytest.raises(ChordError, match="boom 2"):
        body.get(timeout=60)


def test_chord_of_chains_and_a_chord_in_a_chain(workers: list[Worker]) -> None:
    header = [chain(t.add.s(i, 1), t.mul.s(2)) for i in range(5)]
    assert chord(header, t.xsum.s()).delay().get(timeout=60) == sum((i + 1) * 2 for i in range(5))
    flow = chain(t.add.s(1, 1), chord([t.add.s(1), t.add.s(2)], t.xsum.s()), t.mul.s(3))
    assert flow.delay().get(timeout=60) == ((2 + 1) + (2 + 2)) * 3


def test_countdown_of_five_seconds(workers: list[Worker]) -> None:
    sent = time.time()
    ran = t.when.apply_async(countdown=5).get(timeout=60)
    assert 5.0 <= ran - sent < 15.0, ran - sent


def test_two_mib_argument_and_result(workers: list[Worker]) -> None:
    data = "a" * (2 * 2**20)
    assert t.size_of.delay(data).get(timeout=60) == len(data)
    assert t.text_of.delay(2 * 2**20).get(timeout=60) == "r" * (2 * 2**20)


def test_inspect_ping_from_another_process(workers: list[Worker], module_url: str, runs_dir: Path) -> None:
    # with the destinations named, inspect returns as soon as each has answered (not after the whole timeout)
    names = ",".join(w.hostname for w in workers)
    began = time.monotonic()
    proc = subprocess.run(celery_command("inspect", "ping", "-t", "30", "--json", "-d", names), cwd=ROOT,
                          capture_output=True, text=True, timeout=90, env=celery_env(module_url, runs_dir))
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert took < 20, f"inspect waited out its 30 s timeout ({took:.1f} s) though every destination had answered"
    for w in workers:
        assert w.hostname in proc.stdout, proc.stdout
    assert proc.stdout.count("pong") == len(workers), proc.stdout
