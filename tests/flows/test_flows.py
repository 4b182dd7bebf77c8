"""zkqueue.flows on a real ZooKeeper: linear, fan-out and fan-in flows, dead branches under fail and continue,
Next routing, distinct ids, per-step retries, max_concurrency, and dead steps after lost workers."""

from __future__ import annotations

import json
import threading
import time

import pytest

from zkqueue.errors import ConfigurationError, CorruptItemError, QueueNotStartedError, QueueStateError
from zkqueue.flows import Flow, FlowJob, FlowState, Next, store
from zkqueue.flows.definition import Ending
from zkqueue.flows.handoff import OK, StepRef
from zkqueue.jobs import RetryPolicy
from zkqueue.server.testing import wait_for

PATH = "/flows/access"
FAST = RetryPolicy(max_attempts=3, backoff=0.05, max_backoff=0.2, jitter=False)


def raises(error: Exception):  # noqa: ANN201
    """A handler that always fails with ``error``."""

    def handler(job):  # noqa: ANN001, ANN202
        raise error

    return handler


def done_once(job: FlowJob) -> dict[str, int]:
    """How many times each step is in the history as done."""
    out: dict[str, int] = {}
    for h in job.history:
        if h.status == "done":
            out[h.step] = out.get(h.step, 0) + 1
    return out


def test_linear_flow_keeps_every_result(zk_client) -> None:
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("check", lambda job: {"ok": job.params["user"] == 62}, next="update")
    flow.step("update", lambda job: job.results["check"]["ok"] and "roles", next="notify")
    flow.step("notify", lambda job: f"told {job.params['user']}")
    with flow:
        assert flow.add({"user": 62}, job_id="join-62") == "join-62"
        with flow.work(concurrency=2):
            job = flow.wait("join-62", timeout=30)
        assert job.state is FlowState.COMPLETED and job.pending == []
        assert job.results == {"check": {"ok": True}, "update": "roles", "notify": "told 62"}
        assert [h.step for h in job.history] == ["check", "update", "notify"]
        assert all(h.status == "done" and h.attempts == 1 and h.started_ms <= h.finished_ms for h in job.history)
        assert job.params == {"user": 62} and job.errors == []
        counts = flow.counts()
        assert counts["completed"] == 1 and counts["running"] == 0
        assert all(c == {"queued": 0, "active": 0, "retrying": 0} for c in counts["steps"].values())


def test_a_paused_step_starts_nothing_until_resumed(zk_client) -> None:
    ran: list[str] = []
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("fetch", lambda job: ran.append("fetch") or 1, next="store")
    flow.step("store", lambda job: ran.append("store") or 2)
    with flow:
        flow.pause(["store"])
        assert flow.paused == {"fetch": False, "store": True}
        flow.add({"n": 1}, job_id="p1")
        with flow.work(concurrency=2):
            wait_for(lambda: flow.counts()["steps"]["store"]["queued"] == 1, timeout=10)
            time.sleep(0.5)
            assert ran == ["fetch"]  # handed off to the paused step, which does not start it
            flow.resume()
            job = flow.wait("p1", timeout=10)
        assert job.state is FlowState.COMPLETED and ran == ["fetch", "store"]
        assert flow.paused == {"fetch": False, "store": False}


def test_fan_out_and_fan_in_run_the_join_once_with_every_result(zk_client) -> None:
    joins: list[dict] = []
    lock = threading.Lock()

    def notify(job):  # noqa: ANN001, ANN202
        with lock:
            joins.append(dict(job.results))
        return sorted(k for k in job.results if k in ("discord", "telegram", "slack"))

    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("update", lambda job: job.params["n"], next=["discord", "telegram", "slack"])
    flow.step("discord", lambda job: ("d", job.results["update"]))
    flow.step("telegram", lambda job: ("t", job.results["update"]))
    flow.step("slack", lambda job: ("s", job.results["update"]))
    flow.step("notify", notify, after=["discord", "telegram", "slack"])
    n = 20
    with flow:
        ids = [flow.add({"n": i}, job_id=f"f{i}") for i in range(n)]
        with flow.work(concurrency=3):  # branches of one flow job end at the same time: they race on its record
            jobs = [flow.wait(i, timeout=60) for i in ids]
    assert len(joins) == n  # each join ran exactly once
    for i, job in enumerate(jobs):
        assert job.state is FlowState.COMPLETED
        assert job.results["discord"] == ["d", i] and job.results["telegram"] == ["t", i]
        assert job.results["slack"] == ["s", i] and job.results["notify"] == ["discord", "slack", "telegram"]
        assert done_once(job) == {"update": 1, "discord": 1, "telegram": 1, "slack": 1, "notify": 1}
        assert job.history[-1].step == "notify"


