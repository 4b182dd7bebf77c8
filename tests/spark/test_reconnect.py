"""A transient connection loss (the session survives) must not fail a sink write or an executor drain; a lost
session must fail them with a typed error, promptly.

The fault is what a starved worker meets: requests are in flight, no reply comes (a missed heartbeat), kazoo
drops the connection, every request in flight fails with ConnectionLoss, and kazoo reconnects on the same
session. A TcpProxy between the worker's client and the server plays it: stall (requests sent now get no
reply), drop (they fail), heal once the client noticed (it reconnects, same session).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from zkqueue.formats import framing
from zkqueue.spark import put_partition
from zkqueue.spark.clients import SessionLostError, ZkSettings, close_all, get_client
from zkqueue.spark.consumers import ConsumerSpec, run_consumer_task
from zkqueue.server.testing import wait_for
from zkqueue.server.testing_proxy import TcpProxy

pytestmark = pytest.mark.spark


@pytest.fixture
def proxy(zk_server, zk_chroot):
    if "," in zk_server.connect_string:
        pytest.skip("the proxy fronts a single server")
    close_all()
    with TcpProxy(zk_server.connect_string) as proxy:
        proxy.hosts = proxy.connect_string + zk_chroot
        yield proxy
        proxy.heal()
        close_all()


def hiccup(proxy: TcpProxy, settings: ZkSettings, *, stall: float = 1.0, down: float = 0.0) -> threading.Thread:
    """In the background: stall the proxy for ``stall`` s, drop its connections (what is in flight fails with
    ConnectionLoss), wait until the worker's client noticed, keep dropping for ``down`` s, heal."""
    client = get_client(settings)

    def run() -> None:
        proxy.stall()
        time.sleep(stall)
        proxy.drop()
        wait_for(lambda: not client.connected, timeout=10)
        time.sleep(down)
        proxy.heal()

    thread = threading.Thread(target=run, name="hiccup", daemon=True)
    thread.start()
    return thread


def _queued(client, path: str) -> Counter:
    out: Counter = Counter()
    for name in client.get_children(path):
        out.update(framing.decode_items(client.get(f"{path}/{name}")[0]))
    return out


def test_sink_write_survives_a_hiccup_at_its_first_request(proxy, zk_client):
    settings = ZkSettings(proxy.hosts, session_timeout=10.0)
    session = get_client(settings).client_id[0]
    rows = [f"row-{i}".encode() for i in range(2000)]
    fault = hiccup(proxy, settings)  # write()'s first request (ensure_path) is in flight when the drop comes
    stats = put_partition(({"v": r} for r in rows), proxy.hosts, "/q", value_column="v", session_timeout=10.0,
                          batch_size=100)
    fault.join(10)
    assert stats.rows == len(rows)
    assert _queued(zk_client, "/q") == Counter(rows)
    assert get_client(settings).client_id[0] == session  # the same session all along


def test_dedupe_sink_stays_exactly_once_across_a_hiccup_mid_write(proxy, zk_client):
    settings = ZkSettings(proxy.hosts, session_timeout=10.0)
    rows = [f"row-{i}".encode() for i in range(3000)]

    def pairs():
        for i, r in enumerate(rows):
            if i == 1000:  # multis of earlier chunks are in flight (inflight=4)
                hiccup(proxy, settings)
            yield {"v": r}

    stats = put_partition(pairs(), proxy.hosts, "/q", value_column="v", session_timeout=10.0, batch_size=50,
                          inflight=4, dedupe=True, dedupe_key="hiccup")
    assert stats.rows + stats.deduped == len(rows)
    assert _queued(zk_client, "/q") == Counter(rows)  # exactly once, re-sent multis included


def test_executor_consumer_survives_a_hiccup(proxy, zk_client, tmp_path):
    items = [f"job-{i}".encode() for i in range(400)]
    put_partition(({"v": item} for item in items), proxy.hosts, "/jobs", value_column="v")
    settings = ZkSettings(proxy.hosts, session_timeout=10.0)
    handled: list[bytes] = []
    started = threading.Event()

    def handler(item: bytes) -> None:
        if len(handled) == 20 and not started.is_set():
            started.set()
            hiccup(proxy, settings, stall=1.5)  # the task's empty-queue poll is in flight when the drop comes
        handled.append(item)
        time.sleep(0.002)

    spec = ConsumerSpec(zk=settings, path="/jobs", lock_path="/jobs-locks", batch_size=20, poll_interval=0.05)
    counts = run_consumer_task(spec, handler, 0)
    assert started.is_set()
    assert set(handled) == set(items)  # at-least-once: an item whose ack was lost may come again
    assert counts.processed >= len(items)
    assert zk_client.get_children("/jobs") == [] and zk_client.get_children("/jobs-locks") == []


def test_a_lost_session_fails_the_write_with_a_typed_error(proxy, zk_client):
    settings = ZkSettings(proxy.hosts, session_timeout=2.0)
    get_client(settings)
    fault = hiccup(proxy, settings, down=6.0)  # cut off for longer than the session lives
    started = time.monotonic()
    with pytest.raises(SessionLostError, match="session"):
        put_partition(({"v": b"x"} for _ in range(100)), proxy.hosts, "/q", value_column="v", session_timeout=2.0)
    assert time.monotonic() - started < 15.0  # bounded by the session timeout, not a hang
    fault.join(15)
