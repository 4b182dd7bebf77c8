"""``zkqueue jobs repeats PATH`` against a real ZooKeeper: the table of a job queue's repeating jobs."""

from __future__ import annotations

from datetime import timedelta

from click.testing import CliRunner

from zkqueue.jobs import JobQueue
from zkqueue.ops.cli import main

PATH = "/jobs/cli-repeats"


def invoke(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output
    return result


def test_jobs_repeats_lists_each_definition_with_its_fire_times(zk_hosts: str, zk_client) -> None:
    with JobQueue(zk_client, PATH) as jq:
        assert invoke("jobs", "repeats", "--connect", zk_hosts, PATH).output.strip() == f"no repeating jobs in {PATH}"
        jq.repeat("nightly-report", {"r": 1}, cron="0 3 * * *", tz="Europe/Paris")
        jq.repeat("hourly", None, every=timedelta(hours=1), catch_up="all")
        expected = {r.name: r for r in jq.repeats()}
    data_before = {n: zk_client.get(f"{PATH}/repeats/{n}")[0] for n in zk_client.get_children(f"{PATH}/repeats")}

    out = invoke("jobs", "repeats", "--connect", zk_hosts, PATH)
    assert out.exit_code == 0, out.output
    lines = [line.replace("┃", "│") for line in out.output.splitlines()]  # the header's rule is heavier
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in lines if line.count("│") == 7}
    assert rows.pop("name") == ["schedule", "tz", "catch_up", "last fired", "next fire"]
    nightly = expected["nightly-report"].next_fire.strftime("%Y-%m-%dT%H:%M:%SZ")
    hourly = expected["hourly"].next_fire.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert rows == {
        "nightly-report": ["0 3 * * *", "Europe/Paris", "last", "-", nightly],
        "hourly": ["every 1:00:00", "UTC", "all", "-", hourly],
    }
    # read only: nothing written, no scheduler joined the election
    assert {n: zk_client.get(f"{PATH}/repeats/{n}")[0] for n in zk_client.get_children(f"{PATH}/repeats")} \
        == data_before
    assert zk_client.get_children(f"{PATH}/scheduler") == []


def test_jobs_repeats_refuses_a_path_without_a_job_queue(zk_hosts: str, zk_client) -> None:
    zk_client.ensure_path("/plain/queue-like")
    for path in ("/nowhere", "/plain"):
        out = invoke("jobs", "repeats", "--connect", zk_hosts, path)
        assert out.exit_code == 1 and f"no job queue at {path}" in out.output
    assert not zk_client.exists("/nowhere")
