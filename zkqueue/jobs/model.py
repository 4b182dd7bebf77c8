"""What a job is: its state, its record as stored in ZooKeeper, and the :class:`Job` users see. Pure, no I/O.

A record is one node in Curator's multi-item framing with three parts: a JSON header (id, state, attempts, errors,
times, priority), the params as the serializer wrote them, and the result (empty until there is one).
"""

from __future__ import annotations

import enum
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from zkqueue.errors import ConfigurationError, CorruptItemError
from zkqueue.formats import framing

#: Errors kept in a record (the latest ones); each traceback is cut to this many characters.
MAX_ERRORS = 10
MAX_TRACEBACK = 2000


class JobState(enum.Enum):
    QUEUED = "QUEUED"  # waiting for a worker
    ACTIVE = "ACTIVE"  # claimed by a worker (an attempt is counted)
    RETRYING = "RETRYING"  # failed, waiting for its next attempt
    COMPLETED = "COMPLETED"
    DEAD = "DEAD"  # out of attempts, or a non-retryable error: in the dead letters

    @property
    def finished(self) -> bool:
        return self in (JobState.COMPLETED, JobState.DEAD)


def check_timeout(timeout: float | None) -> float | None:
    """A job's ``timeout``: None, or a number of seconds > 0 (as a float)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ConfigurationError(f"timeout must be a number of seconds > 0 or None, got {timeout!r}")
    return float(timeout)


def check_task(task: str | None) -> str | None:
    """A job's ``task``: None, or a task name (a non-empty str without surrounding whitespace or control
    characters)."""
    if task is None:
        return None
    if (not isinstance(task, str) or not task or task != task.strip()
            or any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in task)):
        raise ConfigurationError(f"a task name must be a non-empty str without surrounding whitespace or control "
                                 f"characters, got {task!r}")
    return task


def check_max_attempts(max_attempts: int | None) -> int | None:
    """A job's ``max_attempts``: None, or an int >= 1."""
    if max_attempts is None:
        return None
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ConfigurationError(f"max_attempts must be an int >= 1 or None, got {max_attempts!r}")
    return max_attempts


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class JobError:
    """One failed attempt."""

    attempt: int
    error: str
    traceback: str
    at_ms: int


@dataclass(frozen=True)
class Record:
    """A job's record, as stored (params and result as the serializer's bytes)."""

    id: str
    state: JobState
    params: bytes
    attempts: int = 0
    errors: tuple[JobError, ...] = ()
    result: bytes | None = None
    priority: int = 0
    created_ms: int = field(default_factory=now_ms)
    updated_ms: int = field(default_factory=now_ms)
    due_ms: int = 0
    #: Seconds an attempt may run (``add(..., timeout=)``); None: no limit. Enforced by the asyncio workers
    #: (:mod:`zkqueue.aio`); stored only when set, so records without it read as before.
    timeout: float | None = None
    #: The task the job runs (``zkqueue.App`` tasks: ``module.qualname``); None for jobs added without one.
    task: str | None = None
    #: The most attempts of this job (its task's :class:`~zkqueue.jobs.RetryPolicy`), instead of the queue's
    #: policy; None: the queue's. ``task`` and ``max_attempts`` are stored only when set, like ``timeout``.
    max_attempts: int | None = None

    def encode(self) -> bytes:
        head = {
            "id": self.id,
            "state": self.state.value,
            "attempts": self.attempts,
            "errors": [[e.attempt, e.error, e.traceback, e.at_ms] for e in self.errors],
            "priority": self.priority,
            "created_ms": self.created_ms,
            "updated_ms": self.updated_ms,
            "due_ms": self.due_ms,
            "has_result": self.result is not None,
        }
        if self.timeout is not None:
            head["timeout"] = self.timeout
        if self.task is not None:
            head["task"] = self.task
        if self.max_attempts is not None:
            head["max_attempts"] = self.max_attempts
        return framing.encode_items([json.dumps(head, separators=(",", ":")).encode(), self.params,
                                     self.result or b""])

    @classmethod
    def decode(cls, data: bytes) -> Record:
        try:
            head_bytes, params, result = framing.decode_items(data)
            head = json.loads(head_bytes)
            return cls(
                id=head["id"],
                state=JobState(head["state"]),
                params=params,
                attempts=int(head["attempts"]),
                errors=tuple(JobError(int(a), str(e), str(t), int(at)) for a, e, t, at in head["errors"]),
                result=result if head.get("has_result") else None,
                priority=int(head.get("priority", 0)),
                created_ms=int(head["created_ms"]),
                updated_ms=int(head["updated_ms"]),
                due_ms=int(head.get("due_ms", 0)),
                timeout=float(head["timeout"]) if head.get("timeout") is not None else None,
                task=str(head["task"]) if head.get("task") is not None else None,
                max_attempts=int(head["max_attempts"]) if head.get("max_attempts") is not None else None,
            )
        except CorruptItemError:
            raise
        except Exception as exc:
            raise CorruptItemError(f"not a job record: {exc!r}") from exc

    def moved(self, state: JobState, **changes: Any) -> Record:
        """This record in ``state`` (and other changes), stamped now."""
        return replace(self, state=state, updated_ms=now_ms(), **changes)

    def failed(self, error: str, traceback: str) -> tuple[JobError, ...]:
        """The errors with one more for this attempt, the oldest dropped beyond :data:`MAX_ERRORS`."""
        entry = JobError(self.attempts, error, traceback[-MAX_TRACEBACK:], now_ms())
        return (self.errors + (entry,))[-MAX_ERRORS:]


@dataclass
class Job:
    """A job as users see it: ``params`` and ``result`` as the serializer gives them back."""

    id: str
    params: Any
    state: JobState
    attempts: int
    errors: list[JobError]
    result: Any = None
    priority: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    #: Seconds one attempt may run (``add(..., timeout=)``), None if the job was added without one: the asyncio
    #: workers cancel a handler past it (or past their own ``timeout=`` when this is None).
    timeout: float | None = None
    #: The name of the task the job runs (:meth:`zkqueue.App.task`), None for a job added without one.
    task: str | None = None
    #: The most attempts of this job when its task has a retry policy of its own, else None (the queue's).
    max_attempts: int | None = None
    #: The path of the job queue that holds the job.
    queue_path: str | None = None

    @property
    def last_error(self) -> str | None:
        return self.errors[-1].error if self.errors else None
