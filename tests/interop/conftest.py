"""Interop tests against Apache Curator 5.9.0 through the Java Curator peer (zkqueue.interop).

ZooKeeper fixtures (``zk_hosts``, ``zk_client``) come from zkqueue.server.pytest_plugin via tests/conftest.py; the
``interop`` marker is registered in setup.cfg.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from zkqueue.interop import CuratorPeer
from zkqueue.interop import curator_peer as _peer_module


@pytest.fixture
def curator_peer(zk_hosts: str) -> CuratorPeer:
    """A Curator peer bound to the test's chroot (the same tree ``zk_client`` sees)."""
    return CuratorPeer(zk_hosts)


@pytest.fixture(autouse=True)
def _no_jvm_left_behind() -> Iterator[None]:
    """Every interop test must end with no Curator peer JVM running; kill stragglers and fail the test."""
    yield
    with _peer_module._LIVE_LOCK:
        left = [p for p in _peer_module._LIVE if p.poll() is None]
    _peer_module._kill_all_live()
    assert not left, f"Curator peer JVMs still running after the test: {[p.pid for p in left]}"
