"""Canvases (chain, group, chord) through faults on the 3-node ensemble, run by real ``zkqueue worker`` processes,
with exact accounting.

- Canvases added while the leader is killed (their adds and hand-offs meet the election): every canvas completes
  with the right result, each node recorded done exactly once in its canvas record, each chord body run exactly
  once, no canvas job left in any queue.
- A worker SIGKILLed while it runs a chord's members: their leases go with its session, another worker runs them
  again (attempt 2), the chord completes, each member recorded once and the body run once.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultrun import strike  # type: ignore[import-not-found]

from zkqueue import chain, chord, group
from zkqueue.flows import FlowState
from zkqueue.server.testing import fresh_chroot, wait_for

from tests.flows.canvas_procs import PATIENCE, CanvasEnv

pytestmark = [pytest.mark.faults, pytest.mark.ensemble, pytest.mark.timeout(600)]

CANVASES = 18  # a third each: chains of 3, groups of 5, chords of 10 members


@pytest.fixture
def env(ensemble, journal_dir: Path) -> Iterator[CanvasEnv]:  # noqa: ANN001
    e = CanvasEnv(fresh_chroot(ensemble.connect_string, "/canvas-faults-"), journal_dir)
    try:
        yield e
    finally:
        e.close()


def _recorded_once(h) -> None:  # noqa: ANN001
    """Each node of the canvas done, and in its history exactly once."""
    rec = h.get()
    assert rec.state is FlowState.COMPLETED, rec
    assert set(rec.steps.values()) == {"done"}, rec.steps
    ends = Counter((e.step, e.status) for e in rec.history)
    assert ends == Counter({(step, "done"): 1 for step in rec.steps}), rec.history


def test_canvases_through_a_leader_kill(ensemble, env) -> None:  # noqa: ANN001
    t = env.tasks
    for _ in range(2):
        env.worker("-c", "4")
    for w in env.workers:
        w.wait_started()
    added: list[tuple[str, object, object]] = []  # (kind, handle, expected result)
    striking, struck = threading.Event(), threading.Event()
    during: list[bool] = []  # per add after the first third: whether the strike was still going when it returned

    def add_all() -> None:
        for i in range(CANVASES):
            if i == CANVASES // 3:
                striking.wait(PATIENCE)  # the other adds meet the election
            kind = ("chain", "group", "chord")[i % 3]
            if kind == "chain":
                h, want = chain(t.add.s(i, 1), t.mul.s(2), t.add.s(y=3)).enqueue(), (i + 1) * 2 + 3
            elif kind == "group":
                h, want = group(t.member.s(j, f"g{i}") for j in range(5)).enqueue(), [j * j for j in range(5)]
            else:
                h = chord((t.member.s(j, f"c{i}") for j in range(10)), t.merge.s(key=f"c{i}")).enqueue()
                want = {"values": [j * j for j in range(10)], "n": 10}
            added.append((kind, h, want))
            if i >= CANVASES // 3:
                during.append(not struck.is_set())

    producer = threading.Thread(target=add_all, name="canvas-producer")
    producer.start()
    wait_for(lambda: len(added) >= CANVASES // 3 or not producer.is_alive(), PATIENCE)
    striking.set()
    strike("leader_kill", ensemble)  # adds and hand-offs in flight meet the election
    struck.set()
    producer.join(PATIENCE * 2)
    assert not producer.is_alive() and len(added) == CANVASES
    assert any(during), "no add met the leader kill: the scenario proved nothing"
    for kind, h, want in added:
        assert h.result(timeout=PATIENCE * 2) == want, (kind, h.id)
        _recorded_once(h)
    bodies = env.run_counts("merge")
    assert bodies == Counter({f"c{i}": 1 for i in range(2, CANVASES, 3)})  # each chord body ran exactly once
    members = env.run_counts("member")
    expected = {f"g{i}/{j}" for i in range(1, CANVASES, 3) for j in range(5)} | {
        f"c{i}/{j}" for i in range(2, CANVASES, 3) for j in range(10)}
    assert set(members) == expected  # every member ran; nothing ran that was not added
    again = sum(n - 1 for n in members.values())
    print(f"\ncanvases through a leader kill: {CANVASES} canvases, {sum(members.values())} member runs "
          f"({again} again after a lost reply or session)")
    jq = env.app.queue("default")
    assert {k: jq.counts()[k] for k in ("queued", "active", "retrying")} == {"queued": 0, "active": 0,
                                                                             "retrying": 0}


def test_a_worker_killed_mid_chord_is_rescued_and_the_body_runs_once(env) -> None:  # noqa: ANN001
    t = env.tasks
    victim = env.worker("-c", "4", "--prefetch", "0", session_timeout=4.0)
    victim.wait_started()
    h = chord((t.hold.s(j, f"m{j}") for j in range(4)), t.merge.s(key="body")).enqueue()
    wait_for(lambda: len(env.runs()) == 4, PATIENCE)  # the victim runs all four members, held
    assert {pid for _t, _k, pid in env.runs()} == {victim.pid}
    victim.kill()
    env.release()
    rescuer = env.worker("-c", "4")
    rescuer.wait_started()
    assert h.result(timeout=PATIENCE) == {"values": [0, 1, 2, 3], "n": 4}
    _recorded_once(h)
    runs = env.runs()
    assert Counter(k for task, k, _p in runs if task == "hold") == Counter({f"m{j}": 2 for j in range(4)})
    assert [(task, pid) for task, _k, pid in runs if task == "merge"] == [("merge", rescuer.pid)]  # once
    rec = h.get()
    assert sorted(e.attempts for e in rec.history if e.step != "4") == [2, 2, 2, 2]  # killed, then rescued
