"""One run of one job: what a driver runs, and the one place its outcome is decided.

An :class:`Attempt` is settled exactly once, by whoever comes first: the driver with the handler's result or error,
the runtime's timeout watchdog with :class:`~zkqueue.errors.JobTimeoutError`, or a cold stop that gives the job
back. A later settle (a hung thread that returns after its timeout, a killed child's last words) is refused and
logged, so a job's record never gets two outcomes for one attempt.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from zkqueue.jobs.model import Job
from zkqueue.jobs.scope import HeldJob

log = logging.getLogger("zkqueue.runtime.attempt")

#: How an attempt was settled.
RAN = "ran"  # the handler returned or raised
TIMED_OUT = "timed_out"  # past its timeout: failed by the watchdog
GIVEN_BACK = "given_back"  # a cold stop gave the job back (its attempt stays counted)


class Attempt:
    """A started job: ``job`` (what the handler gets), ``call`` (the handler), ``timeout`` (seconds, or None).
    ``source`` is the queue it came from and ``held`` its lease; ``on_settled(attempt)`` is called once, on the
    settling thread, after :attr:`how`, :attr:`result` and :attr:`error` are set. ``policy``: the retry policy of
    its task, if not the queue's. ``label``: what log lines call it (default: the job's id).

    A layer that runs work of its own on a driver, not a job queue's jobs (the ordered consumers of
    :mod:`zkqueue.progress`), gives ``source`` and ``held`` as None and its own unit of work as ``job``."""

    __slots__ = ("began", "call", "driver", "driver_state", "error", "held", "how", "job", "label", "on_begin",
                 "on_settled", "policy", "result", "running", "source", "started", "timeout", "_lock")

    def __init__(self, source: Any, held: HeldJob | None, job: Job | Any, call: Callable[[Any], Any],
                 timeout: float | None, on_settled: Callable[[Attempt], None], policy: Any = None,
                 driver: Any = None, *, on_begin: Callable[[Attempt], bool | None] | None = None,
                 label: str | None = None) -> None:
        self.label = label if label is not None else str(job.id)
        self.on_begin = on_begin
        self.source = source
        self.driver = driver  # where it runs (told to let it go when it is settled without its handler)
        self.held = held
        self.job = job
        self.call = call
        self.timeout = timeout
        self.policy = policy  # the task's RetryPolicy, or None for the queue's
        self.on_settled = on_settled
        self.started = time.monotonic()
        self.how: str | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.driver_state: Any = None  # the driver's own handle (a future, a slot)
        #: Set by :meth:`begin` once the handler is about to be called (``on_begin`` approved and nothing settled it):
        #: an attempt given back while this is False never ran, and its counted attempt is taken back.
        self.began = False
        #: What its handler shares with the worker (cancel requests, progress): a
        #: :class:`~zkqueue.jobs.running.RunningJob`, or None for work that takes neither.
        self.running: Any = None
        self._lock = threading.Lock()

    def begin(self) -> bool:
        """Called by the driver just before it calls the handler: the attempt's timeout runs from now (not from its
        start, which may wait for a process pool's child to come up). False when the handler must not be called:
        the attempt was settled before it began (a cold stop gave it back: it never ran)."""
        if self.settled:
            return False
        self.started = time.monotonic()
        if self.on_begin is not None and self.on_begin(self) is False:
            return False
        with self._lock:  # a settle (a cold stop giving it back) comes wholly before this or after the handler began
            if self.how is not None:
                return False
            self.began = True
        return True

    @property
    def settled(self) -> bool:
        return self.how is not None

    def settle(self, how: str, *, result: Any = None, error: BaseException | None = None) -> bool:
        """Decide this attempt's outcome; False (and a log line) if it was decided before."""
        with self._lock:
            if self.how is not None:
                if how == RAN:
                    log.warning("job %s: its %s result came after the attempt had %s; refused (%s)", self.label,
                                "failing" if error is not None else "successful",
                                "timed out" if self.how == TIMED_OUT else "been given back",
                                f"{type(error).__name__}: {error}" if error is not None else "result dropped")
                return False
            self.how, self.result, self.error = how, result, error
        self.on_settled(self)
        return True

    def __repr__(self) -> str:
        return f"Attempt(job={self.label!r}, how={self.how!r})"


__all__ = ["Attempt", "GIVEN_BACK", "RAN", "TIMED_OUT"]
