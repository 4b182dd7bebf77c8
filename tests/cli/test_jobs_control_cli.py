"""``zkqueue jobs cancel|pause|resume|queued|running|counts|get`` against a real ZooKeeper: the job controls of
:class:`~zkqueue.jobs.JobQueue` from the command line."""

from __future__ import annotations

import json
import threading
import time

from click.testing import CliRunner

from zkqueue.jobs import JobQueue, JobState, RetryPolicy
from zkqueue.server.testing import wait_for
from zkqueue.ops.cli import main

PATH = "/jobs/cli-control"
FAST = RetryPolicy(max_attempts=3, backoff=0.2, max_backoff=1.0, jitter=False)


def invoke(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output, result.output
    return result


def lines(result) -> list[list[str]]:
    return [line.split("\t") for line in result.stdout.splitlines()]


def counts_of(result) -> dict[str, str]:
    return dict(line.split(None, 1) for line in result.stdout.splitlines())


def test_queued_cancel_and_counts(zk_hosts: str, zk_client) -> None:
    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        jq.add({"n": 1}, job_id="a")
        jq.add({"n": 2}, job_id="b", priority=-1)  # runs first
        jq.add({"n": 3}, job_id="c")

        queued = invoke("jobs", "queued", "--connect", zk_hosts, PATH)
        assert queued.exit_code == 0, queued.output
        assert lines(queued) == [["b", "QUEUED", "attempts=0", "priority=-1"],
                                 ["a", "QUEUED", "attempts=0", "priority=0"],
                                 ["c", "QUEUED", "attempts=0", "priority=0"]]
        assert [r[0] for r in lines(invoke("jobs", "queued", "--connect", zk_hosts, PATH, "--limit", "1"))] == ["b"]

        cancel = invoke("jobs", "cancel", "--connect", zk_hosts, PATH, "a", "never-added")
        assert cancel.exit_code == 0, cancel.output
        assert lines(cancel) == [["a", "cancelled"], ["never-added", "not found or finished"]]
        assert jq.get("a").state is JobState.CANCELLED
        again = invoke("jobs", "cancel", "--connect", zk_hosts, PATH, "a")  # finished now: none found
        assert again.exit_code == 1 and lines(again) == [["a", "not found or finished"]]
        assert invoke("jobs", "cancel", "--connect", zk_hosts, PATH).exit_code == 2  # ids are required

        counts = counts_of(invoke("jobs", "counts", "--connect", zk_hosts, PATH))
        assert counts["queued"] == "2" and counts["cancelled"] == "1" and counts["paused"] == "no"
        assert [r[0] for r in lines(invoke("jobs", "queued", "--connect", zk_hosts, PATH))] == ["b", "c"]
        shown = json.loads(invoke("jobs", "get", "--connect", zk_hosts, PATH, "a").stdout)
        assert shown["state"] == "CANCELLED" and shown["progress"] is None and shown["headers"] == {}


def test_pause_and_resume(zk_hosts: str, zk_client) -> None:
    ran: list[str] = []
    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        paused = invoke("jobs", "pause", "--connect", zk_hosts, PATH)
        assert paused.exit_code == 0 and paused.stdout.strip() == f"paused {PATH}"
        wait_for(lambda: jq.paused, timeout=10, message="the pause was not seen")
        assert counts_of(invoke("jobs", "counts", "--connect", zk_hosts, PATH))["paused"] == "yes"
        assert invoke("jobs", "pause", "--connect", zk_hosts, PATH).exit_code == 0  # idempotent
        jq.add("x", job_id="x")
        with jq.work(lambda job: ran.append(job.id)):
            time.sleep(1.0)
            assert ran == [] and jq.get("x").state is JobState.QUEUED  # nothing starts while paused
            resumed = invoke("jobs", "resume", "--connect", zk_hosts, PATH)
            assert resumed.exit_code == 0 and resumed.stdout.strip() == f"resumed {PATH}"
            assert jq.wait("x", timeout=20).state is JobState.COMPLETED
        assert ran == ["x"]
        assert counts_of(invoke("jobs", "counts", "--connect", zk_hosts, PATH))["paused"] == "no"


def test_running_shows_progress_and_a_running_job_gets_a_cancel_request(zk_hosts: str, zk_client) -> None:
    started = threading.Event()

    def handler(job):
        job.report_progress({"done": 3, "of": 10})
        started.set()
        deadline = time.monotonic() + 30
        while not job.cancel_requested and time.monotonic() < deadline:
            time.sleep(0.01)
        return "stopped"

    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        assert invoke("jobs", "running", "--connect", zk_hosts, PATH).stdout == ""  # "no running jobs" on stderr
        jq.add({"n": 1}, job_id="run", headers={"traceparent": "00-abc-def-01"})
        jq.work(handler)
        assert started.wait(10)
        wait_for(lambda: jq.get("run").progress is not None, timeout=10, message="no progress written")

        running = invoke("jobs", "running", "--connect", zk_hosts, PATH)
        assert running.exit_code == 0, running.output
        assert lines(running) == [["run", "ACTIVE", "attempts=1", "priority=0", 'progress={"done": 3, "of": 10}']]
        shown = json.loads(invoke("jobs", "get", "--connect", zk_hosts, PATH, "run").stdout)
        assert shown["progress"] == {"done": 3, "of": 10}
        assert shown["headers"] == {"traceparent": "00-abc-def-01"}
        assert shown["state"] == "ACTIVE"

        cancel = invoke("jobs", "cancel", "--connect", zk_hosts, PATH, "run")
        assert cancel.exit_code == 0 and lines(cancel) == [["run", "cancel requested (running)"]]
        assert jq.wait("run", timeout=20).state is JobState.CANCELLED
        assert invoke("jobs", "running", "--connect", zk_hosts, PATH).stdout == ""


def test_listings_refuse_a_path_without_a_job_queue(zk_hosts: str, zk_client) -> None:
    zk_client.ensure_path("/plain/queue-like")
    for command in ("queued", "running"):
        for path in ("/nowhere", "/plain"):
            out = invoke("jobs", command, "--connect", zk_hosts, path)
            assert out.exit_code == 1 and f"no job queue at {path}" in out.output, (command, path)
    assert not zk_client.exists("/nowhere")  # reads only: nothing created
