"""One kazoo client per Python worker process, shared by every Spark task that process runs.

PySpark reuses Python workers across tasks (``spark.python.worker.reuse``), but hands each task a freshly
unpickled writer or function, so only module-level state survives from one task to the next. Connecting costs a
round trip and a new ZooKeeper session, so tasks share one started client per (pid, connect string, session
timeout, auth) here.

The pid is part of the key: a client started before a ``fork`` must never be used in the child (its threads do
not survive the fork). Workers end with ``os._exit``, so clients are never closed cleanly: their sessions (and
every ephemeral lock node they own) expire ``session_timeout`` seconds after the process dies. That is the
crash-redelivery mechanism of :func:`zkqueue.spark.consume`, so executor clients should use a short timeout.

Nothing here is pickled: writers and task functions carry only the connection settings (:class:`ZkSettings`).

A starved worker (a busy executor, a long GC pause) can miss a heartbeat: kazoo drops the connection, every
request in flight fails with ``ConnectionLoss``, and kazoo reconnects on the *same* session. Nothing was lost
(ephemeral locks included), so :func:`call_with_reconnect` waits for that and sends the request again. If the
session did end (no reconnection within the session timeout, or a new session), it raises
:class:`SessionLostError` instead: the task fails and Spark's retry starts afresh.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from zkqueue.engine.api import new_client
from zkqueue.errors import ConfigurationError, SessionLostError  # SessionLostError: importable here as before

log = logging.getLogger("zkqueue.spark.clients")

#: Default session timeout of executor clients, in seconds (kazoo's default is 10).
DEFAULT_SESSION_TIMEOUT = 10.0
ACL_MODES = ("open", "creator")
#: Failures of a whole request after which it may be sent again once the session is back (outcome unknown).
TRANSIENT_ERRORS = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)
_ATTEMPTS = 6
T = TypeVar("T")


@dataclass(frozen=True)
class ZkSettings:
    """Picklable connection settings: what a task needs to get (or make) its process's client.

    ``hosts`` is a kazoo connect string, optionally with a chroot (``h1:2181,h2:2181/app``); ``chroot`` is
    appended when given separately. ``auth`` is a list of ``(scheme, credential)`` pairs (e.g.
    ``("digest", "user:secret")``) added to the session; ``acl="creator"`` creates nodes readable and
    writable by the authenticated identity only (ZooKeeper's CREATOR_ALL_ACL), ``"open"`` (default) by anyone.
    """

    hosts: str
    session_timeout: float = DEFAULT_SESSION_TIMEOUT
    connect_timeout: float = 30.0
    auth: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    acl: str = "open"
    chroot: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.hosts, str) or not self.hosts.strip():
            raise ConfigurationError("zkHosts (the ZooKeeper connect string) is required")
        if not self.session_timeout > 0:
            raise ConfigurationError(f"session timeout must be > 0 seconds, got {self.session_timeout!r}")
        if not self.connect_timeout > 0:
            raise ConfigurationError(f"connect timeout must be > 0 seconds, got {self.connect_timeout!r}")
        if self.acl not in ACL_MODES:
            raise ConfigurationError(f"acl must be one of {ACL_MODES}, got {self.acl!r}")
        if self.acl == "creator" and not self.auth:
            raise ConfigurationError("acl='creator' needs auth (e.g. auth='digest:user:secret')")
        if self.chroot is not None:
            if not self.chroot.startswith("/") or self.chroot.endswith("/") or "/" in self.hosts:
                raise ConfigurationError(
                    f"chroot {self.chroot!r} must be an absolute path without a trailing '/', and the connect "
                    "string must not carry a chroot of its own"
                )

    @property
    def connect_string(self) -> str:
        return self.hosts + (self.chroot or "")

    def default_acl(self) -> list:
        return list(CREATOR_ALL_ACL if self.acl == "creator" else OPEN_ACL_UNSAFE)


def parse_auth(text: str | None) -> tuple[tuple[str, str], ...]:
    """``"digest:user:secret"`` (several separated by ``,``) -> ``(("digest", "user:secret"),)``."""
    if text is None or not text.strip():
        return ()
    pairs = []
    for part in text.split(","):
        scheme, sep, credential = part.strip().partition(":")
        if not sep or not scheme or not credential:
            raise ConfigurationError("auth must look like 'scheme:credential' (e.g. 'digest:user:secret')")
        pairs.append((scheme, credential))
    return tuple(pairs)


_lock = threading.Lock()
_clients: dict[tuple, KazooClient] = {}


def _key(settings: ZkSettings) -> tuple:
    return (os.getpid(), settings.connect_string, settings.session_timeout, settings.auth, settings.acl)


def get_client(settings: ZkSettings) -> KazooClient:
    """The started client of this process for ``settings``; connects on first use (or after it was lost)."""
    key = _key(settings)
    with _lock:
        client = _clients.get(key)
        if client is not None and not _is_stopped(client):
            # SUSPENDED/LOST are transient: kazoo reconnects (with a new session after LOST) by itself.
            return client
        if client is not None:
            log.info("kazoo client for %s was stopped; replacing it", settings.connect_string)
        # Clients inherited through fork (other pids) are unusable here: forget them without touching them.
        for stale in [k for k in _clients if k[0] != key[0]]:
            del _clients[stale]
        client = new_client(
            settings.connect_string,
            timeout=settings.session_timeout,
            auth_data=list(settings.auth) or None,
            default_acl=settings.default_acl(),
        )
        client.start(timeout=settings.connect_timeout)
        _clients[key] = client
        log.debug("pid %d connected to %s (session timeout %.1fs)", key[0], settings.connect_string,
                  settings.session_timeout)
        return client


def _is_stopped(client: KazooClient) -> bool:
    stopped = getattr(client, "_stopped", None)
    return bool(stopped is not None and stopped.is_set())


def _discard(client: KazooClient) -> None:
    try:
        client.stop()
        client.close()
    except Exception:  # noqa: BLE001 - best effort on a broken client
        log.debug("closing a stale kazoo client failed", exc_info=True)


def close_all() -> int:
    """Close this process's cached clients (their sessions end at once); return how many. For drivers and tests."""
    with _lock:
        mine = [k for k in _clients if k[0] == os.getpid()]
        clients = [_clients.pop(k) for k in mine]
    for client in clients:
        _discard(client)
    return len(clients)


def session_id(client: KazooClient) -> int | None:
    """The session ``client`` holds or is reconnecting to; None before the first connect and after expiry."""
    return getattr(client, "_session_id", None)  # kazoo keeps it while SUSPENDED and resets it on expiry


def await_session(client: KazooClient, session: int | None, what: str, error: BaseException) -> None:
    """After ``error`` (one of TRANSIENT_ERRORS) on ``what``: return once ``client`` is connected again on
    ``session``; raise SessionLostError when it is not within its session timeout, or comes back on another one."""
    timeout = getattr(client, "_session_timeout", DEFAULT_SESSION_TIMEOUT * 1000) / 1000.0
    deadline = time.monotonic() + timeout
    while not client.connected:  # kazoo has no public "connected" event; its state flips on its own thread
        if time.monotonic() >= deadline or _is_stopped(client):
            raise SessionLostError(
                f"{what}: {error!r}, and no reconnection to ZooKeeper within the {timeout:g}s session timeout"
            ) from error
        time.sleep(0.05)
    if session is not None and session_id(client) != session:
        raise SessionLostError(f"{what}: {error!r}; the ZooKeeper session {session:#x} expired") from error


def call_with_reconnect(client: KazooClient, call: Callable[[], T], what: str, *, session: int | None = None) -> T:
    """``call()``; after a transient connection error, once the client is back on the same session (``session``,
    default: the current one), call it again (at most 6 calls). Only for calls that are safe to repeat."""
    if session is None:
        session = session_id(client)

    def reconnect(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning("%s: %r; retrying once reconnected on the same session", what, error)
        await_session(client, session, what, error or ConnectionLoss())

    retrying: Retrying = Retrying(
        retry=retry_if_exception_type(TRANSIENT_ERRORS),
        stop=stop_after_attempt(_ATTEMPTS),
        before_sleep=reconnect,  # waits for the session (or raises SessionLostError) before the next call
        reraise=True,
    )
    return retrying(call)