def test_dead_branch_under_fail_ends_the_flow_job_and_cancels_queued_siblings(zk_client) -> None:
    ran: list[str] = []
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("update", lambda job: 1, next=["discord", "telegram"])
    flow.step("discord", raises(RuntimeError("discord is down")),
              retry=RetryPolicy(max_attempts=2, backoff=0.05, jitter=False))
    flow.step("telegram", lambda job: ran.append("telegram"))
    flow.step("notify", lambda job: ran.append("notify"), after=["discord", "telegram"])
    with flow:
        flow.add({}, job_id="j1")
        with flow.work(steps=["update", "discord"]):  # telegram's job stays queued
            job = flow.wait("j1", timeout=30)
        assert job.state is FlowState.FAILED and job.pending == []
        assert job.steps == {"update": "done", "discord": "failed", "telegram": "cancelled"}
        assert [e.error for e in job.errors] == ["RuntimeError: discord is down"] * 2
        assert [(e.step, e.attempt) for e in job.errors] == [("discord", 1), ("discord", 2)]
        assert flow.queue("telegram").counts()["queued"] == 0  # dropped in the failing hand-off's multi
        with flow.work(steps=["telegram", "notify"]):
            time.sleep(0.5)
        assert ran == []
        assert flow.get("j1").state is FlowState.FAILED


def test_dead_branch_under_continue_still_runs_the_join(zk_client) -> None:
    seen: list[FlowJob] = []
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("update", lambda job: 1, next=["discord", "telegram"])
    flow.step("discord", lambda job: "granted")
    flow.step("telegram", raises(ValueError("no telegram account")), retry=RetryPolicy(max_attempts=1))
    flow.step("notify", lambda job: seen.append(job) or sorted(e.step for e in job.errors),
              after=["discord", "telegram"], on_failure="continue")
    with flow:
        flow.add({}, job_id="j2")
        with flow.work(concurrency=2):
            job = flow.wait("j2", timeout=30)
    assert job.state is FlowState.COMPLETED
    assert job.steps == {"update": "done", "discord": "done", "telegram": "failed", "notify": "done"}
    assert job.results == {"update": 1, "discord": "granted", "notify": ["telegram"]}
    assert len(seen) == 1 and seen[0].results == {"update": 1, "discord": "granted"}
    assert [(h.step, h.status) for h in job.history][-1] == ("notify", "done")


def test_next_routes_at_run_time(zk_client) -> None:
    def check(job):  # noqa: ANN001, ANN202
        return Next("grant" if job.params["ok"] else "deny", {"checked": True})

    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("check", check, next="grant")
    flow.step("grant", lambda job: "granted")
    flow.step("deny", lambda job: "denied")
    flow.step("bad", lambda job: Next("nowhere"), retry=RetryPolicy(max_attempts=3, backoff=0.05))
    with flow:
        flow.add({"ok": True}, job_id="yes")
        flow.add({"ok": False}, job_id="no")
        flow.add({}, job_id="lost", step="bad")
        with flow.work():
            yes, no, lost = (flow.wait(i, timeout=30) for i in ("yes", "no", "lost"))
    assert yes.results == {"check": {"checked": True}, "grant": "granted"}
    assert no.results == {"check": {"checked": True}, "deny": "denied"}
    assert lost.state is FlowState.FAILED and "ConfigurationError" in lost.errors[-1].error
    assert len(lost.errors) == 1  # an unknown step is not retried


