"""Quiet logs: a poison job logs one traceback and counts the rest; a failover is one WARNING and one INFO line."""

from __future__ import annotations

import logging

import pytest

from zkqueue.engine.log_limits import Failover, RepeatLimiter
from zkqueue.jobs import JobQueue, RetryPolicy
from zkqueue.server.testing import wait_for


def test_a_poison_job_logs_one_traceback_a_count_and_its_death(zk_client, caplog: pytest.LogCaptureFixture,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from zkqueue.jobs import outcomes

    attempts = 30
    limiter = RepeatLimiter(window=60.0, clock=lambda: 0.0)  # a frozen clock: every attempt is in one window
    monkeypatch.setattr(outcomes, "JOB_ERRORS", limiter)
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
    assert "again in" in with_traceback[0].getMessage() and "ValueError" in caplog.text
    deaths = [r for r in records if "dead letters" in r.getMessage()]
    assert len(deaths) == 1 and deaths[0].levelno == logging.WARNING and not deaths[0].exc_info
    assert "poison" in deaths[0].getMessage() and "/quiet/jobs" in deaths[0].getMessage()
    assert len(records) == 2
    assert limiter.total() == attempts - 2  # the retries after the first one; the death is not limited


def test_a_death_is_shown_even_right_after_a_retry_of_the_same_error(zk_client, caplog: pytest.LogCaptureFixture,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from zkqueue.jobs import outcomes

    monkeypatch.setattr(outcomes, "JOB_ERRORS", RepeatLimiter(window=60.0, clock=lambda: 0.0))
    caplog.set_level(logging.INFO, logger="zkqueue")
    with JobQueue(zk_client, "/quiet/deaths", retry=RetryPolicy(max_attempts=2, backoff=0.0, max_backoff=0.0,
                                                                jitter=False)) as jq:
        for i in range(3):
            jq.add({"x": i}, job_id=f"j{i}")

        def handle(job):
            raise ValueError("always")

        with jq.work(handle):
            wait_for(lambda: jq.counts()["dead"] == 3, timeout=60, message="the jobs never died")
    deaths = [r for r in caplog.records if r.name == "zkqueue.jobs.outcomes" and "dead letters" in r.getMessage()]
    assert sorted(r.getMessage().split()[1] for r in deaths) == ["j0", "j1", "j2"]
    assert all(r.levelno == logging.WARNING for r in deaths)


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


def test_a_session_expiry_is_a_warning_of_its_own_even_mid_episode(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("zkqueue.tests.expiry")
    caplog.set_level(logging.DEBUG, logger="zkqueue.tests.expiry")
    clock = iter([10.0, 13.5, 13.5, 20.0]).__next__
    failover = Failover(logger, "queue /x", clock=clock)
    failover.lost("connection SUSPENDED")  # t=10
    failover.expired()  # t=13.5: 3.5 s into the episode
    failover.reconnected()  # t=20
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert [level for level, _ in lines] == ["WARNING", "WARNING", "INFO"]
    assert "session LOST (expired after 3.5 s without a connection)" in lines[1][1]
    assert failover.episodes == 1 and not failover.active
