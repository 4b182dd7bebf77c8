"""One kazoo client per process and ZooKeeper address, shared by every kombu connection of the process.

kombu opens many connections (a pool for producers, one for the worker's consumer, one for its remote control and
events); each ZooKeeper session costs the server a session and the process a socket and threads, so connections
with the same hosts, chroot and credentials share one started client, counted by :func:`acquire` and
:func:`release` and stopped when the last one lets go.

Fork safety: a child process (Celery's prefork pool) must never use its parent's session (both would write on
one socket, and the child's acks would be the parent's). :func:`os.register_at_fork` makes the child forget every
client of its parent without touching it; the child's first connection starts a client of its own.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from zkqueue.errors import BrokerConnectionError
from zkqueue.celery.url import ZkUrl
from zkqueue.engine.api import CONNECTION_ERRORS, Backoff, client_kwargs, new_client
from zkqueue.errors import ConfigurationError

log = logging.getLogger("zkqueue.celery.client")

DEFAULT_SESSION_TIMEOUT = 10.0
#: The pause before a client's start is tried again after its connection was lost right after the handshake.
START_BACKOFF = Backoff(0.05, 1.0)


@dataclass(eq=False)
class SharedClient:
    """A started client and what the transport keeps per client (the queue objects: see :mod:`.queues`)."""

    key: tuple[Any, ...]
    client: KazooClient
    users: int = 0
    #: Per-client things built on demand by the layers above (name -> object with ``close()``).
    parts: dict[str, Any] = field(default_factory=dict)
    #: Bumped each time the session is lost (``KazooState.LOST``): a connection made under an older session
    #: knows its leases are gone.
    session_epoch: int = 0
    listeners: list[Callable[[KazooState], None]] = field(default_factory=list)
    #: Set when the last user let go: the session ends on purpose (not worth a warning).
    stopping: bool = False

    def on_state(self, state: KazooState) -> None:  # kazoo's event thread: never block
        if state == KazooState.LOST:
            self.session_epoch += 1
            if self.stopping:
                log.debug("ZooKeeper session of %s closed", self.client.hosts)
            else:
                log.warning("ZooKeeper session of %s lost: held messages go back to their queues",
                            self.client.hosts)
        for listener in list(self.listeners):
            try:
                listener(state)
            except Exception:  # a listener must not break kazoo's state delivery
                log.exception("connection state listener failed")


_lock = threading.Lock()
_clients: dict[tuple[Any, ...], SharedClient] = {}


def _forget_after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # a thread of the parent may have held it at the fork
    _clients.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def _key(url: ZkUrl, session_timeout: float, acl: Any) -> tuple[Any, ...]:
    return (url.connect_string, url.user, url.password, session_timeout, repr(acl))


def acquire(url: ZkUrl, *, connect_timeout: float, session_timeout: float | None = None,
            acl: Any = None) -> SharedClient:
    """The process's started client for ``url`` (started now if none is); one more user of it.

    :class:`~zkqueue.errors.BrokerConnectionError` (a ``ConnectionError``, in the transport's
    ``connection_errors``, so kombu retries and fails over) if no server answers within ``connect_timeout``;
    :class:`~zkqueue.errors.ConfigurationError` if the server refuses the credentials."""
    timeout = float(session_timeout or url.options.get("session_timeout") or DEFAULT_SESSION_TIMEOUT)  # type: ignore[arg-type]
    key = _key(url, timeout, acl)
    with _lock:
        shared = _clients.get(key)
        if shared is not None:  # after a lost session kazoo opens a new one by itself
            shared.users += 1
            return shared
        _probe(url, connect_timeout)
        client = _start(url, timeout, acl, connect_timeout)
        shared = SharedClient(key, client, users=1)
        client.add_listener(shared.on_state)
        _clients[key] = shared
        log.debug("started client for %s", url.as_uri())
        return shared


def _start(url: ZkUrl, session_timeout: float, acl: Any, connect_timeout: float) -> KazooClient:
    """A started client for ``url`` (see :func:`acquire` for the errors). kazoo's ``start()`` connects and then,
    with a chroot, asks whether the chroot exists: a connection lost in between (its server died just after the
    handshake, as in a leader election) fails that request with ``ConnectionLoss``. Such a start is tried again
    with a fresh client, pausing as :data:`START_BACKOFF`, until ``connect_timeout`` has passed."""
    deadline = time.monotonic() + connect_timeout
    tries = 0
    while True:
        client = new_client(url.connect_string, timeout=session_timeout, **client_kwargs(auth=url.auth, acl=acl))
        try:
            client.start(timeout=max(0.1, deadline - time.monotonic()))
            return client
        except KazooTimeoutError as exc:
            _close_quietly(client)
            raise BrokerConnectionError(
                f"no ZooKeeper server of {url.as_uri()} answered within {connect_timeout:g} s") from exc
        except AuthFailedError as exc:
            _close_quietly(client)
            raise ConfigurationError(f"ZooKeeper refused the credentials of {url.as_uri()}") from exc
        except CONNECTION_ERRORS as exc:
            _close_quietly(client)
            tries += 1
            pause = START_BACKOFF.delay(tries)
            if time.monotonic() + pause >= deadline:
                raise BrokerConnectionError(f"lost the connection to {url.as_uri()} as it started, {tries} time(s) "
                                            f"within {connect_timeout:g} s") from exc
            log.info("the connection to %s was lost as it started (%r); again in %.2f s", url.as_uri(), exc, pause)
            time.sleep(pause)
        except Exception:
            _close_quietly(client)
            raise


def _probe(url: ZkUrl, connect_timeout: float) -> None:
    """Fail at once when no host of ``url`` accepts a TCP connection (refused, unknown name): kazoo would retry
    until ``connect_timeout`` passed, and kombu's failover to an alternate URL shares that same time budget."""
    errors = []
    for host in url.hosts:
        name, _, port = host.rpartition(":")
        try:
            with socket.create_connection((name.strip("[]"), int(port)), timeout=min(connect_timeout, 2.0)):
                return
        except OSError as exc:
            errors.append(f"{host}: {exc}")
    raise BrokerConnectionError(f"no ZooKeeper server of {url.as_uri()} accepts connections ({'; '.join(errors)})")


def release(shared: SharedClient) -> None:
    """One user less; the last one closes the client's parts and stops the client."""
    with _lock:
        shared.users -= 1
        if shared.users > 0:
            return
        if _clients.get(shared.key) is shared:
            del _clients[shared.key]
    shared.stopping = True
    for name, part in list(shared.parts.items()):
        try:
            part.close()
        except Exception:
            log.warning("closing %s failed", name, exc_info=True)
    shared.parts.clear()
    _close_quietly(shared.client)


def _close_quietly(client: KazooClient) -> None:
    for step in (client.stop, client.close):
        try:
            step()
        except Exception:
            log.debug("stopping a client failed", exc_info=True)
