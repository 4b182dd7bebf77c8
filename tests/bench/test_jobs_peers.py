"""The jobs workload's harness: zkqueue, RQ and Celery each run the same small job batch end to end, with every
result read back and checked (real redis-server, real ZooKeeper, real worker processes)."""

from __future__ import annotations

import pytest

from benchmarks import jobs_peers


@pytest.mark.slow
def test_jobs_section_runs_every_implementation(zk_hosts) -> None:
    if jobs_peers.find_redis_server() is None:
        pytest.skip("redis-server is missing: apt-get install -y redis-server (make test installs it as root)")
    pytest.importorskip("rq", reason="the bench extra is not installed: pip install -e '.[bench]'")
    pytest.importorskip("celery", reason="the bench extra is not installed: pip install -e '.[bench]'")
    section = jobs_peers.run_section(zk_hosts, count=60, repeats=1, max_seconds=60)
    assert section["na"] == {}
    for name in ("zkqueue", "rq", "celery"):
        (run,) = section["runs"][name]
        assert run["complete"] and run["jobs"] == 60, run
    assert set(section["ratios"]) == {"rq", "celery"}