def test_duplicate_id_returns_none_while_running(zk_client) -> None:
    release = threading.Event()
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("slow", lambda job: release.wait(10) and job.params)
    with flow:
        assert flow.add(1, job_id="dup") == "dup"
        assert flow.add(2, job_id="dup") is None  # queued
        with flow.work():
            wait_for(lambda: flow.counts()["steps"]["slow"]["active"] == 1)
            assert flow.add(3, job_id="dup") is None  # running
            release.set()
            job = flow.wait("dup", timeout=30)
            assert job.results == {"slow": 1}
            assert flow.add(4, job_id="dup") == "dup"  # finished: runs again
            assert flow.wait("dup", timeout=30).results == {"slow": 4}
        again = flow.get("dup")
        assert again.run == 2 and done_once(again) == {"slow": 1}  # each run has its own record
        assert flow.get("never") is None


def test_each_step_retries_with_its_own_policy(zk_client) -> None:
    calls = {"flaky": 0, "strict": 0}

    def flaky(job):  # noqa: ANN001, ANN202
        calls["flaky"] += 1
        if job.attempt < 3:
            raise RuntimeError(f"try {job.attempt}")
        return job.attempt

    def strict(job):  # noqa: ANN001, ANN202
        calls["strict"] += 1
        raise RuntimeError("never")

    flow = Flow(zk_client, PATH, retry=RetryPolicy(max_attempts=1))
    flow.step("flaky", flaky, next="strict", retry=RetryPolicy(max_attempts=4, backoff=0.05, jitter=False))
    flow.step("strict", strict, retry=RetryPolicy(max_attempts=2, backoff=0.05, jitter=False))
    with flow:
        flow.add({}, job_id="r")
        with flow.work():
            job = flow.wait("r", timeout=30)
    assert calls == {"flaky": 3, "strict": 2}
    assert job.state is FlowState.FAILED and job.results == {"flaky": 3}
    assert [(h.step, h.status, h.attempts) for h in job.history] == [("flaky", "done", 3), ("strict", "failed", 2)]
    assert [(e.step, e.attempt) for e in job.errors] == [("flaky", 1), ("flaky", 2), ("strict", 1), ("strict", 2)]


def test_max_concurrency_is_honoured_across_workers(zk_client, zk_client_factory) -> None:
    running = 0
    peak = 0
    lock = threading.Lock()
    gate = threading.Event()

    def limited(job):  # noqa: ANN001, ANN202
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        try:
            gate.wait(0.2)  # hold the slot a while so the others would overlap if they could
        finally:
            with lock:
                running -= 1
        return job.params

    def define(client) -> Flow:  # noqa: ANN001
        return Flow(client, PATH, retry=FAST).step("limited", limited, max_concurrency=2)

    other = zk_client_factory()
    with define(zk_client) as a, define(other) as b:
        ids = [a.add(i, job_id=f"c{i}") for i in range(10)]
        with a.work(concurrency=3), b.work(concurrency=3):  # six threads, two slots
            jobs = [a.wait(i, timeout=60) for i in ids]
    assert all(j.state is FlowState.COMPLETED for j in jobs)
    assert peak == 2


def test_shared_data_and_bad_inputs(zk_client) -> None:
    def first(job):  # noqa: ANN001, ANN202
        job.data["seen"] = [job.step]

    def second(job):  # noqa: ANN001, ANN202
        job.data["seen"] = job.data["seen"] + [job.step]
        return len(job.data["seen"])

    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("first", first, next="second")
    flow.step("second", second)
    with pytest.raises(ConfigurationError):
        flow.step("first", first)
    with pytest.raises(ConfigurationError):
        flow.step("x/y", first)
    with pytest.raises(ConfigurationError):
        flow.step("z", first, on_failure="ignore")
    with pytest.raises(ConfigurationError):
        flow.step("z", first, max_concurrency=0)
    with pytest.raises(QueueNotStartedError):
        flow.add({})
    with flow:
        with pytest.raises(ConfigurationError):
            flow.add({}, step="nope")
        with pytest.raises(TypeError):
            flow.add({}, job_id=7)  # type: ignore[arg-type]
        flow.add({}, job_id="d")
        with flow.work():
            job = flow.wait("d", timeout=30)
        assert job.data == {"seen": ["first", "second"]} and job.results["second"] == 2
        with pytest.raises(TimeoutError):
            flow.add({}, job_id="waits")
            flow.wait("waits", timeout=0.3)
    bad = Flow(zk_client, "/flows/bad").step("a", first, next="missing")
    with pytest.raises(ConfigurationError):
        bad.start()


