"""Broker URLs: multi-host with a chroot, and clear errors for bad ones."""

from __future__ import annotations

from typing import Any

import kombu
import pytest

from zkqueue.celery.url import parse_url
from zkqueue.errors import ConfigurationError


def test_multi_host_url_with_chroot() -> None:
    url = parse_url("zkqueue://user:pw@zk1:2181,zk2,[::1]:2182/apps/celery?session_timeout=5")
    assert url.hosts == ("zk1:2181", "zk2:2181", "[::1]:2182")
    assert url.chroot == "/apps/celery"
    assert url.connect_string == "zk1:2181,zk2:2181,[::1]:2182/apps/celery"
    assert url.auth == ("user", "pw")
    assert url.as_uri() == "zkqueue://user:**@zk1:2181,zk2:2181,[::1]:2182/apps/celery?session_timeout=5.0"


@pytest.mark.parametrize("bad, words", [
    ("zkqueue://", "no ZooKeeper host"),
    ("zkqueue://zk1:2181,,zk2/x", "bad host"),
    ("zkqueue://zk1:99999/x", "bad port"),
    ("zkqueue://zk1/a//b", "bad chroot"),
    ("zkqueue://zk1/x?sesion_timeout=3", "unknown option"),
    ("redis://zk1", "not a zkqueue"),
])
def test_bad_url_is_a_configuration_error(bad: str, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        parse_url(bad)


def test_bad_url_fails_the_kombu_connection_at_once() -> None:
    conn = kombu.Connection("zkqueue://zk1:2181,,zk2/x", connect_timeout=1)
    with pytest.raises(ConfigurationError, match="bad host"):
        conn.connect()  # a ValueError, not a connection error: kombu does not retry it


def test_real_multi_host_url_with_chroot_connects(zk_server: Any, zk_chroot: str) -> None:
    """The same server named twice (two host entries) and a chroot: kombu's own parse_url fails on this URL."""
    hosts = zk_server.connect_string.split(",")[0]
    url = f"zkqueue://{hosts},{hosts}{zk_chroot}/celery"
    with kombu.Connection(url, connect_timeout=10) as conn:
        queue = conn.SimpleQueue("multi")
        queue.put({"n": 1})
        message = queue.get(timeout=5)
        assert message.payload == {"n": 1}
        message.ack()
        queue.close()
        assert conn.as_uri() == url
    from zkqueue.server.testing import make_client
    client = make_client(zk_server.connect_string)
    try:
        assert client.exists(f"{zk_chroot}/celery/kombu/queues/multi") is not None
    finally:
        client.stop()
        client.close()
