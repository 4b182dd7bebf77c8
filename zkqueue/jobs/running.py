"""What a handler can do with the job it runs: see whether a cancel was requested, and report progress.

A worker gives each attempt a :class:`RunningJob` (``job.cancel_requested``, ``job.report_progress(value)``).
Progress is written to the job's record by the worker (its finisher thread), fenced by the job's lease and
version-checked, at most every :data:`PROGRESS_INTERVAL` seconds however often the handler reports: a value
reported meanwhile waits and the newest one is written when the interval has passed. The attempt's end folds the
last value into the record it commits, so the last value always lands.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from zkqueue.errors import QueueStateError
from zkqueue.jobs.model import check_progress

log = logging.getLogger("zkqueue.jobs.running")

#: Seconds between two progress writes of one job, at least.
PROGRESS_INTERVAL = 0.25

_UNSET = object()


class RunningJob:
    """The run of one attempt, as its handler and its worker share it.

    ``wake(self)`` tells the worker a progress value waits to be written (called with no lock of ours held), and
    the worker then calls :meth:`write`, which writes it by ``commit(value) -> bool`` (False: the lease or the
    record moved on); ``on_cancel()`` is called once when a cancel is requested (the worker cancels an async
    handler with it)."""

    def __init__(self, job_id: str, wake: Callable[[RunningJob], None], commit: Callable[[Any], bool],
                 on_cancel: Callable[[], None] | None = None) -> None:
        self.job_id = job_id
        self._wake = wake
        self._commit = commit
        self._on_cancel = on_cancel
        self._lock = threading.Lock()  # held across a progress write: the end waits for it
        self._state = threading.Lock()  # guards the fields below, never held across I/O
        self._cancel = threading.Event()
        self._pending: Any = _UNSET
        self._last: Any = _UNSET
        self._next_at = 0.0
        self._closed = False
        self._failed = False
        #: Progress writes committed.
        self.writes = 0

    # ------------------------------------------------------------------------------------------ cancel
    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def request_cancel(self) -> None:
        """A cancel of this job was requested: tell the handler (once)."""
        if self._cancel.is_set():
            return
        self._cancel.set()
        log.info("job %s: cancel requested", self.job_id)
        if self._on_cancel is not None:
            try:
                self._on_cancel()
            except Exception:  # the attempt still ends CANCELLED when its handler ends
                log.warning("cancelling job %s's handler failed", self.job_id, exc_info=True)

    # ------------------------------------------------------------------------------------------ progress
    def report(self, value: Any) -> None:
        """Keep ``value`` (JSON, at most 4 KiB) as the job's progress; written within :data:`PROGRESS_INTERVAL`."""
        value = check_progress(value)
        with self._state:
            if self._closed:
                raise QueueStateError(f"job {self.job_id}'s attempt has ended: its progress can no longer change")
            self._pending = value
            self._last = value
            wake = not self._failed
        if wake:
            self._wake(self)

    def due_in(self, now: float | None = None) -> float | None:
        """Seconds until a waiting value may be written (0: now), None when none waits."""
        with self._state:
            if self._pending is _UNSET or self._closed or self._failed:
                return None
            return max(0.0, self._next_at - (time.monotonic() if now is None else now))

    def write(self) -> None:
        """Write the waiting value (unless the attempt has ended meanwhile); after a refused write, no more."""
        with self._lock:
            with self._state:
                if self._pending is _UNSET or self._closed or self._failed:
                    return
                value, self._pending = self._pending, _UNSET
                self._next_at = time.monotonic() + PROGRESS_INTERVAL
            try:
                ok = self._commit(value)
            except Exception:  # noqa: BLE001 - the lease is lost or the connection: the end folds the value in
                log.warning("writing job %s's progress failed; its end records the last value", self.job_id,
                            exc_info=True)
                ok = True
            if not ok:
                with self._state:
                    self._failed = True
                log.info("job %s's progress cannot be written (its lease or record moved on)", self.job_id)
            else:
                self.writes += 1

    def close(self) -> Any:
        """The attempt has ended: no more writes (one under way is waited for). Returns the last value reported,
        or the marker :data:`UNSET`."""
        with self._lock:
            with self._state:
                self._closed = True
                return self._last


UNSET = _UNSET

__all__ = ["PROGRESS_INTERVAL", "RunningJob", "UNSET"]
