"""Fixtures of the Celery/kombu tests: a ``zkqueue://`` URL on the suite's real ZooKeeper (one chroot per test, or
per module for tests that share worker processes), kombu connections, and the test's own Celery app."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu
import pytest
from celery import Celery

import zkqueue.celery  # noqa: F401  (registers zkqueue://)
from tests.celery.celery_app import configure
from zkqueue.server.testing import fresh_chroot


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


@pytest.fixture(scope="module")
def module_url(zk_server: Any) -> str:
    """A fresh chroot for a whole module (its workers live as long as the module)."""
    return "zkqueue://" + fresh_chroot(zk_server.connect_string)


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def logs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


def client_app(url: str) -> Celery:
    """The test's own app on ``url``, current and default (the shared tasks resolve to it)."""
    app = configure(Celery("zkq_client", broker=url, backend=url, set_as_current=True))
    app.set_default()
    return app


@pytest.fixture(scope="module")
def module_app(module_url: str, runs_dir: Path, monkeypatch_module: Any) -> Iterator[Celery]:
    monkeypatch_module.setenv("ZKQ_CELERY_RUNS", str(runs_dir))
    app = client_app(module_url)
    yield app
    app.close()
    app.backend.close()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        yield mp
