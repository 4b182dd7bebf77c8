"""An app's ZooKeeper client: made from a connect string on first use (``App("zk1:2181,zk2:2181/myapp")``, or the
``ZKQUEUE_CONNECT`` environment variable), or given (``App(client=...)``, started by its owner).

A client made here is per process: a forked child (a process pool's worker) that uses the app gets a client of its
own, because the parent's client threads do not exist in the child. A given client belongs to its owner, who
starts and stops it; it is never replaced.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient

from zkqueue.engine.api import new_client
from zkqueue.errors import ConfigurationError, ConnectFailedError, QueueClosedError

log = logging.getLogger("zkqueue.tasks.connection")

#: The environment variable with the connect string of an ``App()`` made without one.
CONNECT_ENV = "ZKQUEUE_CONNECT"


def connect_string(connect: str | None, client: KazooClient | None) -> str | None:
    """The connect string to use: ``connect``, else ``$ZKQUEUE_CONNECT`` (None when a client is given)."""
    if client is not None:
        if connect is not None:
            raise ConfigurationError("give a connect string or a client, not both")
        return None
    if connect is None:
        connect = os.environ.get(CONNECT_ENV) or None
        if connect is None:
            raise ConfigurationError(f"no ZooKeeper to connect to: give App a connect string "
                                     f"(App(\"zk1:2181,zk2:2181/myapp\")) or a client, or set {CONNECT_ENV}")
    if not isinstance(connect, str) or not connect.strip():
        raise ConfigurationError(f"the connect string must be a non-empty str such as 'zk1:2181,zk2:2181/myapp', "
                                 f"got {connect!r}")
    return connect.strip()


class Connection:
    """The client of one app; ``client()`` connects on first use (thread-safe), ``close()`` ends a client made
    here (a given one is left to its owner)."""

    def __init__(self, connect: str | None, client: KazooClient | None, connect_timeout: float,
                 client_options: Mapping[str, Any] | None) -> None:
        self.connect = connect_string(connect, client)
        if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, (int, float)) or connect_timeout <= 0:
            raise ConfigurationError(f"connect_timeout must be seconds > 0, got {connect_timeout!r}")
        if client_options is not None and not isinstance(client_options, Mapping):
            raise ConfigurationError(f"client_options must be a mapping of KazooClient keywords, got "
                                     f"{client_options!r}")
        self._given = client
        self._client: KazooClient | None = client
        self._timeout = float(connect_timeout)
        self._options = dict(client_options or {})
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.closed = False

    def forked(self) -> bool:
        """True (once) in a child process that inherited this connection: the client made here is dropped without
        being stopped (its threads are the parent's), so the next ``client()`` connects afresh."""
        if self._pid == os.getpid():
            return False
        self._pid = os.getpid()
        self._lock = threading.Lock()  # a lock held by another thread at the fork stays held in the child
        if self._given is None:
            self._client = None
        return True

    def client(self) -> KazooClient:
        if self.closed:
            raise QueueClosedError("the app is closed")
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self.closed:
                raise QueueClosedError("the app is closed")
            if self._client is None:
                assert self.connect is not None
                self._client = self._start(self.connect)
            return self._client

    def _start(self, connect: str) -> KazooClient:
        client = new_client(connect, **self._options)
        try:
            client.start(timeout=self._timeout)
        except Exception as exc:
            try:
                client.stop()
                client.close()
            except Exception:  # noqa: BLE001 - the connect error is the one to report
                log.debug("stopping the client of %s failed", connect, exc_info=True)
            raise ConnectFailedError(f"could not connect to ZooKeeper at {connect!r} within "
                                     f"{self._timeout:g}s: {exc!r}") from exc
        log.info("connected to ZooKeeper at %s", connect)
        return client

    def close(self) -> None:
        """Stop and close a client made here (idempotent); a given client is left running."""
        with self._lock:
            self.closed = True
            client, self._client = self._client, None
        if client is not None and self._given is None:
            client.stop()
            client.close()
