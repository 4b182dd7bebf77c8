"""Running one job until it succeeds: retries with the job layer's :class:`~zkqueue.jobs.retry.RetryPolicy`
backoff, ``on_stuck`` once the policy would give up, and retries after that at the policy's longest wait. A job
of an ordered consumer is never skipped: the processed index cannot pass it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from zkqueue.jobs.retry import RetryPolicy

log = logging.getLogger("zkqueue.progress.attempts")

#: Shortest wait between two runs of a failing job, whatever the policy says (no hot failure loop).
MIN_RETRY_DELAY = 0.01
#: Shortest wait between two runs of a job that is stuck (past the policy's attempts).
STUCK_RETRY_FLOOR = 0.5

StuckCallback = Callable[[int, BaseException, int], None]


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
                if self.finished_by_handoff:
                    log.warning("job %d raised %r after its hand-off committed: it counts as finished",
                                self.index, exc)
                    return True
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
                if not self.keep_going():
                    break
                self.count("retries")
                self.wait(delay)
        return False

    def _tell_stuck(self, exc: BaseException) -> None:
        for cb in list(self.on_stuck):
            try:
                cb(self.index, exc, self.attempt)
            except Exception:
                self.count("callback_errors")
                log.exception("on_stuck callback failed for job %d", self.index)
