"""The testcontainers path: exercised only where a Docker engine is reachable."""

from __future__ import annotations

import pytest

from zkqueue.server.testing import DockerZooKeeper, docker_available, make_client

pytestmark = pytest.mark.docker


@pytest.mark.skipif(not docker_available(), reason="no reachable Docker engine on this machine")
def test_docker_zookeeper_serves_kazoo() -> None:
    pytest.importorskip("testcontainers", reason="install zkqueue[docker] for the testcontainers path")
    server = DockerZooKeeper()
    try:
        client = make_client(server.connect_string)
        client.create("/from-container", b"ok")
        assert client.get("/from-container")[0] == b"ok"
        client.stop()
        client.close()
    finally:
        server.close()