def test_a_step_whose_workers_keep_dying_is_dead_and_the_flow_job_ends(zk_client) -> None:
    """Attempts are counted at claim: a step claimed max_attempts times without an outcome is dead at its next
    claim, and that death hands off like any other (here: the flow job fails)."""
    flow = Flow(zk_client, PATH, retry=RetryPolicy(max_attempts=2, backoff=0.05))
    flow.step("crashy", lambda job: "never")
    with flow:
        flow.add({}, job_id="k")
        jq = flow.queue("crashy")
        for _ in range(2):  # two workers that claim the step and die (give it back without an outcome)
            held = jq.claim(timeout=5)
            assert held is not None
            held.release()
        with flow.work():
            job = flow.wait("k", timeout=30)
    assert job.state is FlowState.FAILED and job.steps == {"crashy": "failed"}
    assert "attempts exhausted" in job.errors[-1].error
    assert [(h.step, h.status, h.attempts) for h in job.history] == [("crashy", "failed", 2)]


def test_a_hand_off_that_loses_the_race_for_the_flow_record_reads_it_again(zk_client, monkeypatch) -> None:
    """Two branches end together: the second multi fails on the flow record's version, is built again from the
    record the first one left, and so queues the join (exactly once)."""
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("split", lambda job: 0, next=["a", "b"])
    flow.step("a", lambda job: "A")
    flow.step("b", lambda job: "B")
    flow.step("join", lambda job: sorted(job.results), after=["a", "b"])
    with flow:
        flow.add({}, job_id="race")
        with flow.work(steps=["split"]):
            wait_for(lambda: flow.get("race").pending == ["a", "b"])
        held_a, held_b = flow.queue("a").claim(timeout=5), flow.queue("b").claim(timeout=5)
        real_read = store.read
        reads = []

        def read_then_let_b_in(*args):  # noqa: ANN002, ANN202
            got = real_read(*args)
            if not reads:  # a read the record; b's hand-off commits before a's multi
                reads.append(got)
                assert flow.handoff.end(StepRef("b", held_b.record, held_b.version, held_b.ack_ops),
                                        Ending(ok=True, result="B")) == OK
                held_b.forget()
            return got

        monkeypatch.setattr(store, "read", read_then_let_b_in)
        assert flow.handoff.end(StepRef("a", held_a.record, held_a.version, held_a.ack_ops),
                                Ending(ok=True, result="A")) == OK
        held_a.forget()
        monkeypatch.setattr(store, "read", real_read)
        assert flow.handoff.races == 1
        assert flow.get("race").pending == ["join"]
        with flow.work(steps=["join"]):
            job = flow.wait("race", timeout=30)
    assert job.results == {"split": 0, "a": "A", "b": "B", "join": ["a", "b", "split"]}
    assert done_once(job) == {"split": 1, "a": 1, "b": 1, "join": 1}


def test_cli_get_and_counts(zk_client, zk_hosts) -> None:
    from click.testing import CliRunner

    from zkqueue.ops.cli import main

    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("one", lambda job: job.params["n"] + 1, next="two")
    flow.step("two", lambda job: job.results["one"] * 2)
    with flow:
        flow.add({"n": 1}, job_id="cli-1")
        flow.add({"n": 5}, job_id="cli-2", step="two")
        with flow.work(steps=["one"]):
            wait_for(lambda: flow.get("cli-1").pending == ["two"])
    runner = CliRunner()
    got = runner.invoke(main, ["flows", "get", "--connect", zk_hosts, PATH, "cli-1"])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.output)
    assert doc["state"] == "RUNNING" and doc["pending"] == ["two"] and doc["results"] == {"one": 2}
    assert [h["step"] for h in doc["history"]] == ["one"]
    counts = runner.invoke(main, ["flows", "counts", "--connect", zk_hosts, PATH])
    assert counts.exit_code == 0, counts.output
    lines = counts.output.splitlines()
    assert lines[:3] == ["running    2", "completed  0", "failed     0"]
    assert "step two: queued=2 active=0 retrying=0" in lines
    missing = runner.invoke(main, ["flows", "get", "--connect", zk_hosts, PATH, "nope"])
    assert missing.exit_code == 1 and "no flow job" in missing.output


