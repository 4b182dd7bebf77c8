"""The consumer's count of job runs handed to its runner that have not ended yet, across terms.

A term's window forgets its running jobs when the term ends (the session was lost, or a write was fenced), but
their worker calls go on until they return. :meth:`ProgressConsumer.stop` waits on this count, so that it
returns only once every worker it started has finished, whichever term started it; and a new term of the same
consumer (elected again in this process) starts no job while it is above zero, since it runs those jobs again:
one job never runs twice at once in one process."""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("zkqueue.progress.inflight")


class InFlight:
    """A count with a wait for zero: :meth:`add` when a task goes to the runner, :meth:`done` when it ended."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self._closed = False

    @property
    def count(self) -> int:
        with self._cond:
            return self._count

    def add(self) -> bool:
        """Count one more run; False (nothing counted) once :meth:`close` was called: that run must not start."""
        with self._cond:
            if self._closed:
                return False
            self._count += 1
            return True

    def close(self) -> None:
        """No run starts from now on (a stop under way): :meth:`add` refuses."""
        with self._cond:
            self._closed = True

    def done(self) -> None:
        with self._cond:
            self._count -= 1
            if self._count == 0:
                self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no run is left (None: however long it takes); whether none is left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._count > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True
