"""A session's expiry on a real ZooKeeper: the connection watch logs it as a WARNING of its own."""

from __future__ import annotations

import logging
import threading

from zkqueue.engine.context import ConnectionWatch
from zkqueue.server.testing import expire_session, wait_for


def test_an_expired_session_logs_a_warning_line_of_its_own(zk_client_factory, caplog) -> None:
    client = zk_client_factory()
    states: list = []
    watch = ConnectionWatch(client, threading.Event(), states.append, name="queue /expiry")
    watch.start()
    caplog.set_level(logging.DEBUG, logger="zkqueue.engine.context")
    try:
        expire_session(client)
        wait_for(lambda: watch.connected.is_set() and any("RECONNECTED" in r.getMessage() for r in caplog.records),
                 timeout=30)
    finally:
        watch.stop()
    expired = [r for r in caplog.records if "session LOST (expired" in r.getMessage()]
    assert len(expired) == 1 and expired[0].levelno == logging.WARNING, [r.getMessage() for r in caplog.records]
