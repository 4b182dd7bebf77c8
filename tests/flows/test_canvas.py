"""Canvases of tasks (chain, group, chord) run by two real ``zkqueue worker`` processes on a real ZooKeeper: results
in order across both processes, a chord's body run exactly once over 1,000 members, a failing member with and without
``on_failure="continue"``, a canvas cancelled mid-way, a canvas too big for one multi."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Iterator

import pytest

from zkqueue import CanvasCancelledError, CanvasFailedError, chain, chord, group
from zkqueue.errors import ConfigurationError
from zkqueue.flows import FlowState
from zkqueue.flows import canvas_handoff
from zkqueue.flows.canvas_graph import is_error
from zkqueue.server.testing import fresh_chroot, wait_for

from tests.flows.canvas_procs import PATIENCE, CanvasEnv


@pytest.fixture(scope="module")
def env(zk_server, tmp_path_factory) -> Iterator[CanvasEnv]:
    """Two worker processes (8 threads each, nothing claimed ahead) shared by the module's tests, on a chroot of their own."""
    e = CanvasEnv(fresh_chroot(zk_server.connect_string), Path(tmp_path_factory.mktemp("canvas")))
    try:
        for _ in range(2):
            e.worker("-c", "8", "--prefetch", "0")
        for w in e.workers:
            w.wait_started()
        yield e
    finally:
        e.close()


@pytest.fixture
def t(env):
    env.reset()
    return env.tasks


def test_chain_group_and_chord_results_across_two_worker_processes(env, t) -> None:
    h = chain(t.add.s(1, 2), t.mul.s(10), t.add.s(y=5)).enqueue()
    assert h.result(timeout=PATIENCE) == 35  # add(mul(add(1, 2), 10), y=5)
    assert h.state is FlowState.COMPLETED

    # 16 members that wait for the release file fill the 8 threads of each process (no prefetch): both run them
    g = group(t.hold.s(i, f"g{i}") for i in range(16)).enqueue()
    wait_for(lambda: len(env.runs()) == 16, PATIENCE)
    assert {pid for _t, _k, pid in env.runs()} == {w.pid for w in env.workers}
    env.release()
    assert g.result(timeout=PATIENCE) == list(range(16))  # in member order

    c = chord((t.add.s(i, i) for i in range(10)), t.merge.s(key="c1")).enqueue()
    assert c.result(timeout=PATIENCE) == {"values": [2 * i for i in range(10)], "n": 10}
    assert env.run_counts("merge") == {"c1": 1}

    # immutable signatures ignore the input; a group inside a chain is a chord; a handle again by id
    h2 = chain(t.add.s(1, 1), group(t.mul.s(3), t.mul.s(4)), t.merge.s(), t.add.si(7, 8)).enqueue()
    again = env.app.canvas(h2.id)
    assert asyncio.run(again.result_async(timeout=PATIENCE)) == 15  # on an event loop too
    assert again.result(timeout=PATIENCE) == 15
    assert again.get().results["3"] == {"values": [6, 8], "n": 2}


def test_a_chord_of_1000_members_runs_its_body_once(env, t) -> None:
    h = chord((t.member.s(i) for i in range(1000)), t.merge.s(key="big")).enqueue()
    out = h.result(timeout=PATIENCE * 2)
    assert out == {"values": [i * i for i in range(1000)], "n": 1000}
    assert env.run_counts("merge") == {"big": 1}
    rec = h.get()
    assert rec.state is FlowState.COMPLETED and set(rec.steps.values()) == {"done"} and len(rec.steps) == 1001


def test_a_failing_member_fails_the_canvas_after_its_retries(env, t) -> None:
    h = chord([t.add.s(1, 1), t.boom.s("x"), t.add.s(2, 2)], t.merge.s(key="failing")).enqueue()
    with pytest.raises(CanvasFailedError) as info:
        h.result(timeout=PATIENCE)
    assert info.value.canvas.state is FlowState.FAILED
    assert "ValueError: boom x" in str(info.value)
    assert [e.attempt for e in info.value.errors if e.step == "1"] == [1, 2]  # its task's policy: 2 attempts
    assert env.run_counts("merge") == {}  # the body never ran
    assert "3" not in h.get().steps  # nor was it queued

    # a task the workers do not know: the node is dead at once (never retried), the canvas fails, nothing waits
    nowhere = env.app.task(name="canvas.nowhere")(lambda x: x)
    h2 = chain(t.add.s(1, 1), nowhere.s()).enqueue()
    with pytest.raises(CanvasFailedError) as info:
        h2.result(timeout=PATIENCE)
    assert [(e.step, e.attempt) for e in info.value.errors] == [("1", 1)] and "UnknownTaskError" in str(info.value)


