"""A helper of the kombu-level tests: consume what a queue has."""

from __future__ import annotations

import socket
import time
from typing import Any

import kombu


def take_all(conn: kombu.Connection, queue: kombu.Queue, count: int, timeout: float = 20, *,
             settle: float = 0.0) -> list[Any]:
    """Consume (and ack) from ``queue`` on ``conn`` until ``count`` messages came or ``timeout`` passed; then, with
    ``settle``, keep consuming that many seconds more (what a test that checks for extra copies needs)."""
    got: list[Any] = []
    with conn.Consumer([queue], callbacks=[lambda body, message: (got.append(body), message.ack())]):
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            try:
                conn.drain_events(timeout=1)
            except socket.timeout:
                pass
        if settle:
            try:
                conn.drain_events(timeout=settle)
            except socket.timeout:
                pass
    return got
