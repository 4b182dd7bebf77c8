"""``zkqueue flows get|counts|cancel`` against a real ZooKeeper."""

from __future__ import annotations

import json

from click.testing import CliRunner

from zkqueue.flows import Flow, FlowState
from zkqueue.ops.cli import main

PATH = "/flows/cli"


def invoke(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output, result.output
    return result


def test_get_counts_and_cancel(zk_hosts: str, zk_client) -> None:
    flow = Flow(zk_client, PATH)
    flow.step("first", lambda job: None, next="second")
    flow.step("second", lambda job: None)
    with flow:  # no worker: the flow jobs wait in their first step
        flow.add({"n": 1}, job_id="a")
        flow.add({"n": 2}, job_id="b")

        got = invoke("flows", "get", "--connect", zk_hosts, PATH, "a")
        assert got.exit_code == 0, got.output
        assert json.loads(got.stdout)["state"] == "RUNNING" and json.loads(got.stdout)["pending"] == ["first"]

        cancelled = invoke("flows", "cancel", "--connect", zk_hosts, PATH, "a", "nope")
        assert cancelled.exit_code == 0, cancelled.output
        assert [line.split("\t") for line in cancelled.stdout.splitlines()] == [
            ["a", "cancelled"], ["nope", "not found or finished"]]
        assert flow.get("a").state is FlowState.CANCELLED and flow.get("b").state is FlowState.RUNNING

        again = invoke("flows", "cancel", "--connect", zk_hosts, PATH, "a")
        assert again.exit_code == 1 and again.stdout.strip() == "a\tnot found or finished"

        out = invoke("flows", "counts", "--connect", zk_hosts, PATH).stdout.splitlines()
        counts = dict(line.split(None, 1) for line in out if not line.startswith("step "))
        assert counts["running"] == "1" and counts["cancelled"] == "1" and counts["completed"] == "0"
        assert "step first: queued=1 active=0 retrying=0" in out  # b's; a's step job was removed
