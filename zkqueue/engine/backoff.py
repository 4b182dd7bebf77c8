"""One backoff for every background loop: the pause after errors in a row (tenacity's exponential wait underneath).

A loop keeps one :class:`Backoff`, calls :meth:`Backoff.failed` after an error (it returns how long to pause) and
:meth:`Backoff.succeeded` after a round that went well. The constants of a loop are named where it is built, once.
"""

from __future__ import annotations

import threading

from tenacity import RetryCallState, wait_exponential, wait_random, wait_random_exponential

#: The pause after the first error, and the most a pause grows to, by default (seconds).
INITIAL = 0.1
MAXIMUM = 5.0


class Backoff:
    """Pauses of ``initial`` seconds doubling per error in a row up to ``maximum``, plus up to ``jitter`` seconds
    drawn at random (so processes that failed together do not retry together); with ``full_jitter``, a pause drawn
    at random between 0 and that bound instead (for contenders that lost a race to each other: they spread out
    most). Thread-safe."""

    def __init__(self, initial: float = INITIAL, maximum: float = MAXIMUM, jitter: float = 0.0, *,
                 full_jitter: bool = False) -> None:
        if not 0 < initial <= maximum:
            raise ValueError(f"a backoff needs 0 < initial <= maximum, got {initial!r}, {maximum!r}")
        self.initial = initial
        self.maximum = maximum
        if full_jitter:
            self._wait = wait_random_exponential(multiplier=initial, max=maximum, exp_base=2)
        else:
            self._wait = wait_exponential(multiplier=initial, max=maximum, exp_base=2)
        if jitter > 0:
            self._wait = self._wait + wait_random(0, jitter)
        self._failures = 0
        self._lock = threading.Lock()

    @property
    def failures(self) -> int:
        """Errors in a row so far."""
        return self._failures

    def failed(self) -> float:
        """One more error in a row: the seconds to pause now."""
        with self._lock:
            self._failures += 1
            return self.delay(self._failures)

    def succeeded(self) -> None:
        """A round went well: the next error pauses ``initial`` seconds again."""
        with self._lock:
            self._failures = 0

    def delay(self, failures: int) -> float:
        """The pause after ``failures`` errors in a row (``initial * 2**(failures-1)``, at most ``maximum``)."""
        state = RetryCallState(None, None, (), {})
        state.attempt_number = max(1, failures)
        # tenacity's exponential wait is multiplier * 2**(attempt - 1) from the first attempt on
        return float(self._wait(state))

    def __repr__(self) -> str:
        return f"Backoff(initial={self.initial}, maximum={self.maximum}, failures={self._failures})"


__all__ = ["INITIAL", "MAXIMUM", "Backoff"]
