"""An attempt settled before its handler began (a cold stop came while it was being handed to its driver) is never
run, on any driver: its begin says so, and the driver does not call the handler."""

from __future__ import annotations

import threading

from zkqueue.runtime.attempt import GIVEN_BACK, Attempt
from zkqueue.runtime.loop import AsyncioDriver
from zkqueue.runtime.threads import run


def _attempt(call, settled: list, *, refuse: bool = False) -> Attempt:
    def on_begin(attempt: Attempt) -> bool:
        if refuse:  # as the worker does once a cold stop came: give it back, do not run it
            attempt.settle(GIVEN_BACK)
            return False
        return True

    return Attempt(None, None, None, call, None, settled.append, label="job-1", on_begin=on_begin)


def test_an_attempt_given_back_before_it_began_is_not_run_by_the_thread_driver() -> None:
    ran: list[str] = []
    settled: list[Attempt] = []
    refused = _attempt(lambda job: ran.append("refused"), settled, refuse=True)
    run(refused)
    assert ran == [] and refused.how == GIVEN_BACK
    assert not refused.began  # given back before its handler was called: the worker takes its counted attempt back
    early = _attempt(lambda job: ran.append("early"), settled)
    early.settle(GIVEN_BACK)  # settled before its driver got to it
    run(early)
    assert ran == [] and early.begin() is False
    fine = _attempt(lambda job: ran.append("fine"), settled)
    run(fine)
    assert ran == ["fine"] and fine.how is not None and fine.began


def test_an_attempt_given_back_before_it_began_is_not_run_by_the_asyncio_driver() -> None:
    ran: list[str] = []
    settled: list[Attempt] = []
    done = threading.Event()

    async def handler(job):  # noqa: ANN001, ANN202
        ran.append("ran")

    driver = AsyncioDriver()
    driver.start(1)
    try:
        refused = _attempt(handler, settled, refuse=True)
        driver.submit(refused)
        fine = _attempt(handler, settled)
        fine.on_settled = lambda attempt: done.set()
        driver.submit(fine)
        assert done.wait(10)
        assert ran == ["ran"] and refused.how == GIVEN_BACK
    finally:
        driver.close(5)
