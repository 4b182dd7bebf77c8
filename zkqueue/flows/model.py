"""What a flow job is: its state, the one record that holds it in ZooKeeper, and what users and handlers see.
Pure, no I/O.

A flow record is one JSON node: the params, the run number (a finished id added again starts run n+1), every
step's status in this run, the steps' results, their errors, the shared ``data`` and the history (one entry per
finished step: when it was claimed and finished, its attempts, and the token of the hand-off that committed it; the
last :data:`MAX_HISTORY` entries are kept, older ones only counted) and the token of the add that started the run.
"""

from __future__ import annotations

import enum
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from zkqueue.errors import CorruptItemError, SerializationError

#: Errors kept per step (the latest ones).
MAX_ERRORS = 10
#: History entries kept per flow record (the latest ones; older ones are only counted in ``history_dropped``), so
#: a ``Next`` loop cannot grow the record past ZooKeeper's 1 MiB limit.
MAX_HISTORY = 200

# Step statuses in a flow record.
QUEUED = "queued"  # queued, running or waiting for a retry
DONE = "done"
FAILED = "failed"  # dead (out of attempts or a non-retryable error)
CANCELLED = "cancelled"  # dropped because the flow job failed or was cancelled


class FlowState(enum.Enum):
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"  # by Flow.cancel: nothing more of it starts

    @property
    def finished(self) -> bool:
        return self is not FlowState.RUNNING


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Next:
    """What a handler returns to choose the next step(s) at run time: ``Next("step", result)`` or
    ``Next(["a", "b"], result)`` (instead of the step's ``next``); ``Next(None, result)`` ends this branch."""

    step: str | list[str] | tuple[str, ...] | None
    result: Any = None

    @property
    def steps(self) -> tuple[str, ...]:
        if self.step is None:
            return ()
        return (self.step,) if isinstance(self.step, str) else tuple(self.step)


@dataclass(frozen=True)
class StepError:
    """One failed attempt of a step."""

    step: str
    attempt: int
    error: str
    at_ms: int


@dataclass(frozen=True)
class HistoryEntry:
    """One step's end in a flow job: ``status`` is done, failed or cancelled; ``started_ms`` when its last attempt
    was claimed."""

    step: str
    status: str
    attempts: int
    started_ms: int
    finished_ms: int
    token: str


@dataclass(frozen=True)
class FlowRecord:
    """A flow job's record, as stored."""

    id: str
    state: FlowState
    params: Any
    run: int = 1
    steps: dict[str, str] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    errors: tuple[StepError, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)
    history: tuple[HistoryEntry, ...] = ()
    created_ms: int = field(default_factory=now_ms)
    updated_ms: int = field(default_factory=now_ms)
    add_token: str = ""  # the token of the add that started this run (how a lost add reply is answered)
    history_dropped: int = 0  # history entries dropped (the oldest) to keep the record bounded

    def encode(self) -> bytes:
        doc = {
            "id": self.id, "state": self.state.value, "params": self.params, "run": self.run, "steps": self.steps,
            "results": self.results, "data": self.data,
            "errors": [[e.step, e.attempt, e.error, e.at_ms] for e in self.errors],
            "history": [[h.step, h.status, h.attempts, h.started_ms, h.finished_ms, h.token] for h in self.history],
            "created_ms": self.created_ms, "updated_ms": self.updated_ms, "add": self.add_token,
            "history_dropped": self.history_dropped,
        }
        try:
            return json.dumps(doc, separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"flow job {self.id!r}: params, results and data must be JSON: {exc}") from exc

    @classmethod
    def decode(cls, data: bytes) -> FlowRecord:
        try:
            doc = json.loads(data)
            return cls(
                id=str(doc["id"]), state=FlowState(doc["state"]), params=doc["params"], run=int(doc["run"]),
                steps={str(k): str(v) for k, v in doc["steps"].items()}, results=dict(doc["results"]),
                data=dict(doc.get("data", {})),
                errors=tuple(StepError(str(s), int(a), str(e), int(at)) for s, a, e, at in doc["errors"]),
                history=tuple(HistoryEntry(str(s), str(st), int(a), int(b), int(f), str(t))
                              for s, st, a, b, f, t in doc["history"]),
                created_ms=int(doc["created_ms"]), updated_ms=int(doc["updated_ms"]),
                add_token=str(doc.get("add", "")), history_dropped=int(doc.get("history_dropped", 0)),
            )
        except Exception as exc:
            raise CorruptItemError(f"not a flow record: {exc!r}") from exc

    def changed(self, **changes: Any) -> FlowRecord:
        return replace(self, updated_ms=now_ms(), **changes)

    def with_entry(self, entry: HistoryEntry) -> dict[str, Any]:
        """The ``history`` and ``history_dropped`` changes that append ``entry``, keeping the last
        :data:`MAX_HISTORY` entries."""
        history = self.history + (entry,)
        over = max(0, len(history) - MAX_HISTORY)
        return {"history": history[over:], "history_dropped": self.history_dropped + over}

    @property
    def pending(self) -> list[str]:
        return [s for s, status in self.steps.items() if status == QUEUED]

    def committed(self, token: str) -> bool:
        """Whether the hand-off with ``token`` is in the history (how a lost reply is answered)."""
        return any(h.token == token for h in reversed(self.history))


@dataclass
class FlowJob:
    """A flow job as users see it. ``pending``: its steps queued or running; ``results``: each finished step's
    result; ``errors``: failed attempts; ``history``: each step's end, in order; ``data``: the shared state."""

    id: str
    state: FlowState
    pending: list[str]
    results: dict[str, Any]
    errors: list[StepError]
    history: list[HistoryEntry]
    params: Any = None
    data: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, str] = field(default_factory=dict)
    run: int = 1  # 1 for the first run of this id, n+1 when a finished id was added again
    created_at: float = 0.0
    updated_at: float = 0.0
    history_dropped: int = 0  # the oldest history entries dropped (the record keeps the last MAX_HISTORY)

    @classmethod
    def of(cls, record: FlowRecord) -> FlowJob:
        return cls(id=record.id, state=record.state, pending=record.pending, results=dict(record.results),
                   errors=list(record.errors), history=list(record.history), params=record.params,
                   data=dict(record.data), steps=dict(record.steps), run=record.run,
                   created_at=record.created_ms / 1000.0,
                   updated_at=record.updated_ms / 1000.0, history_dropped=record.history_dropped)


@dataclass
class StepJob:
    """What a step's handler gets: the flow job's ``params``, the ``results`` of the steps finished so far (a join
    sees its branches'), the ``errors`` recorded, this ``step`` and its ``attempt`` (1 for the first run). ``data``
    is the flow job's shared state: changes made to it commit with the step's hand-off."""

    id: str
    step: str
    attempt: int
    params: Any
    results: dict[str, Any]
    errors: list[StepError]
    data: dict[str, Any]
