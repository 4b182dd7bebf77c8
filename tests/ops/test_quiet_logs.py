"""Quiet logs: a poison job logs one traceback and counts the rest; a failover is one WARNING and one INFO line."""

from __future__ import annotations

import logging

import pytest

from zkqueue.engine.log_limits import Failover, RepeatLimiter
from zkqueue.jobs import JobQueue, RetryPolicy
from zkqueue.jobs.outcomes import JOB_ERRORS
from zkqueue.server.testing import wait_for


def test_a_poison_job_logs_one_traceback_and_a_count(zk_client, caplog: pytest.LogCaptureFixture) -> None:
    attempts = 60
    before = JOB_ERRORS.total()
    caplog.set_level(logging.INFO, logger="zkqueue")
    with JobQueue(zk_client, "/quiet/jobs", retry=RetryPolicy(max_attempts=attempts, backoff=0.0,
                                                              max_backoff=0.0, jitter=False)) as jq:
        jq.add({"x": 1}, job_id="poison")

        def handle(job):
            raise ValueError(f"cannot handle {job.params}")

        with jq.work(handle):
            wait_for(lambda: jq.counts()["dead"] == 1, timeout=60, message="the poison job never died")
        assert jq.get("poison").attempts == attempts
    records = [r for r in caplog.records if r.name == "zkqueue.jobs.outcomes" and r.levelno >= logging.WARNING]
    with_traceback = [r for r in records if r.exc_info]
    assert len(with_traceback) == 1, [r.getMessage() for r in records]
    assert "ValueError" in caplog.text
    assert len(records) == 1
    assert JOB_ERRORS.total() - before == attempts - 1


def test_repeat_limiter_shows_again_after_the_window_with_the_count() -> None:
    now = [0.0]
    limiter = RepeatLimiter(window=10.0, clock=lambda: now[0])
    logger = logging.getLogger("zkqueue.tests.quiet")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    def boom() -> None:
        raise KeyError("k")  # one raise site: the same error each time

    def fail_once() -> None:
        try:
            boom()
        except KeyError as exc:
            limiter.error(logger, exc, "failed")

    try:
        for _ in range(5):
            fail_once()
        now[0] = 11.0
        fail_once()
    finally:
        logger.removeHandler(handler)
    shown = [r for r in records if r.levelno >= logging.ERROR]
    assert len(shown) == 2 and all(r.exc_info for r in shown)
    assert "4 more like it" in shown[1].getMessage()
    assert limiter.total() == 4


def test_failover_is_one_warning_and_one_reconnected_line(caplog: pytest.LogCaptureFixture) -> None:
    from kazoo.exceptions import ConnectionLoss

    logger = logging.getLogger("zkqueue.tests.failover")
    caplog.set_level(logging.DEBUG, logger="zkqueue.tests.failover")
    failover = Failover(logger, "queue /x")
    failover.lost("connection SUSPENDED")
    for _ in range(20):
        assert failover.error(ConnectionLoss(), "taking items")
    assert not failover.error(ValueError("not a connection error"), "taking items")
    failover.reconnected()
    assert failover.error(ConnectionLoss(), "completing")  # a late reply of the same episode
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert [r.levelname for r in lines] == ["WARNING", "INFO"]
    assert not any(r.exc_info for r in caplog.records)
    assert "RECONNECTED" in lines[1].getMessage() and "20 more" in lines[1].getMessage()
