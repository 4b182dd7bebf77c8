"""zkqueue.metrics on a real ZooKeeper: scraped over HTTP and parsed with prometheus_client's parser."""

from __future__ import annotations

import threading
import urllib.request

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from zkqueue import QueueBuilder, StrSerializer, metrics
from zkqueue.jobs import JobQueue, RetryPolicy
from zkqueue.server.testing import wait_for


def scrape(port: int) -> dict[tuple[str, str], float]:
    """{(sample name, queue label): value} of one scrape."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, sample.labels.get("queue", ""))] = sample.value
    return out


def test_queue_counters_and_gauges_match_stats(zk_client) -> None:
    registry = CollectorRegistry()
    got = threading.Semaphore(0)
    fail = {"bad"}

    def consume(item: str) -> None:
        got.release()
        if item in fail:
            fail.clear()
            raise ValueError("once")

    queue = QueueBuilder.builder(zk_client, consume, StrSerializer(), "/m/q").lock_path("/m/q-locks") \
        .put_in_background(False).build_queue()
    producer = QueueBuilder.builder(zk_client, None, StrSerializer(), "/m/q").put_in_background(False).build_queue()
    with producer:
        for item in ("a", "b", "bad"):
            producer.put(item)
        metrics.instrument(producer, name="/m/q-producer", registry=registry)
        server = metrics.serve(0, "127.0.0.1", registry)
        port = server.server_port
        try:
            values = scrape(port)
            assert values[("zkqueue_pending", "/m/q-producer")] == 3
            assert values[("zkqueue_puts_total", "/m/q-producer")] == producer.stats().put_ok == 3
            queue.start()
            metrics.instrument(queue, registry=registry)
            for _ in range(4):  # a, b, bad (fails once, requeued), bad again
                assert got.acquire(timeout=20)
            wait_for(lambda: queue.stats().consumed == 3 and not zk_client.get_children("/m/q"), timeout=20)
            queue.flush_acks(timeout=10)
            values = scrape(port)
            stats = queue.stats()
            assert values[("zkqueue_consumed_total", "/m/q")] == stats.consumed == 3
            assert values[("zkqueue_errors_total", "/m/q")] == stats.consumer_errors == 1
            assert values[("zkqueue_requeues_total", "/m/q")] == stats.requeued
            assert values[("zkqueue_puts_total", "/m/q")] == stats.put_ok
            assert values[("zkqueue_pending", "/m/q")] == 0
            assert values[("zkqueue_in_flight", "/m/q")] == 0
        finally:
            server.shutdown()
            queue.close()


def test_job_queue_metrics_match_counts_and_stats(zk_client) -> None:
    registry = CollectorRegistry()
    with JobQueue(zk_client, "/m/jobs", retry=RetryPolicy(max_attempts=2, backoff=0.01, jitter=False)) as jq:
        for i in range(3):
            jq.add({"n": i}, job_id=f"ok-{i}")
        jq.add({"n": -1}, job_id="poison")
        metrics.instrument(jq, registry=registry)

        def handle(job):
            if job.id == "poison":
                raise RuntimeError("poison")
            return job.params["n"]

        server = metrics.serve(0, "127.0.0.1", registry)
        try:
            with jq.work(metrics.timed(handle, "/m/jobs", registry=registry)):
                wait_for(lambda: jq.counts()["completed"] == 3 and jq.counts()["dead"] == 1, timeout=30)
            values = scrape(server.server_port)
        finally:
            server.shutdown()
        stats, counts = jq.stats(), jq.counts()
        assert stats == {"added": 4, "completed": 3, "retried": 1, "dead_lettered": 1, "cancelled": 0}
        assert values[("zkqueue_puts_total", "/m/jobs")] == 4
        assert values[("zkqueue_consumed_total", "/m/jobs")] == 3
        assert values[("zkqueue_retries_total", "/m/jobs")] == 1
        assert values[("zkqueue_dead_lettered_total", "/m/jobs")] == 1
        assert values[("zkqueue_errors_total", "/m/jobs")] == 2
        assert values[("zkqueue_dead", "/m/jobs")] == counts["dead"] == 1
        assert values[("zkqueue_completed", "/m/jobs")] == counts["completed"] == 3
        assert values[("zkqueue_pending", "/m/jobs")] == counts["queued"] == 0
        assert values[("zkqueue_handler_seconds_count", "/m/jobs")] == 5  # 3 ok, poison twice
        assert values[("zkqueue_latency_seconds_count", "/m/jobs")] == 4  # first attempts only


def test_standalone_exporter_reads_depths_only(zk_client) -> None:
    with QueueBuilder.builder(zk_client, None, StrSerializer(), "/e/q").put_in_background(False) \
            .build_queue() as q:
        for i in range(5):
            q.put(str(i))
    zk_client.ensure_path("/e/q-quarantine/queue-0000000001")
    stop = threading.Event()
    registry = metrics.depth_registry(zk_client, ["/e/q"])
    server = metrics.serve(0, "127.0.0.1", registry)
    try:
        values = scrape(server.server_port)
    finally:
        server.shutdown()
        stop.set()
    assert values[("zkqueue_pending", "/e/q")] == 5
    assert values[("zkqueue_quarantine", "/e/q")] == 1
    assert values[("zkqueue_in_flight", "/e/q")] == 0


def test_grafana_dashboard_uses_the_exported_metrics() -> None:
    dashboard = metrics.grafana_dashboard()
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for name in ("zkqueue_pending", "zkqueue_in_flight", "zkqueue_puts_total", "zkqueue_consumed_total",
                 "zkqueue_dead_lettered_total", "zkqueue_handler_seconds_bucket", "zkqueue_latency_seconds_bucket"):
        assert name in exprs


def test_flow_metrics_count_flow_jobs_and_each_step(zk_client) -> None:
    from zkqueue.flows import Flow

    registry = CollectorRegistry()
    flow = Flow(zk_client, "/m/flow")
    flow.step("a", lambda job: job.params["n"] + 1, next="b")
    flow.step("b", lambda job: job.results["a"] * 2)
    with flow:
        for i in range(3):
            flow.add({"n": i}, job_id=f"f{i}", step="a")
        metrics.instrument(flow, registry=registry)
        server = metrics.serve(0, "127.0.0.1", registry)
        try:
            with flow.work(concurrency=2):
                for i in range(3):
                    assert flow.wait(f"f{i}", timeout=30).results == {"a": i + 1, "b": 2 * (i + 1)}
            values = scrape(server.server_port)
        finally:
            server.shutdown()
    assert values[("zkqueue_flow_jobs", "/m/flow")] == 3
    for step in ("a", "b"):
        assert values[("zkqueue_pending", f"/m/flow/steps/{step}")] == 0
        assert values[("zkqueue_consumed_total", f"/m/flow/steps/{step}")] == 3
    assert values[("zkqueue_puts_total", "/m/flow/steps/a")] == 3
