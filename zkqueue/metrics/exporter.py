"""Serving metrics over HTTP: in the user's process (:func:`serve`) or as the standalone depth exporter behind
``zkqueue metrics``."""

from __future__ import annotations

import logging
import threading
from typing import Any, Sequence

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

from zkqueue.metrics.collectors import DepthCollector

log = logging.getLogger("zkqueue.metrics.exporter")


def serve(port: int = 9464, addr: str = "0.0.0.0", registry: CollectorRegistry = REGISTRY) -> Any:
    """Serve ``registry`` (by default the process's, where :func:`~zkqueue.metrics.instrument` registers) at
    ``http://addr:port/metrics`` on a daemon thread; returns the server (``.shutdown()`` stops it)."""
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    log.info("serving metrics at http://%s:%d/metrics", addr, server.server_port)
    return server


def depth_registry(client: Any, paths: Sequence[str]) -> CollectorRegistry:
    """A registry holding only the depth gauges of ``paths`` (queues, job queues, flows)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DepthCollector(client, paths))
    return registry


def run_exporter(client: Any, paths: Sequence[str], port: int, addr: str = "0.0.0.0",
                 stop: threading.Event | None = None) -> None:
    """Serve the depths of ``paths`` until ``stop`` is set (for ever without one)."""
    server = serve(port, addr, depth_registry(client, paths))
    try:
        (stop or threading.Event()).wait()
    finally:
        server.shutdown()
