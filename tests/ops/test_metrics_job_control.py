"""The job-control gauges on a real ZooKeeper: ``zkqueue_cancelled`` (cancelled jobs kept) and ``zkqueue_paused``
(0/1) of a job queue, from an instrumented JobQueue and from the standalone depth exporter."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from test_metrics import scrape
from zkqueue import metrics
from zkqueue.jobs import JobQueue
from zkqueue.ops.depth import job_depth
from zkqueue.server.testing import wait_for


def test_cancelled_and_paused_gauges(zk_client) -> None:
    registry = CollectorRegistry()
    with JobQueue(zk_client, "/m/control") as jq:
        for i in range(3):
            jq.add(i, job_id=f"j-{i}")
        metrics.instrument(jq, registry=registry)
        depth_server = metrics.serve(0, "127.0.0.1", metrics.depth_registry(zk_client, ["/m/control"]))
        server = metrics.serve(0, "127.0.0.1", registry)
        try:
            values = scrape(server.server_port)
            assert values[("zkqueue_cancelled", "/m/control")] == 0
            assert values[("zkqueue_paused", "/m/control")] == 0
            assert jq.cancel("j-0") and jq.cancel("j-1")
            jq.pause()
            for port in (server.server_port, depth_server.server_port):
                values = scrape(port)
                assert values[("zkqueue_cancelled", "/m/control")] == 2 == jq.counts()["cancelled"]
                assert values[("zkqueue_paused", "/m/control")] == 1
                assert values[("zkqueue_pending", "/m/control")] == 1
            jq.resume()
            wait_for(lambda: scrape(depth_server.server_port)[("zkqueue_paused", "/m/control")] == 0, timeout=10)
        finally:
            server.shutdown()
            depth_server.shutdown()
    depth = job_depth(zk_client, "/m/control")
    assert (depth.cancelled, depth.paused) == (2, False)
