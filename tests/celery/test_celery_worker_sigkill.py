"""acks_late on zkqueue://: a Celery worker SIGKILLed in the middle of a task. Its task comes back when its
ZooKeeper session ends (session_timeout=4 s here), runs again once on the other worker, and nothing is lost. A
worker killed after its task's result was stored does not run the task again: the ack committed with the result."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from celery import Celery
from tests.celery import celery_tasks as t
from tests.celery.worker_procs import Worker
from zkqueue.celery.queues import node_name
from zkqueue.celery.url import DEFAULT_ROOT, parse_url
from zkqueue.formats import naming
from zkqueue.server.testing import make_client


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


def test_a_worker_killed_right_after_publishing_a_chord_body_sends_it_once(module_app: Celery, module_url: str,
                                                                           runs_dir: Path, logs_dir: Path) -> None:
    """The part that completes a chord publishes the body; its worker is SIGKILLed at once (before the part's late
    ack). The part is delivered again to the other worker and runs again, and the chord's body runs exactly once:
    its publish and the chord's "sent" mark committed together."""
    from celery import chord

    token = f"body-{uuid.uuid4().hex}"
    part = f"part-{uuid.uuid4().hex}"
    victim = Worker(module_url, runs_dir, logs_dir, "body-victim", env={"ZKQ_CELERY_DIE_AFTER_BODY": token})
    survivor = Worker(module_url, runs_dir, logs_dir, "body-survivor")
    try:
        victim.start().wait_ready()
        result = chord([t.counted_number.s(n, part) for n in (1, 2, 3)], t.xsum.s(token=token)).delay()
        assert victim.proc is not None
        victim.proc.wait(60)  # it killed itself right after the body's publish
        assert len(t.runs(part)) == 3 and t.runs(token) == []
        survivor.start().wait_ready()
        assert result.get(timeout=60) == 6
        wait_until(lambda: len(t.runs(part)) == 4, 60, "the last part to run again (its ack died with the victim)")
        time.sleep(1.0)  # a second body, if one were sent, would be run by now (the survivor's queue is empty)
        assert len(t.runs(token)) == 1, t.runs(token)  # the body ran exactly once
        assert all(line.endswith(" body-survivor") for line in t.runs(token) + t.runs(part)[3:])
    finally:
        for w in (victim, survivor):
            w.stop()


@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_a_worker_killed_after_storing_a_result_does_not_run_its_task_again(
        pool: str, module_app: Celery, module_url: str, runs_dir: Path, logs_dir: Path) -> None:
    """The victim SIGKILLs itself (pool process and main process) right after its task's result was stored, before
    the main process acks: the ack committed with the result (one multi, written by the pool process under the
    main process's lease), so the message is gone at once and the other worker never runs the task again."""
    token = f"stored-{pool}-{uuid.uuid4().hex}"
    victim = Worker(module_url, runs_dir, logs_dir, f"stored-victim-{pool}", pool=pool,
                    env={"ZKQ_CELERY_DIE_AFTER_SUCCESS": token})
    survivor = Worker(module_url, runs_dir, logs_dir, f"stored-survivor-{pool}")
    url = parse_url(module_url)
    client = make_client(url.connect_string)
    queue = f"{DEFAULT_ROOT}/queues/{node_name('celery')}"
    locks = f"{DEFAULT_ROOT}/locks/{node_name('celery')}"
    try:
        victim.start().wait_ready()
        result = t.counted.delay(token)
        assert victim.proc is not None
        victim.proc.wait(60)  # it killed itself once the result was stored
        assert result.get(timeout=10) == token
        assert len(t.runs(token)) == 1
        assert [n for n in client.get_children(queue) if naming.is_item_name(n)] == []  # acked with its result
        held = set(client.get_children(locks))  # the victim's session fence and block lock, until its session ends
        survivor.start().wait_ready()
        wait_until(lambda: not held & set(client.get_children(locks)), 30, "the victim's session to end")
        after = f"after-{uuid.uuid4().hex}"
        assert t.counted.delay(after).get(timeout=60) == after  # the survivor consumes (a message left would come first)
        assert len(t.runs(token)) == 1, t.runs(token)
    finally:
        for w in (victim, survivor):
            w.stop()
        client.stop()
        client.close()
