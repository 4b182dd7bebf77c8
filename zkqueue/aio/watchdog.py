"""Reporting handlers that block the event loop: each step of a handler coroutine (the code between two awaits
that really suspend) is timed; a step longer than ``slow_after`` seconds is reported once per job id with a WARNING.

This is what asyncio's debug mode does for every callback (``loop.slow_callback_duration``), limited to job
handlers, without debug mode's cost, and with the job id in the message. A step is measured when it ends: a
handler that never returns to the loop (``while True: pass``) blocks the whole process and is reported only if
it ever does.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any, Coroutine, Generator

log = logging.getLogger("zkqueue.aio.watchdog")

#: Job ids remembered as reported (the oldest forgotten beyond this).
_REMEMBER = 10_000


class SlowSteps:
    """Reports, once per job id, a handler step longer than ``slow_after`` seconds (None: never)."""

    def __init__(self, slow_after: float | None, where: str) -> None:
        self.slow_after = slow_after
        self._where = where
        self._reported: OrderedDict[str, None] = OrderedDict()
        self.reports = 0

    def step(self, job_id: str, seconds: float) -> None:
        if self.slow_after is None or seconds < self.slow_after or job_id in self._reported:
            return
        self._reported[job_id] = None
        if len(self._reported) > _REMEMBER:
            self._reported.popitem(last=False)
        self.reports += 1
        log.warning("the handler of job %s of %s blocked the event loop for %.3f s without awaiting (every other "
                    "handler and request of this loop waited); run blocking code with asyncio.to_thread()",
                    job_id, self._where, seconds)

    def timed(self, coro: Coroutine[Any, Any, Any], job_id: str) -> "_Timed":
        """``coro`` as an awaitable whose steps are timed (see the module docs)."""
        return _Timed(coro, job_id, self)


class _Timed:
    """Drives a coroutine step by step for the awaiting task, timing each step."""

    __slots__ = ("_coro", "_job_id", "_steps")

    def __init__(self, coro: Coroutine[Any, Any, Any], job_id: str, steps: SlowSteps) -> None:
        self._coro = coro
        self._job_id = job_id
        self._steps = steps

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, steps, job_id = self._coro, self._steps, self._job_id
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                steps.step(job_id, time.perf_counter() - started)
                return stop.value
            except BaseException:
                steps.step(job_id, time.perf_counter() - started)
                raise
            finally:
                error = None
            steps.step(job_id, time.perf_counter() - started)
            try:
                value = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # thrown in by the task (cancellation): passed on to the handler
                value, error = None, exc
