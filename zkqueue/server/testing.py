"""Helpers for testing code that uses zkqueue against a real ZooKeeper.

The pytest fixtures live in :mod:`zkqueue.server.pytest_plugin` (enable them with
``pytest_plugins = ["zkqueue.server.pytest_plugin"]``); this module has no pytest dependency.

Where the server comes from is chosen by environment variables:

- ``ZKQUEUE_ZK_CONNECT=host:port,...``: an existing cluster (no fault controls);
- ``ZKQUEUE_ZK=docker``: a ZooKeeper 3.9 container through testcontainers (needs a Docker engine);
- otherwise an embedded :class:`~zkqueue.server.embedded.ZooKeeperEnsemble` from the pyspark jars.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError

from zkqueue._extras import require
from zkqueue.server.embedded import ZooKeeperEnsemble
from zkqueue.errors import EnvironmentProblem
from zkqueue.transport.handler import new_client

log = logging.getLogger("zkqueue.server.testing")

ENV_CONNECT = "ZKQUEUE_ZK_CONNECT"
ENV_TARGET = "ZKQUEUE_ZK"


class ZooKeeperTarget(Protocol):
    """What a test needs from a server: where to connect, and (for embedded ones) fault controls."""

    connect_string: str

    def close(self) -> None: ...


class ExternalZooKeeper:
    """A cluster someone else runs. It has no fault controls: tests that need them are skipped."""

    controllable = False

    def __init__(self, connect_string: str) -> None:
        self.connect_string = connect_string

    def close(self) -> None:
        """Nothing to stop: the cluster is not ours."""


class DockerZooKeeper:
    """One ZooKeeper 3.9 container started through testcontainers."""

    controllable = False
    image = "zookeeper:3.9"

    def __init__(self) -> None:
        DockerContainer = require("testcontainers.core.container", what="ZKQUEUE_ZK=docker").DockerContainer
        if not docker_available():
            raise EnvironmentProblem("ZKQUEUE_ZK=docker but no Docker engine is reachable")
        self._container = DockerContainer(self.image).with_exposed_ports(2181)
        self._container.start()
        host = self._container.get_container_host_ip()
        port = self._container.get_exposed_port(2181)
        self.connect_string = f"{host}:{port}"
        wait_for(lambda: _can_connect(self.connect_string), timeout=60, message="docker ZooKeeper did not serve")

    def close(self) -> None:
        self._container.stop()


def docker_available() -> bool:
    """True when a Docker engine answers (not merely when the docker CLI is installed)."""
    try:
        import docker  # noqa: PLC0415 - optional, comes with testcontainers

        docker.from_env(timeout=3).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no engine"
        return False


def _can_connect(connect_string: str) -> bool:
    client = KazooClient(connect_string, timeout=5)
    try:
        client.start(timeout=5)
        return True
    except Exception:  # noqa: BLE001
        return False
    finally:
        client.stop()
        client.close()


def server_from_environment(size: int = 1, **ensemble_kwargs: Any) -> Any:
    """Start (or point at) the ZooKeeper that tests should use, as the environment asks."""
    connect = os.environ.get(ENV_CONNECT)
    if connect:
        return ExternalZooKeeper(connect)
    if os.environ.get(ENV_TARGET, "").lower() == "docker":
        if size != 1:
            raise EnvironmentProblem("the docker target starts a single node; fault tests need the embedded one")
        return DockerZooKeeper()
    return ZooKeeperEnsemble(size=size, **ensemble_kwargs).start_all()


def thread_is_waiting(thread: threading.Thread) -> bool:
    """True while ``thread`` sleeps in a ``threading`` wait (it looked, found nothing, and waits to be woken)."""
    return thread_is_in(thread, "threading.py", "wait")


def thread_is_in(thread: threading.Thread, filename_suffix: str, function: str) -> bool:
    """True while ``function`` of a file whose path ends with ``filename_suffix`` is on ``thread``'s stack (e.g.
    ``"transport/requests.py", "get"``: blocked on a ZooKeeper reply).

    The collector is off while the frames are taken: on Python 3.11 a collection that starts inside
    ``sys._current_frames()`` can deadlock the process (CPython gh-106883)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        frame = sys._current_frames().get(thread.ident or -1)
    finally:
        if enabled:
            gc.enable()
    while frame is not None:
        if frame.f_code.co_name == function and frame.f_code.co_filename.endswith(filename_suffix):
            return True
        frame = frame.f_back
    return False


