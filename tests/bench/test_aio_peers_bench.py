"""The aio workload's harness (issue 21): zkqueue.aio, arq and SAQ each run both rows small (real redis-server, real
ZooKeeper, real worker processes), every result read back and checked. No speed is asserted."""

from __future__ import annotations

import pytest

from benchmarks import aio_peers, jobs_peers


@pytest.mark.slow
def test_aio_section_runs_both_rows_for_every_implementation(zk_hosts) -> None:
    if jobs_peers.find_redis_server() is None:
        pytest.skip("redis-server is missing: apt-get install -y redis-server (make test installs it as root)")
    pytest.importorskip("arq", reason="the bench extra is not installed: pip install -e '.[bench]'")
    pytest.importorskip("saq", reason="the bench extra is not installed: pip install -e '.[bench]'")
    s = aio_peers.AioSettings(adds=200, jobs=120, in_flight=50, concurrency=40, sleep_s=0.01, repeats=1,
                              max_seconds=60.0)
    section = aio_peers.run_section(zk_hosts, s)
    assert section["status"] == "ok" and section["na"] == {}
    for row, count in (("add", 200), ("e2e", 120)):
        for name in aio_peers.IMPLS:
            (run,) = section["runs"][row][name]
            assert "error" not in run, run
            assert run["complete"] and run["ok"] == count and run["rate"] > 0, run
        assert set(section["medians"][row]) == set(aio_peers.IMPLS)
        assert isinstance(section["ratios"][row], float)
        assert section["pass"][row] is (section["ratios"][row] >= aio_peers.TARGET)
