"""Fixtures of the Celery/kombu tests: a ``zkqueue://`` URL on the suite's real ZooKeeper, one chroot per test."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import kombu
import pytest

import zkqueue.celery  # noqa: F401  (registers zkqueue://)


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def broker_url(zk_server: Any, zk_chroot: str) -> str:
    """``zkqueue://<the suite's ZooKeeper>/<a fresh chroot>``."""
    return f"zkqueue://{zk_server.connect_string}{zk_chroot}"


@pytest.fixture
def connection(broker_url: str) -> Iterator[kombu.Connection]:
    conn = kombu.Connection(broker_url, connect_timeout=10)
    yield conn
    conn.release()


@pytest.fixture
def connection_factory(broker_url: str) -> Iterator[Any]:
    made: list[kombu.Connection] = []

    def make(**kwargs: Any) -> kombu.Connection:
        conn = kombu.Connection(broker_url, connect_timeout=10, **kwargs)
        made.append(conn)
        return conn

    yield make
    for conn in made:
        conn.release()
