"""A small loopback TCP proxy for fault tests: pass traffic through, stall it, or drop connections.

Point a client at ``proxy.connect_string`` instead of the server, then::

    proxy.stall()   # connections stay open but no byte moves either way (a network partition)
    proxy.drop()    # every connection is closed now and new ones are closed on accept (a dead host)
    proxy.heal()    # back to passing traffic; bytes held during a stall are delivered
    proxy.cut_after_handshake()  # the next connection is closed as its first request after the handshake is sent

A client cut off by ``stall()`` or ``drop()`` for longer than its session timeout loses its session: the server
expires it, and the client learns so when it reaches the server again. Loopback only, stdlib only, threads only
(one accept thread plus one pump thread per connection direction); ``close()`` ends them all.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import select
import socket
import threading

log = logging.getLogger("zkqueue.server.testing_proxy")

_POLL = 0.05
_CHUNK = 65536


class ProxyMode(enum.Enum):
    PASS = "pass"
    STALL = "stall"
    DROP = "drop"


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target`` (``"host:port"``). Use as a context manager or call close()."""

    def __init__(self, target: str, listen_host: str = "127.0.0.1") -> None:
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"target must be 'host:port', got {target!r}")
        self.target = (host, int(port))
        self._mode = ProxyMode.PASS
        self._lock = threading.Lock()
        self._conns: list[tuple[socket.socket, socket.socket]] = []
        self._closed = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((listen_host, 0))
        self._listener.listen(64)
        self._listener.settimeout(_POLL * 4)
        self.host, self.port = self._listener.getsockname()[:2]
        self.connections_accepted = 0
        self._cuts_left = 0
        #: Connections closed by :meth:`cut_after_handshake` so far.
        self.cuts = 0
        self._thread = threading.Thread(target=self._accept_loop, name=f"tcp-proxy-{self.port}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public
    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def mode(self) -> ProxyMode:
        return self._mode

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns)

    def stall(self) -> None:
        """Stop moving bytes; connections stay open (so neither side sees a reset)."""
        self._mode = ProxyMode.STALL
        log.info("proxy %s -> %s:%d stalled", self.connect_string, *self.target)

    def drop(self) -> None:
        """Close every connection now, and close new ones as soon as they are accepted."""
        self._mode = ProxyMode.DROP
        self._close_all()
        log.info("proxy %s -> %s:%d dropping", self.connect_string, *self.target)

    def heal(self) -> None:
        self._mode = ProxyMode.PASS
        log.info("proxy %s -> %s:%d passing", self.connect_string, *self.target)

    def cut_after_handshake(self, count: int = 1) -> None:
        """Close each of the next ``count`` connections when its client sends the first request after the session
        handshake (a client's second write); that request never reaches the server. The client was connected and
        loses the connection with that request pending: what a client sees when its server dies (a leader election)
        just after it connected."""
        with self._lock:
            self._cuts_left += count

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._close_all()
        self._thread.join(timeout=5)

    def __enter__(self) -> "TcpProxy":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _close_all(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for pair in conns:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                downstream, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                if not self._closed.is_set():
                    log.exception("proxy %s stopped accepting", self.connect_string)
                return
            self.connections_accepted += 1
            if self._mode is ProxyMode.DROP:
                downstream.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError as exc:
                log.info("proxy %s: target %s:%d unreachable: %r", self.connect_string, *self.target, exc)
                downstream.close()
                continue
            pair = (downstream, upstream)
            with self._lock:
                self._conns.append(pair)
            for src, dst, name in ((downstream, upstream, "up"), (upstream, downstream, "down")):
                threading.Thread(
                    target=self._pump, args=(pair, src, dst, name == "up"), name=f"tcp-proxy-{self.port}-{name}",
                    daemon=True,
                ).start()

    def _cut_now(self, writes: int) -> bool:
        """Whether a client's ``writes``-th write closes its connection (see :meth:`cut_after_handshake`)."""
        if writes != 2:
            return False
        with self._lock:
            if self._cuts_left <= 0:
                return False
            self._cuts_left -= 1
            self.cuts += 1
        log.info("proxy %s: connection cut after its handshake", self.connect_string)
        return True

    def _pump(self, pair: tuple[socket.socket, socket.socket], src: socket.socket, dst: socket.socket,
              from_client: bool = False) -> None:
        writes = 0
        try:
            while not self._closed.is_set():
                if self._mode is not ProxyMode.PASS:
                    if self._mode is ProxyMode.DROP:
                        break
                    self._closed.wait(_POLL)  # stalled: leave the bytes in the kernel buffers
                    continue
                readable, _, _ = select.select([src], [], [], _POLL)
                if not readable or self._mode is not ProxyMode.PASS:
                    continue
                data = src.recv(_CHUNK)
                if not data:
                    break
                writes += 1
                if from_client and self._cut_now(writes):
                    break  # the request is not forwarded; both sides are closed below
                dst.sendall(data)
        except (OSError, ValueError):
            pass  # a side closed (or drop() closed both): the connection is over
        finally:
            with self._lock:
                if pair in self._conns:
                    self._conns.remove(pair)
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