def test_a_join_routed_around_still_runs_and_a_bad_result_fails_the_step(zk_client) -> None:
    """Next skips one of the join's branches: once nothing else is queued the join runs with what there is (it
    does not wait for ever). A result that is not JSON fails the step at once (not retried)."""
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("split", lambda job: Next(["a"], "only a"), next=["a", "b"])
    flow.step("a", lambda job: "A")
    flow.step("b", lambda job: "B")
    flow.step("join", lambda job: sorted(job.results), after=["a", "b"])
    flow.step("odd", lambda job: object())
    with flow:
        flow.add({}, job_id="around")
        flow.add({}, job_id="odd", step="odd")
        with flow.work():
            job, odd = flow.wait("around", timeout=30), flow.wait("odd", timeout=30)
    assert job.state is FlowState.COMPLETED and "b" not in job.steps
    assert job.results == {"split": "only a", "a": "A", "join": ["a", "split"]}
    assert odd.state is FlowState.FAILED and len(odd.errors) == 1 and "SerializationError" in odd.errors[0].error


def test_an_unreadable_flow_record_drops_its_step_jobs_once(zk_client) -> None:
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("only", lambda job: "never")
    with flow:
        flow.add({}, job_id="garbled")
        zk_client.set(flow.paths.flow("garbled"), b"not json")
        with flow.work():
            wait_for(lambda: flow.counts()["steps"]["only"] == {"queued": 0, "active": 0, "retrying": 0})
        assert flow.handoff.skipped == 1  # logged and counted once, not retried
        assert flow.counts()["unreadable"] == 1 and flow.jobs() == []
        with pytest.raises(CorruptItemError):
            flow.get("garbled")
        with pytest.raises(QueueStateError):
            flow.wait("unknown", timeout=1)


def test_an_add_whose_reply_was_lost_after_the_job_finished_does_not_run_it_again(zk_client, monkeypatch) -> None:
    """The add commits, its reply is lost, and workers finish the whole flow job before the add looks again: the
    add knows its own write by its token (in any state) and returns the id; nothing runs twice."""
    from kazoo.exceptions import ConnectionLoss

    from zkqueue.flows import flow as flow_module

    ran: list[str] = []
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("one", lambda job: ran.append("one") or 1, next="two")
    flow.step("two", lambda job: ran.append("two") or 2)
    real_commit = flow_module.commit
    lost = []

    def commit_then_lose_the_reply(client, ops):  # noqa: ANN001, ANN202
        result = real_commit(client, ops)
        if not lost:
            lost.append(result.ok)
            with flow.work():
                assert flow.wait("lost", timeout=30).state is FlowState.COMPLETED
            raise ConnectionLoss("the reply was lost")
        return result

    with flow:
        monkeypatch.setattr(flow_module, "commit", commit_then_lose_the_reply)
        assert flow.add({}, job_id="lost") == "lost"
        monkeypatch.setattr(flow_module, "commit", real_commit)
        job = flow.get("lost")
        assert lost == [True]
        assert job.state is FlowState.COMPLETED and job.run == 1
        assert done_once(job) == {"one": 1, "two": 1} and ran == ["one", "two"]
        assert all(c == {"queued": 0, "active": 0, "retrying": 0} for c in flow.counts()["steps"].values())
        assert flow.stats()["one"]["added"] == 1
        assert flow.add({}, job_id="lost") == "lost" and flow.get("lost").run == 2  # a new add runs it again


def test_stats_count_adds_hand_offs_retries_and_deaths_per_step(zk_client) -> None:
    calls = {"flaky": 0}

    def flaky(job):  # noqa: ANN001, ANN202
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise ValueError("once")
        return "ok"

    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("start", lambda job: 0, next=["flaky", "bad"])
    flow.step("flaky", flaky)
    flow.step("bad", raises(ValueError("always")), on_failure="continue")
    assert flow.stats() == {s: {"added": 0, "completed": 0, "retried": 0, "dead_lettered": 0}
                            for s in ("start", "flaky", "bad")}
    with flow:
        flow.add({}, job_id="counted")
        with flow.work():
            job = flow.wait("counted", timeout=30)
        assert job.state is FlowState.COMPLETED
        assert flow.stats() == {
            "start": {"added": 1, "completed": 1, "retried": 0, "dead_lettered": 0},
            "flaky": {"added": 1, "completed": 1, "retried": 1, "dead_lettered": 0},
            "bad": {"added": 1, "completed": 0, "retried": 2, "dead_lettered": 1},
        }


