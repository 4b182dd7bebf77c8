"""zkqueue.server.testing_proxy.TcpProxy: passes bytes, stalls them, drops connections, heals; and a kazoo client
through it loses its session to a stall longer than the session timeout, then carries on."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient, KazooState

from zkqueue.server.testing import wait_for
from zkqueue.server.testing_proxy import ProxyMode, TcpProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _connect(proxy: TcpProxy) -> socket.socket:
    return socket.create_connection((proxy.host, proxy.port), timeout=10)


def test_pass_stall_heal_drop(echo) -> None:
    with TcpProxy(echo) as proxy:
        sock = _connect(proxy)
        sock.sendall(b"hello")
        assert sock.recv(100) == b"hello"
        proxy.stall()
        assert proxy.mode is ProxyMode.STALL
        sock.sendall(b"held")
        sock.settimeout(0.5)
        with pytest.raises(socket.timeout):
            sock.recv(100)  # nothing moves while stalled ...
        proxy.heal()
        sock.settimeout(10)
        assert sock.recv(100) == b"held"  # ... and the held bytes arrive after the heal
        proxy.drop()
        assert sock.recv(100) == b""  # the connection was closed
        sock.close()
        refused = _connect(proxy)  # accepted, then closed at once while dropping
        assert refused.recv(100) == b""
        refused.close()
        proxy.heal()
        again = _connect(proxy)
        again.sendall(b"back")
        assert again.recv(100) == b"back"
        again.close()
    wait_for(lambda: proxy.open_connections == 0)


def test_bad_target_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        TcpProxy("no-port")


def test_kazoo_through_the_proxy_loses_its_session_to_a_long_stall(zk_server, zk_chroot) -> None:
    with TcpProxy(zk_server.connect_string.split(",")[0]) as proxy:
        client = KazooClient(hosts=proxy.connect_string + zk_chroot, timeout=2.0,
                             connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5})
        states: list[str] = []
        client.add_listener(states.append)
        client.start(timeout=30)
        try:
            session = client.client_id[0]
            client.create("/ping", b"")
            # a stall is only a partition while it lasts: the session is decided by the server's clock, so
            # a stall well past the session timeout must cost the session
            proxy.stall()
            wait_for(lambda: KazooState.SUSPENDED in states, timeout=30)
            wait_for(lambda: client.state == KazooState.SUSPENDED and proxy.connections_accepted >= 2, timeout=30)
            threading.Event().wait(5.0)  # the cut itself is the fault: well past the 2 s session timeout
            proxy.drop()
            proxy.heal()
            wait_for(lambda: KazooState.LOST in states, timeout=30, message=f"states {states}")
            wait_for(lambda: client.connected and client.client_id[0] != session, timeout=30)
            assert client.exists("/ping") is not None
        finally:
            client.stop()
            client.close()
