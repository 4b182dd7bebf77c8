"""Running one job until it succeeds: retries with the job layer's :class:`~zkqueue.jobs.retry.RetryPolicy`
backoff, ``on_stuck`` once the policy would give up, and retries after that at the policy's longest wait. A job
of an ordered consumer is never skipped: the processed index cannot pass it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from zkqueue.jobs.retry import RetryPolicy

log = logging.getLogger("zkqueue.progress.attempts")

#: Shortest wait between two runs of a failing job, whatever the policy says (no hot failure loop).
MIN_RETRY_DELAY = 0.01
#: Shortest wait between two runs of a job that is stuck (past the policy's attempts).
STUCK_RETRY_FLOOR = 0.5

#: Longest loop sleep of :meth:`JobRun.run_async` between two looks at ``keep_going()``.
_NAP_STEP = 0.05

StuckCallback = Callable[[int, BaseException, int], None]


def _cancelling() -> bool:
    """Whether the running task is being cancelled (not a CancelledError a worker raised of its own)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class JobRun:
    """One job's runs. ``run(call)`` returns True once ``call()`` succeeded, False when ``keep_going()`` turned
    False (the consumer stopped or lost its leadership; the job stays unfinished)."""

    def __init__(self, index: int, policy: RetryPolicy, on_stuck: list[StuckCallback],
                 keep_going: Callable[[], bool], wait: Callable[[float], Any], count: Callable[[str], None]) -> None:
        self.index = index
        self.policy = policy
        self.on_stuck = on_stuck
        self.keep_going = keep_going
        self.wait = wait
        self.count = count
        self.attempt = 0
        self.stuck = False
        self.finished_by_handoff = False

    def run(self, call: Callable[[int], Any]) -> bool:
        while self.keep_going():
            self.attempt += 1
            try:
                call(self.attempt)
                return True
            except BaseException as exc:  # SystemExit too: a job is never dropped (the policy may call it stuck)
                delay = self.failed(exc)
                if delay is None:
                    return True
                if not self.keep_going():
                    break
                self.count("retries")
                self.wait(delay)
        return False

    async def run_async(self, call: Callable[[int], Awaitable[Any]]) -> bool:
        """:meth:`run` for a coroutine worker on the running loop: ``await call(attempt)``, the waits between runs
        are loop sleeps (cut short once ``keep_going()`` turns False). A cancellation of the running task is not a
        failure: it is raised (the job stays unfinished)."""
        while self.keep_going():
            self.attempt += 1
            try:
                await call(self.attempt)
                return True
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError) and _cancelling():
                    raise
                delay = self.failed(exc)
                if delay is None:
                    return True
                if not self.keep_going():
                    break
                self.count("retries")
                await self._nap(delay)
        return False

    async def _nap(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while self.keep_going():
            left = end - loop.time()
            if left <= 0:
                return
            await asyncio.sleep(min(left, _NAP_STEP))

    def failed(self, exc: BaseException) -> float | None:
        """Count a failed run (``on_stuck`` once the policy would give up); the seconds to wait before the next
        one, or None if the job's hand-off had committed (it counts as finished)."""
        if self.finished_by_handoff:
            log.warning("job %d raised %r after its hand-off committed: it counts as finished", self.index, exc)
            return None
        self.count("failures")
        if not self.stuck and not self.policy.retries(exc, self.attempt):
            self.stuck = True
            self.count("stuck")
            log.error("job %d failed %d times (last: %r); it is retried until it succeeds",
                      self.index, self.attempt, exc)
            self._tell_stuck(exc)
        else:
            log.warning("job %d failed (attempt %d): %r", self.index, self.attempt, exc)
        delay = max(self.policy.delay(min(self.attempt, 60)), MIN_RETRY_DELAY)
        if self.stuck:
            delay = max(delay, STUCK_RETRY_FLOOR)
        return delay

    def _tell_stuck(self, exc: BaseException) -> None:
        for cb in list(self.on_stuck):
            try:
                cb(self.index, exc, self.attempt)
            except Exception:
                self.count("callback_errors")
                log.exception("on_stuck callback failed for job %d", self.index)