def test_finished_flow_records_are_reaped_and_history_is_capped(zk_client, monkeypatch) -> None:
    from zkqueue.flows import model
    from zkqueue.jobs import Keep

    monkeypatch.setattr(model, "MAX_HISTORY", 5)
    flow = Flow(zk_client, PATH, retry=FAST, keep=Keep(count=2, age=None))
    flow.step("loop", lambda job: Next("loop", job.attempt) if len(job.results) == 0 and
              job.data.setdefault("n", 0) < 0 else None)
    loops = {"n": 0}

    def again(job):  # noqa: ANN001, ANN202
        loops["n"] += 1
        return Next("again" if loops["n"] < 12 else None, loops["n"])

    flow.step("again", again)
    flow.step("slow", lambda job: time.sleep(30))
    with flow:
        flow.add({}, job_id="looping", step="again")
        for i in range(4):
            flow.add({}, job_id=f"done-{i}", step="loop")
        with flow.work():
            looped = flow.wait("looping", timeout=30)
            for i in range(4):
                flow.wait(f"done-{i}", timeout=30)
        assert looped.state is FlowState.COMPLETED and loops["n"] == 12
        assert len(looped.history) == 5 and looped.history_dropped == 7
        assert len(zk_client.get(flow.paths.flow("looping"))[0]) < 4096
        zk_client.create(flow.paths.flow("running"), model.FlowRecord("running", FlowState.RUNNING, {},
                                                                      updated_ms=0).encode())
        assert flow.reap() == 3  # 5 finished, 2 kept (the newest); the running one is never reaped
        kept = sorted(j.id for j in flow.jobs())
        assert "running" in kept and len(kept) == 3 and flow.reap() == 0
    with pytest.raises(ConfigurationError):
        Flow(zk_client, PATH, keep=10)  # type: ignore[arg-type]


def test_the_reaper_runs_while_workers_run(zk_client) -> None:
    from zkqueue.jobs import Keep

    flow = Flow(zk_client, PATH, retry=FAST, keep=Keep(count=0, age=None), reap_interval=0.1)
    flow.step("only", lambda job: "x")
    with flow:
        flow.add({}, job_id="gone")
        with flow.work():
            wait_for(lambda: flow.get("gone") is None, timeout=20)
        assert flow.reaped == 1


def test_read_only_open_creates_nothing_and_the_cli_maps_errors(zk_client, zk_hosts) -> None:
    from click.testing import CliRunner
    from kazoo.security import make_digest_acl

    from zkqueue.ops.cli import main

    with pytest.raises(QueueStateError):
        Flow.open_existing(zk_client, "/no/such/flow")
    assert zk_client.exists("/no/such") is None
    runner = CliRunner()
    for args in (["get", "/no/such/flow", "x"], ["counts", "/no/such/flow"]):
        got = runner.invoke(main, ["flows", args[0], "--connect", zk_hosts, *args[1:]])
        assert got.exit_code == 1 and "no flow at /no/such/flow" in got.output, got.output
        assert got.exc_info is None or isinstance(got.exc_info[1], SystemExit)
    assert zk_client.exists("/no/such") is None
    flow = Flow(zk_client, PATH)
    flow.step("only", lambda job: "x")
    with flow:
        flow.add({}, job_id="ro")
    ro = Flow.open_existing(zk_client, PATH)
    try:
        assert ro.get("ro").pending == ["only"] and ro.counts()["steps"]["only"]["queued"] == 1
        with pytest.raises(QueueStateError):
            ro.add({})
        with pytest.raises(QueueStateError):
            ro.work()
    finally:
        ro.close()
    zk_client.create("/locked-flow")
    zk_client.create("/locked-flow/flows", b"", acl=[make_digest_acl("app", "secret", all=True)])
    refused = runner.invoke(main, ["flows", "counts", "--connect", zk_hosts, "/locked-flow"])
    assert refused.exit_code == 4 and "not allowed" in refused.output, refused.output
