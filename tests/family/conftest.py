"""Shared helpers for the queue-family tests (fixtures come from zkqueue.server.pytest_plugin)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from zkqueue.interop import CuratorPeer
from zkqueue.interop import curator_peer as _peer_module


@pytest.fixture
def peer(zk_hosts: str) -> Iterator[CuratorPeer]:
    """A Curator 5.9.0 peer bound to this test's chroot; no JVM may outlive the test."""
    yield CuratorPeer(zk_hosts)
    with _peer_module._LIVE_LOCK:
        left = [p for p in _peer_module._LIVE if p.poll() is None]
    _peer_module._kill_all_live()
    assert not left, f"Curator peer JVMs still running after the test: {[p.pid for p in left]}"
