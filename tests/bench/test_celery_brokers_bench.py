"""The ``celery_brokers`` section (issue 31), small: Celery on zkqueue://, on Redis (a private redis-server) and on
kombu's own zookeeper:// transport, with real worker processes and real servers. Asserts behaviour only, never a
speed: every row is there, every end-to-end task of each broker completes with its result read back, and in the
SIGKILL scenario zkqueue loses no task and runs none twice (what Redis and kombu's transport do is recorded, not
asserted: that is what the section measures).

The SIGKILL runs here use one pool process per worker and 100 ms tasks, so the kill (just after the victim started a
task) always lands mid-task with nothing else unacked on the victim: with several pool processes a task that had
just finished when the kill came, its late ack not yet sent, runs again on any at-least-once broker (the section
counts those separately), and a speed-free smoke test must not depend on that timing."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import celery_brokers, jobs_peers, report, runner
from zkqueue.server.testing import fresh_chroot

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

COUNT = 30


@pytest.fixture(scope="module")
def section(zk_server: Any) -> dict[str, Any]:
    pytest.importorskip("celery", reason="the celery extra is not installed: pip install -e '.[bench,celery]'")
    if jobs_peers.find_redis_server() is None:
        pytest.skip("redis-server is missing: apt-get install -y redis-server (make test installs it as root)")
    s = celery_brokers.CeleryBrokerSettings(
        count=COUNT, repeats=1, concurrency=2, kill_concurrency=1, task_ms=100.0, max_seconds=60.0,
        kill_deadline=9.0, zk_session_timeout=4.0, redis_short_vt=None)
    return celery_brokers.run_section(fresh_chroot(zk_server.connect_string), settings=s)


def test_every_broker_has_its_rows_and_completes_every_task(section: dict[str, Any]) -> None:
    assert section["status"] == "ok" and section["na"] == {}, section.get("na")
    for broker in celery_brokers.BROKERS:
        (run,) = section["runs"][broker]
        assert "error" not in run, run
        assert run["complete"] and run["ok"] == COUNT and run["missing"] == 0, run
        assert 0 < run["send_seconds"] <= run["seen_seconds"] and run["rate"] > 0, run
        assert section["summary"][broker]["n"] == 1
    assert set(section["ratios"]) == {"zkqueue_redis", "zkqueue_kombu_zookeeper", "zkqueue_unconfirmed_redis"}
    assert all(v is not None for v in section["ratios"].values())
    assert "zookeeper://" not in section["labels"]["zkqueue"]
    assert "result backend zkqueue://" in section["labels"]["kombu_zookeeper"]


def test_sigkill_zkqueue_loses_nothing_and_runs_nothing_twice(section: dict[str, Any]) -> None:
    kill = section["kill"]
    assert set(kill) == set(celery_brokers.BROKERS) - celery_brokers.NO_KILL_RUN
    for broker, row in kill.items():
        assert "error" not in row, (broker, row)
        assert row["victim_started"] >= 1 and row["started_before_kill"] >= COUNT // 2, row
        assert row["completed"] + row["lost"] == COUNT, row
    z = kill["zkqueue"]
    assert z["lost"] == 0 and z["duplicates"] == 0, z
    assert z["completed"] == z["results_stored_ok"] == COUNT, z
    assert z["in_flight_at_kill"] >= 1 and z["in_flight_back"] == z["in_flight_at_kill"], z
    assert section["kill_pass"] is True
    # kombu's zookeeper:// deletes a message when it delivers it: what the killed worker held is gone for good (and
    # a task its survivor had not taken by the deadline is still queued): both are counted.
    kz = kill["kombu_zookeeper"]
    if kz["lost"]:
        assert kz["where_missing"]["gone"] + kz["where_missing"]["in_queue_node"] == kz["lost"], kz
    # Redis keeps a delivered acks_late message in its unacked hash until the visibility timeout (kombu's default,
    # an hour): within the deadline the killed worker's tasks are missing but not gone.
    r = kill["redis"]
    assert r["settings"]["redis_visibility_timeout_s"] == 3600
    if r["lost"]:
        assert r["where_missing"]["in_unacked_hash"] == r["lost"], r


def test_report_prints_the_rows_and_the_runner_has_the_options(section: dict[str, Any]) -> None:
    tables = report.celery_brokers_tables({"celery_brokers": section})
    assert len(tables) == 2
    assert [c.header for c in tables[1].columns][:3] == ["broker", "in flight at kill", "lost"]
    assert tables[1].row_count == 3 and tables[0].row_count == 4
    args = runner.parse_args(["--no-celery-brokers", "--celery-brokers-count", "7"])
    assert args.no_celery_brokers and args.celery_brokers_count == 7
