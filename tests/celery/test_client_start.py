"""Starting the process's shared client survives a connection lost right after the session handshake.

kazoo's ``start()`` connects, then (with a chroot) asks whether the chroot exists. When the server dies in between
(a leader election under load), that request fails with ``ConnectionLoss``. A fresh clone's run saw this in a
Celery prefork child: its first result write started the client, and the task ended FAILURE(ConnectionLoss)
(Celery does not retry a result write unless ``result_backend_always_retry`` is set). The start is now tried again
within ``connect_timeout``. The connection is cut by a real TCP proxy in front of a real
server, as the client's first request after its handshake is sent."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

import zkqueue.celery  # noqa: F401  (registers zkqueue://)
from zkqueue.celery import client as clients
from zkqueue.celery.backend import ZkQueueBackend
from zkqueue.celery.url import parse_url
from zkqueue.errors import BrokerConnectionError
from zkqueue.server.testing_proxy import TcpProxy


def test_a_result_written_through_a_connection_cut_after_the_handshake_is_stored(zk_server: Any,
                                                                                 zk_chroot: str) -> None:
    with TcpProxy(zk_server.connect_string.split(",")[0]) as proxy:
        url = f"zkqueue://{proxy.connect_string}{zk_chroot}"
        app = Celery("cut-test", broker=url, backend=url, set_as_current=False)
        backend = app.backend
        assert isinstance(backend, ZkQueueBackend)
        try:
            proxy.cut_after_handshake()
            backend.mark_as_done("t-cut", {"answer": 42})  # the backend's first use starts its client
            assert proxy.cuts == 1
            assert backend.get_task_meta("t-cut", cache=False)["result"] == {"answer": 42}
        finally:
            backend.close()


def test_connections_cut_until_the_timeout_are_a_connection_error(zk_server: Any, zk_chroot: str) -> None:
    with TcpProxy(zk_server.connect_string.split(",")[0]) as proxy:
        proxy.cut_after_handshake(1000)
        url = parse_url(f"zkqueue://{proxy.connect_string}{zk_chroot}/cut-always")
        with pytest.raises(BrokerConnectionError, match="lost the connection"):
            clients.acquire(url, connect_timeout=2)
        assert proxy.cuts >= 2  # tried again, not given up at the first cut
