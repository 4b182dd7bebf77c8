"""Quiet logs: a repeated error logs its traceback once per window and is counted after that, and a failover (a
ConnectionLoss or SUSPENDED while the ensemble elects a leader) is one WARNING line and one RECONNECTED INFO line.

Two small tools, used at the engine's and the job layer's logging call sites:

- :class:`RepeatLimiter`: ``limiter.error(log, exc, "msg %s", arg)`` logs the message with the traceback the first
  time an error of that kind (its type and where it was raised) is seen in ``window`` seconds; the repeats are
  counted (and logged at DEBUG without traceback). The next occurrence after the window logs the traceback again,
  saying how many repeats were not shown. :meth:`RepeatLimiter.repeats` gives the counts.
- :class:`Failover`: one connection episode of a client. The first connection error (or SUSPENDED/LOST) logs one
  WARNING line without traceback; later errors of the same episode are counted; RECONNECTED ends the episode with
  one INFO line. A session's expiry always logs a WARNING line of its own.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from typing import Any, Callable

from kazoo.exceptions import ConnectionClosedError

from zkqueue.transport.requests import CONNECTION_ERRORS as _COMMIT_RETRIED

log = logging.getLogger("zkqueue.engine.log_limits")

#: Errors a client sees while its server is gone or the ensemble elects a leader: expected, retried, no traceback.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (*_COMMIT_RETRIED, ConnectionClosedError)

DEFAULT_WINDOW = 60.0


def is_connection_error(exc: BaseException) -> bool:
    """True for the errors of a lost or moving connection (see :data:`CONNECTION_ERRORS`)."""
    return isinstance(exc, CONNECTION_ERRORS)


def error_key(exc: BaseException) -> tuple[str, str, int]:
    """What makes two errors "the same": the exception's type and the place it was raised (file and line of the
    innermost frame), not its message (which often carries an id or a value)."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    last = frames[-1] if frames else None
    return (type(exc).__qualname__, last.filename if last else "", last.lineno or 0 if last else 0)


class RepeatLimiter:
    """Logs each distinct error's traceback once per ``window`` seconds and counts the repeats. Thread-safe."""

    def __init__(self, window: float = DEFAULT_WINDOW, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = float(window)
        self._clock = clock
        self._lock = threading.Lock()
        self._first: dict[tuple[Any, ...], float] = {}  # key -> when its traceback was last logged
        self._hidden: dict[tuple[Any, ...], int] = {}  # key -> repeats not shown since then
        self._total: dict[tuple[Any, ...], int] = {}  # key -> repeats counted, ever

    def error(self, logger: logging.Logger, exc: BaseException, msg: str, *args: Any,
              level: int = logging.ERROR, scope: str = "") -> bool:
        """Log ``msg % args`` at ``level`` with ``exc``'s traceback, unless the same error (``scope`` narrows it,
        e.g. a queue path) was logged within the window: then count it and log one DEBUG line. True if shown."""
        key = (scope, *error_key(exc))
        now = self._clock()
        with self._lock:
            since = self._first.get(key)
            if since is not None and now - since < self.window:
                self._hidden[key] = self._hidden.get(key, 0) + 1
                self._total[key] = self._total.get(key, 0) + 1
                hidden = None
            else:
                hidden = self._hidden.pop(key, 0)
                self._first[key] = now
        if hidden is None:
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug(msg + " (repeat: %s: %s)", *args, type(exc).__name__, exc)
            return False
        if hidden:
            msg += " [%d more like it in the last %.0f s were counted, not logged]"
            args = (*args, hidden, self.window)
        logger.log(level, msg, *args, exc_info=(type(exc), exc, exc.__traceback__))
        return True

    def repeats(self) -> dict[str, int]:
        """Repeats counted (not logged with a traceback), ever, by ``"Type at file:line"`` (with its scope)."""
        with self._lock:
            return {_describe(k): n for k, n in self._total.items()}

    def total(self) -> int:
        """All repeats counted so far."""
        with self._lock:
            return sum(self._total.values())


def _describe(key: tuple[Any, ...]) -> str:
    scope, name, filename, line = key
    where = f"{name} at {filename.rsplit('/', 1)[-1]}:{line}"
    return f"{scope}: {where}" if scope else where


class Failover:
    """One client connection's episodes of loss: one WARNING line when it starts, one INFO line when it ends."""

    def __init__(self, logger: logging.Logger, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None
        self._ended: float | None = None
        self._errors = 0
        #: Seconds after RECONNECTED in which a connection error still belongs to the episode that ended.
        self.grace = 5.0
        #: Episodes seen so far (each logged one WARNING line).
        self.episodes = 0

    @property
    def active(self) -> bool:
        """True between the first sign of a lost connection and RECONNECTED."""
        return self._since is not None

    def lost(self, what: str) -> bool:
        """A sign of a lost connection (``what`` says which, in plain words). Logs the episode's one WARNING line
        if this is its first sign; later signs are counted (and logged at DEBUG). True if it logged."""
        with self._lock:
            first = self._open_episode() is None
            if not first:
                self._errors += 1
        if first:
            self._log.warning("%s: %s; waiting for ZooKeeper (the ensemble may be electing a leader), work resumes "
                              "on reconnect", self._name, what)
        else:
            self._log.debug("%s: %s (same connection episode)", self._name, what)
        return first

    def _open_episode(self) -> float | None:
        """Under the lock: start an episode unless one is open; the start of the one that was open (None: none)."""
        since = self._since
        if since is None:
            self._since = self._clock()
            self.episodes += 1
        return since

    def expired(self) -> None:
        """The session expired: every lease and ephemeral node of it is gone. Always one WARNING line, even in
        the middle of an episode whose first sign (SUSPENDED) was logged already: an expiry is not a failover
        ridden out, and what was held under the session runs again elsewhere."""
        with self._lock:
            since = self._open_episode()
        cut = f" after {self._clock() - since:.1f} s without a connection" if since is not None else ""
        self._log.warning("%s: session LOST (expired%s): what it held is given up, a new session follows",
                          self._name, cut)

    def error(self, exc: BaseException, doing: str) -> bool:
        """A connection error raised while ``doing`` something: see :meth:`lost`. False (nothing logged, nothing
        counted) if ``exc`` is not a connection error: the caller logs it as usual."""
        if not is_connection_error(exc):
            return False
        with self._lock:
            late = self._since is None and self._ended is not None and self._clock() - self._ended < self.grace
        if late:  # a reply of the episode just ended, failing after RECONNECTED: part of it, not a new one
            self._log.debug("%s: %s while %s, just after reconnecting (retried)", self._name, type(exc).__name__,
                            doing)
        else:
            self.lost(f"{type(exc).__name__} while {doing}")
        return True

    def reconnected(self) -> None:
        """The connection is back: the one RECONNECTED INFO line of the episode (nothing if none was open)."""
        with self._lock:
            since, errors = self._since, self._errors
            self._since, self._errors = None, 0
            if since is not None:
                self._ended = self._clock()
        if since is not None:
            self._log.info("%s: RECONNECTED to ZooKeeper after %.1f s (%d more connection error(s) in between, "
                           "retried)", self._name, self._clock() - since, errors)