def test_a_failing_member_with_continue_gives_the_body_an_error_value(env, t) -> None:
    h = chord([t.add.s(1, 1), t.boom.s("y"), t.add.s(2, 2)], t.merge.s(key="cont")).enqueue(on_failure="continue")
    out = h.result(timeout=PATIENCE)
    assert out["n"] == 3 and out["values"][0] == 2 and out["values"][2] == 4
    assert is_error(out["values"][1]) and "ValueError: boom y" in out["values"][1]["zkqueue.error"]
    assert env.run_counts("merge") == {"cont": 1}
    # a chain goes on too: the next step gets the error value as its input
    h2 = chain(t.boom.s(1), t.merge.s()).enqueue(on_failure="continue")
    got = h2.result(timeout=PATIENCE)
    assert got["n"] == 2 and is_error(got["values"])


def test_a_canvas_cancelled_mid_way_runs_nothing_after(env, t) -> None:
    h = chain(t.add.s(1, 1), t.hold.s("cancel-1"), t.merge.s(key="after-cancel")).enqueue()
    wait_for(lambda: env.run_counts("hold")["cancel-1"] == 1, PATIENCE)
    assert h.cancel() is True
    assert h.state is FlowState.CANCELLED and h.cancel() is False
    env.release()
    with pytest.raises(CanvasCancelledError):
        h.result(timeout=PATIENCE)
    # the held step finishes and records its result, and queues nothing: its hand-off is the record's last change
    wait_for(lambda: h.get().steps.get("1") == "done", PATIENCE)
    rec = h.get()
    assert rec.results["1"] == 2 and "2" not in rec.steps and env.run_counts("merge") == {}

    # a group cancelled before its members run: their waiting jobs are removed
    env.reset()
    blockers = group(t.hold.s(i, f"b{i}") for i in range(16)).enqueue()  # the 16 threads of both workers
    wait_for(lambda: sum(env.run_counts("hold").values()) == 16, PATIENCE)
    g = group(t.member.s(i, "never") for i in range(20)).enqueue()
    assert g.cancel() is True
    jq = env.app.queue(t.member.queue)
    assert all(jq.get(f"{g.id}.{i}") is None for i in range(20))  # removed in the cancel's sweep
    env.release()
    assert len(blockers.result(timeout=PATIENCE)) == 16
    assert not any(k.startswith("never") for k in env.run_counts("member"))


def test_a_canvas_too_big_for_one_multi_is_added_in_several(env, t, monkeypatch, caplog) -> None:
    blob = "x" * 30_000
    members = [t.size.s(blob + str(i)) for i in range(40)]  # ~1.2 MB of arguments: more than one request
    caplog.set_level("INFO", logger="zkqueue.flows.canvas_handoff")
    h = chord(members, t.merge.s()).enqueue()
    assert any("added in" in r.getMessage() and "multis" in r.getMessage() for r in caplog.records)
    out = h.result(timeout=PATIENCE)
    assert out["values"] == [30_000 + len(str(i)) for i in range(40)]


def test_bad_canvases_are_refused(env, t) -> None:
    with pytest.raises(ConfigurationError):
        group().enqueue()
    with pytest.raises(ConfigurationError):
        chain(t.add.s(1, 2), "not a signature")
    with pytest.raises(ConfigurationError):
        chord([t.add.s(1, 2)], "body")
    with pytest.raises(ConfigurationError):
        chain(t.add.s(1, 2)).enqueue(on_failure="ignore")
    assert canvas_handoff.MULTI_BUDGET < 1024 * 1024


