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

from zkqueue.errors import ConfigurationError, CorruptItemError, QueueStateError
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
    CANCELLED = "CANCELLED"  # cancelled by JobQueue.cancel: before it ran, or while it ran (a cancel request)

    @property
    def finished(self) -> bool:
        return self in (JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED)


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


#: The most bytes of a job's ``headers`` and of one progress value, as JSON.
MAX_HEADERS_BYTES = 4096
MAX_PROGRESS_BYTES = 4096


def _json_bytes(value: Any, what: str, limit: int) -> bytes:
    try:
        data = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{what} must be JSON (dicts, lists, str, numbers, bools, None): {exc}") from exc
    if len(data) > limit:
        raise ConfigurationError(f"{what} is {len(data)} bytes as JSON; at most {limit} are allowed")
    return data


def check_headers(headers: Any) -> dict[str, Any] | None:
    """A job's ``headers``: None, or a dict with str keys that is JSON of at most :data:`MAX_HEADERS_BYTES`
    (returned as a copy, so later changes of the caller's dict do not reach the job)."""
    if headers is None:
        return None
    if not isinstance(headers, dict) or not all(isinstance(k, str) for k in headers):
        raise ConfigurationError(f"headers must be a dict with str keys, got {headers!r}")
    return json.loads(_json_bytes(headers, "headers", MAX_HEADERS_BYTES))  # type: ignore[no-any-return]


def check_progress(value: Any) -> Any:
    """A progress value: JSON of at most :data:`MAX_PROGRESS_BYTES` (returned as its JSON round trip)."""
    return json.loads(_json_bytes(value, "a progress value", MAX_PROGRESS_BYTES))


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
    #: Metadata that travels with the job (``add(..., headers=)``: JSON, e.g. a W3C trace context); None: none.
    headers: dict[str, Any] | None = None
    #: The last progress value its handler reported (``job.report_progress``), None until then.
    progress: Any = None

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
        if self.headers is not None:
            head["headers"] = self.headers
        if self.progress is not None:
            head["progress"] = self.progress
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
                headers=dict(head["headers"]) if head.get("headers") is not None else None,
                progress=head.get("progress"),
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
    #: The metadata it was added with (``add(..., headers=)``; OpenTelemetry keeps its trace context here): a dict,
    #: empty when it has none.
    headers: dict[str, Any] = field(default_factory=dict)
    #: The last progress value its handler reported (:meth:`report_progress`), None until one was.
    progress: Any = None
    #: The run this job is part of, while a worker runs it (see :mod:`zkqueue.jobs.running`); None otherwise.
    _running: Any = field(default=None, repr=False, compare=False)

    @property
    def last_error(self) -> str | None:
        return self.errors[-1].error if self.errors else None

    @property
    def cancel_requested(self) -> bool:
        """True once :meth:`JobQueue.cancel <zkqueue.jobs.JobQueue.cancel>` asked for this running job to stop: a
        sync handler should return or raise soon (the attempt then ends CANCELLED, whatever it returns); an async
        handler is cancelled. Always False outside a worker's thread or async handler (e.g. in a process pool's
        child, which cannot see it)."""
        return self._running is not None and self._running.cancel_requested

    def report_progress(self, value: Any) -> None:
        """Record ``value`` (JSON, at most 4 KiB: a percentage, ``{"done": 10, "of": 80}``) as this job's progress,
        seen by ``get()``, ``JobHandle.progress``, the CLI and the dashboard. Call it as often as you like: it is
        written, fenced by the job's lease, at most a few times a second, and the last value always lands with
        the attempt's end. Only from a handler run by a worker on threads or an event loop (``jq.work``, ``zkqueue
        worker``, ``zkqueue.aio``); elsewhere :class:`~zkqueue.errors.QueueStateError`."""
        if self._running is None:
            raise QueueStateError(f"job {self.id}: report_progress() works in a handler run by a worker (threads "
                                  f"or an event loop), not here (a take scope, a process pool's child, a copy)")
        self._running.report(value)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_running"] = None  # a copy (a process pool's child) does not share the run
        return state
