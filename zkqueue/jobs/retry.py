"""When a failed job runs again: :class:`RetryPolicy` (attempts, exponential backoff with jitter, which errors
retry). The waits are tenacity's strategies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tenacity

from zkqueue.errors import ConfigurationError, NonRetryableError

ExcTypes = type[BaseException] | tuple[type[BaseException], ...]


@dataclass(frozen=True)
class _Attempt:
    """The one field of tenacity's RetryCallState its wait strategies read."""

    attempt_number: int


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` runs at most (a run that killed its worker counts); between them ``backoff *
    2**(attempt-1)`` seconds, at most ``max_backoff``; with ``jitter`` a random wait up to that ("full jitter").
    ``retry_on``: only these exception types are retried (default: every Exception); ``give_up_on``: these go to
    the dead letters at once. A :class:`~zkqueue.errors.NonRetryableError` (e.g. ``UnknownTaskError``) is never
    retried, whatever ``retry_on`` says."""

    max_attempts: int = 3
    backoff: float = 1.0
    max_backoff: float = 300.0
    jitter: bool = True
    retry_on: ExcTypes = Exception
    give_up_on: ExcTypes = ()

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be an int >= 1, got {self.max_attempts!r}")
        for name in ("backoff", "max_backoff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")

    def _wait(self) -> Any:
        if self.jitter:
            return tenacity.wait_random_exponential(multiplier=self.backoff, max=self.max_backoff)
        return tenacity.wait_exponential(multiplier=self.backoff, max=self.max_backoff)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1 for the first run)."""
        if self.backoff == 0:
            return 0.0
        return float(self._wait()(_Attempt(attempt)))  # type: ignore[arg-type]

    def retries(self, error: BaseException, attempt: int) -> bool:
        """Whether a job whose attempt number ``attempt`` failed with ``error`` runs again (never for a
        :class:`~zkqueue.errors.NonRetryableError`)."""
        if isinstance(error, NonRetryableError):
            return False
        if attempt >= self.max_attempts:
            return False
        if self.give_up_on and isinstance(error, self.give_up_on):
            return False
        if not isinstance(error, Exception):
            # A handler's exit that is not an Exception (KeyboardInterrupt, SystemExit, asyncio.CancelledError
            # raised by a sync handler) fails its attempt like an exception: retried where Exception is.
            retry_on = self.retry_on if isinstance(self.retry_on, tuple) else (self.retry_on,)
            return any(issubclass(Exception, t) for t in retry_on) or isinstance(error, self.retry_on)
        return isinstance(error, self.retry_on)
