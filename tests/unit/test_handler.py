"""zkqueue.transport.handler.poll_select: select(2) semantics through one poll(2), on real socket pairs."""

from __future__ import annotations

import socket
import time

import pytest
from kazoo.handlers.threading import SequentialThreadingHandler

from zkqueue.transport.handler import PollingHandler, new_client, poll_select


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_nothing_ready_times_out_empty(pair) -> None:
    a, _ = pair
    started = time.monotonic()
    assert poll_select([a], [], [], 0.05) == ([], [], [])
    assert time.monotonic() - started >= 0.04


def test_readable_after_the_peer_sends_and_only_that_socket(pair) -> None:
    a, b = pair
    c, d = socket.socketpair()
    try:
        b.send(b"x")
        readable, writable, errors = poll_select([c, a], [], [], 1.0)
        assert readable == [a] and writable == [] and errors == []
    finally:
        c.close()
        d.close()


def test_writable_and_readable_are_reported_per_list(pair) -> None:
    a, b = pair
    b.send(b"x")
    readable, writable, _ = poll_select([a], [a, b], [], 1.0)
    assert readable == [a]
    assert writable == [a, b]


def test_a_closed_peer_reports_readable_so_recv_sees_the_end(pair) -> None:
    a, b = pair
    b.close()
    readable, _, _ = poll_select([a], [], [], 1.0)
    assert readable == [a]
    assert a.recv(1) == b""


def test_plain_descriptors_are_accepted(pair) -> None:
    a, b = pair
    b.send(b"x")
    assert poll_select([a.fileno()], [], [], 1.0)[0] == [a.fileno()]


def test_bad_arguments_raise_like_kazoo(pair) -> None:
    a, _ = pair
    with pytest.raises(ValueError):
        poll_select([a], [], [], -1)
    with pytest.raises(TypeError):
        poll_select([a], [], [], "1")
    with pytest.raises(ValueError):
        poll_select([-1], [], [], 0)


def test_handler_and_factory() -> None:
    handler = PollingHandler()
    assert isinstance(handler, SequentialThreadingHandler)
    client = new_client("127.0.0.1:1")
    assert isinstance(client.handler, PollingHandler)
    plain = SequentialThreadingHandler()
    assert new_client("127.0.0.1:1", handler=plain).handler is plain