def wait_for(
    predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02,
    message: str | Callable[[], str] = "",
) -> Any:
    """Poll ``predicate`` until it returns something truthy and return that; AssertionError after ``timeout``
    (``message``, or what it returns when it is a function: the state at the time of the failure)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(text or f"condition not met within {timeout} s: {predicate!r}")
        time.sleep(interval)


def unique_chroot(prefix: str = "/t-") -> str:
    """A fresh path for one test's nodes."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def fresh_chroot(connect_string: str, prefix: str = "/t-") -> str:
    """Create a unique chroot on ``connect_string`` and return the hosts string that uses it."""
    chroot = unique_chroot(prefix)
    root = make_client(connect_string)
    try:
        root.ensure_path(chroot)
    finally:
        root.stop()
        root.close()
    return connect_string + chroot


def stored_under(client: KazooClient, *roots: str) -> tuple[int, int]:
    """(nodes, data bytes) stored under ``roots``, the root nodes included (those that exist)."""
    nodes = size = 0
    todo = [r for r in roots if client.exists(r)]
    while todo:
        path = todo.pop()
        try:
            data, _stat = client.get(path)
            children = client.get_children(path)
        except NoNodeError:
            continue  # deleted while we walked
        nodes += 1
        size += len(data or b"")
        todo.extend(f"{path.rstrip('/')}/{c}" for c in children)
    return nodes, size


def queue_frames(client: KazooClient, path: str) -> list[tuple[str, list[bytes]]]:
    """(node name, its Curator frame's payloads) of every node under ``path``, in name order."""
    from zkqueue.formats import framing  # noqa: PLC0415

    out = []
    for name in sorted(client.get_children(path)):
        data, _ = client.get(f"{path}/{name}")
        out.append((name, framing.decode_items(data)))
    return out


#: The reconnect pacing of test clients: 50 ms, then 1.5 times longer each time, at most 1 s apart, never giving up.
FAST_RECONNECT = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 1.0}


def make_client(hosts: str, **kwargs: Any) -> KazooClient:
    """A started KazooClient on zkqueue's :class:`~zkqueue.transport.handler.PollingHandler` (pass ``handler`` for
    another); ``start_timeout`` (default 30 s) bounds the connect. While no server answers it tries again every
    second at most (:data:`FAST_RECONNECT`; kazoo's default doubles its pause without bound, so a client came back
    seconds after a restarted node did)."""
    start_timeout = kwargs.pop("start_timeout", 30)
    kwargs.setdefault("timeout", 10.0)
    kwargs.setdefault("connection_retry", dict(FAST_RECONNECT))
    client = new_client(hosts, **kwargs)
    client.start(timeout=start_timeout)
    return client


def expire_session(client: KazooClient, timeout: float = 30.0) -> None:
    """Make the server expire ``client``'s session for real, and wait until the client has a new one.

    A second connection that presents the same session id and password and then closes ends the session on the
    server: the first client then sees EXPIRED_SESSION (state LOST) and connects again with a new session.
    """
    session_id, password = client.client_id
    lost = []
    client.add_listener(lambda state: lost.append(state) if state == KazooState.LOST else None)
    hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
    twin = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=client._session_timeout / 1000)
    twin.start(timeout=timeout)
    twin.stop()
    twin.close()
    wait_for(lambda: lost, timeout=timeout, message="the client never saw its session expire")
    wait_for(
        lambda: client.connected and client.client_id and client.client_id[0] != session_id,
        timeout=timeout,
        message="the client did not get a new session after expiry",
    )


def lock_nodes(client: KazooClient, lock_path: str) -> list[str]:
    """The lock and lease nodes in ``lock_path``, without the session fences live consumers keep there: what must
    be empty once every item is finished (the fences go when their queues close)."""
    from zkqueue.formats.naming import FENCE_PREFIX  # noqa: PLC0415 - keeps this module light

    try:
        return sorted(n for n in client.get_children(lock_path) if not n.startswith(FENCE_PREFIX))
    except Exception as exc:  # NoNodeError: no lock path, no locks
        if type(exc).__name__ == "NoNodeError":
            return []
        raise


class LogTrigger(logging.Handler):
    """A logging handler that calls ``action()`` for each record (INFO or above) whose message contains ``needle``:
    a test that must act exactly when the code under test reaches a point it logs (no timer standing in)."""

    def __init__(self, needle: str, action: Callable[[], None]) -> None:
        super().__init__(logging.INFO)
        self.needle = needle
        self.action = action

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            self.action()


@contextmanager
def on_log(logger: str, needle: str, action: Callable[[], None]) -> Iterator[None]:
    """Call ``action()`` whenever ``logger`` logs a line containing ``needle`` (INFO or above) inside the block."""
    target = logging.getLogger(logger)
    handler = LogTrigger(needle, action)
    level = target.level
    target.setLevel(logging.INFO)
    target.addHandler(handler)
    try:
        yield
    finally:
        target.removeHandler(handler)
        target.setLevel(level)