def test_a_canvas_is_seen_in_the_flows_cli_and_the_dashboard(env, t) -> None:
    from click.testing import CliRunner

    from zkqueue.ops.cli import main
    from zkqueue.ops.dashboard.app import create_app

    h = chord([t.add.s(1, 2), t.add.s(3, 4)], t.merge.s()).enqueue()
    assert h.result(timeout=PATIENCE) == {"values": [3, 7], "n": 2}
    got = CliRunner().invoke(main, ["flows", "get", "--connect", env.hosts, "/zkqueue/canvases", h.id])
    assert got.exit_code == 0, got.output
    shown = json.loads(got.output)
    assert shown["state"] == "COMPLETED" and shown["results"]["2"] == {"values": [3, 7], "n": 2}
    assert shown["canvas"]["kind"] == "chord" and shown["canvas"]["nodes"]["2"] == {
        "task": "canvas.merge", "queue": "default", "status": "done", "after": ["0", "1"]}

    web = create_app(env.app.client, root="/zkqueue").test_client()
    page = web.get("/queue?path=/zkqueue/canvases")
    assert page.status_code == 200 and b"completed" in page.data
    job = web.get(f"/job?path=/zkqueue/canvases&id={h.id}")
    assert job.status_code == 200 and b"canvas.merge" in job.data and b"chord" in job.data


def test_finished_canvases_are_reaped_with_their_graphs_and_markers(env, t) -> None:
    from zkqueue.jobs import Keep

    running = chain(t.hold.s(0, "reap"), t.add.s(1)).enqueue()  # a running canvas is never reaped
    wait_for(lambda: env.run_counts("hold")["reap"] == 1, PATIENCE)
    canvases = env.app.canvases()
    client, root = env.app.client, env.app.canvases_path
    assert canvases.reap(Keep(count=0, age=None)) >= 5  # every finished canvas of this module
    assert client.get_children(f"{root}/flows") == [running.id]
    assert client.get_children(f"{root}/graphs") == [running.id] and client.get_children(f"{root}/over") == []
    env.release()
    assert running.result(timeout=PATIENCE) == 1


def test_an_add_in_several_multis_whose_reply_was_lost_adds_each_once(env, t, monkeypatch) -> None:
    """A canvas added in several multis (a small budget here); the second multi commits but its reply is lost:
    the add looks (the record's token, the multi's first job) and goes on; every member runs once."""
    from kazoo.exceptions import ConnectionLoss

    real_commit = canvas_handoff.commit
    sent: list[bool] = []

    def lose_the_second_reply(client, ops):  # noqa: ANN001, ANN202
        result = real_commit(client, ops)
        sent.append(result.ok)
        if len(sent) == 2:
            raise ConnectionLoss("the reply was lost")
        return result

    monkeypatch.setattr(canvas_handoff, "MULTI_BUDGET", 6_000)
    monkeypatch.setattr(canvas_handoff, "commit", lose_the_second_reply)
    h = chord((t.member.s(i, "lost") for i in range(30)), t.merge.s(key="lost")).enqueue()
    monkeypatch.setattr(canvas_handoff, "commit", real_commit)
    assert len(sent) > 2 and all(sent)  # several multis; the one whose reply was lost is not sent again
    assert h.result(timeout=PATIENCE) == {"values": [i * i for i in range(30)], "n": 30}
    assert env.run_counts("member") == {f"lost/{i}": 1 for i in range(30)}
    assert env.run_counts("merge") == {"lost": 1}


def test_the_flows_cli_cancels_a_canvas_as_one(env, t) -> None:
    from click.testing import CliRunner

    from zkqueue.ops.cli import main

    blockers = group(t.hold.s(i, f"x{i}") for i in range(16)).enqueue()  # every thread of both workers
    wait_for(lambda: sum(env.run_counts("hold").values()) == 16, PATIENCE)
    g = group(t.member.s(i, "cli-cancelled") for i in range(5)).enqueue()
    got = CliRunner().invoke(main, ["flows", "cancel", "--connect", env.hosts, "/zkqueue/canvases", g.id])
    assert got.exit_code == 0 and got.output.split() == [g.id, "cancelled"], got.output
    assert g.state is FlowState.CANCELLED
    jq = env.app.queue(t.member.queue)
    assert all(jq.get(f"{g.id}.{i}") is None for i in range(5))  # its waiting jobs were removed
    env.release()
    assert len(blockers.result(timeout=PATIENCE)) == 16
    assert env.run_counts("member") == {}
