"""pytest fixtures giving each test a clean chroot on a real ZooKeeper.

Enable with ``pytest_plugins = ["zkqueue.server.pytest_plugin"]`` in a ``conftest.py``.

Session scope: ``zk_server`` (one node), ``zk_ensemble`` (three nodes). Function scope: ``zk_private_server``
(a node of the test's own, for destructive tests), ``zk_chroot``, ``zk_hosts``, ``zk_client``,
``zk_client_factory``, and the same on the ensemble: ``ensemble_chroot``, ``ensemble_hosts``,
``ensemble_client_factory``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from zkqueue.server.embedded import ZooKeeperEnsemble, find_leftover_servers
from zkqueue.server.testing import fresh_chroot, make_client, server_from_environment

ClientFactory = Callable[..., KazooClient]


def _require_controls(server: Any) -> None:
    if not isinstance(server, ZooKeeperEnsemble):
        pytest.skip("needs an embedded ZooKeeper with fault controls (ZKQUEUE_ZK_CONNECT/docker point elsewhere)")


@pytest.fixture(scope="session")
def zk_server() -> Iterator[Any]:
    """One ZooKeeper node for the whole run (or the cluster ZKQUEUE_ZK_CONNECT names)."""
    server = server_from_environment(size=1)
    yield server
    server.close()


@pytest.fixture(scope="session")
def zk_ensemble() -> Iterator[ZooKeeperEnsemble]:
    """A 3-node ensemble for the whole run: tests that stop nodes must start them again."""
    if os.environ.get("ZKQUEUE_ZK_CONNECT") or os.environ.get("ZKQUEUE_ZK"):
        pytest.skip("the 3-node ensemble fixture is embedded only")
    ensemble = ZooKeeperEnsemble(size=3).start_all()
    yield ensemble
    ensemble.close()


@pytest.fixture
def zk_private_server() -> Iterator[ZooKeeperEnsemble]:
    """A single node of this test's own, free to be stopped, paused or killed."""
    if os.environ.get("ZKQUEUE_ZK_CONNECT") or os.environ.get("ZKQUEUE_ZK"):
        pytest.skip("destructive tests need an embedded ZooKeeper")
    server = ZooKeeperEnsemble(size=1).start_all()
    yield server
    server.close()


def _chroot(connect_string: str) -> Iterator[str]:
    yield fresh_chroot(connect_string)[len(connect_string):]


def _factory(hosts: str) -> Iterator[ClientFactory]:
    opened: list[KazooClient] = []

    def make(**kwargs: Any) -> KazooClient:
        client = make_client(hosts, **kwargs)
        opened.append(client)
        return client

    yield make
    for client in opened:
        with contextlib.suppress(Exception):
            client.stop()
        with contextlib.suppress(Exception):
            client.close()


@pytest.fixture
def zk_chroot(zk_server: Any) -> Iterator[str]:
    """A fresh, existing path (``/t-<hex>``) on ``zk_server`` used as this test's root."""
    yield from _chroot(zk_server.connect_string)


@pytest.fixture
def zk_hosts(zk_server: Any, zk_chroot: str) -> str:
    """Connect string of ``zk_server`` with this test's chroot appended (for subprocesses and Java peers)."""
    return zk_server.connect_string + zk_chroot


@pytest.fixture
def zk_client_factory(zk_hosts: str) -> Iterator[ClientFactory]:
    """``make(**kazoo_kwargs)`` -> a started KazooClient in this test's chroot; all are closed afterwards."""
    yield from _factory(zk_hosts)


@pytest.fixture
def zk_client(zk_client_factory: ClientFactory) -> KazooClient:
    """A started KazooClient in this test's chroot."""
    return zk_client_factory()


@pytest.fixture
def ensemble_chroot(zk_ensemble: ZooKeeperEnsemble) -> Iterator[str]:
    yield from _chroot(zk_ensemble.connect_string)


@pytest.fixture
def ensemble_hosts(zk_ensemble: ZooKeeperEnsemble, ensemble_chroot: str) -> str:
    return zk_ensemble.connect_string + ensemble_chroot


@pytest.fixture
def ensemble_client_factory(ensemble_hosts: str) -> Iterator[ClientFactory]:
    yield from _factory(ensemble_hosts)


@pytest.fixture
def require_controls() -> Callable[[Any], None]:
    """Call with a server to skip the test unless it is an embedded, controllable one."""
    return _require_controls


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Kill, and report, any ZooKeeper JVM this test run started and left behind."""
    leftovers = find_leftover_servers(owner=os.getpid())
    for pid in leftovers:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if leftovers and reporter is not None:
        reporter.write_line(f"zkqueue: killed {len(leftovers)} leaked ZooKeeper JVM(s): {leftovers}", red=True)
