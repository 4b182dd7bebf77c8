"""zkqueue.metrics while ZooKeeper cannot be reached: the /metrics page still answers with every other metric, and
the failed reads are counted in zkqueue_scrape_errors_total."""

from __future__ import annotations

import urllib.request

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from zkqueue import metrics
from zkqueue.jobs import JobQueue
from zkqueue.server.testing import make_client, wait_for
from zkqueue.server.testing_proxy import TcpProxy


def scrape(port: int) -> dict[tuple[str, str], float]:
    """{(sample name, queue label): value} of one scrape (urlopen raises unless it answers 200)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(sample.name, sample.labels.get("queue", "")): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_a_scrape_while_zookeeper_is_unreachable_still_serves_the_other_metrics(zk_server, zk_chroot) -> None:
    registry = CollectorRegistry()
    mine = Counter("app_requests", "The user's own metric.", registry=registry)
    mine.inc(7)
    with TcpProxy(zk_server.connect_string.split(",")[0]) as proxy:
        client = make_client(proxy.connect_string + zk_chroot, timeout=4.0)
        try:
            with JobQueue(client, "/m/cut") as jq:
                jq.add({"n": 1}, job_id="j1")
                metrics.instrument(jq, registry=registry)
                server = metrics.serve(0, "127.0.0.1", registry)
                try:
                    values = scrape(server.server_port)
                    assert values[("zkqueue_pending", "/m/cut")] == 1
                    assert values[("zkqueue_scrape_errors_total", "/m/cut")] == 0
                    proxy.drop()  # ZooKeeper unreachable: its reads fail with ConnectionLoss
                    for _ in range(2):
                        values = scrape(server.server_port)  # 200, or urlopen would raise
                        assert values[("app_requests_total", "")] == 7
                        assert ("zkqueue_pending", "/m/cut") not in values
                        assert values[("zkqueue_puts_total", "/m/cut")] == 1  # this process's own counters
                    assert values[("zkqueue_scrape_errors_total", "/m/cut")] == 2
                    proxy.heal()
                    wait_for(lambda: client.connected, timeout=30, message="the client did not reconnect")
                    values = scrape(server.server_port)
                    assert values[("zkqueue_pending", "/m/cut")] == 1
                finally:
                    server.shutdown()
        finally:
            client.stop()
            client.close()


def test_the_depth_exporter_answers_at_once_while_zookeeper_is_unreachable(zk_server, zk_chroot) -> None:
    import time

    with TcpProxy(zk_server.connect_string.split(",")[0]) as proxy:
        client = make_client(proxy.connect_string + zk_chroot, timeout=4.0)
        try:
            client.ensure_path("/e/q")
            server = metrics.serve(0, "127.0.0.1", metrics.depth_registry(client, ["/e/q"]))
            try:
                assert scrape(server.server_port)[("zkqueue_pending", "/e/q")] == 0
                proxy.drop()
                wait_for(lambda: not client.connected, timeout=10)
                start = time.monotonic()
                values = scrape(server.server_port)
                assert time.monotonic() - start < 2  # no wait for the client to reconnect
                assert ("zkqueue_pending", "/e/q") not in values
                assert values[("zkqueue_scrape_errors_total", "/e/q")] == 1
            finally:
                server.shutdown()
        finally:
            client.stop()
            client.close()
