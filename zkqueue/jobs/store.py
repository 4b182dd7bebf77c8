"""Where a job queue keeps things, and the ops that move a job between them.

``<path>/queue`` holds the queue items (engine nodes, named by :mod:`zkqueue.jobs.names`), ``<path>/locks`` the
engine's leases, ``<path>/records/<id>`` the record of every unfinished job (queued, active or waiting for a
retry: its existence is what makes ids distinct), and ``<path>/completed/<id>``, ``<path>/dead/<id>`` and
``<path>/cancelled/<id>`` the records of finished jobs. ``<path>/control`` says whether the queue is paused (its
version fences every start: :mod:`zkqueue.jobs.control`) and ``<path>/cancels/<id>`` asks the worker running job
``<id>`` to cancel it. Records are never children of the queue node, so 100k finished jobs do not slow the
queue down.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Callable

from zkqueue.engine import api
from zkqueue.engine.api import Completion, check_op, create_op, delete_op
from zkqueue.errors import ConfigurationError
from zkqueue.formats import framing, naming
from zkqueue.jobs import names
from zkqueue.jobs.model import JobState, Record, now_ms

#: The states of a finished job, in the order their paths are read (:meth:`Paths.ended`).
FINISHED = (JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED)

#: The data of a queue item: the job lives in its record, the item only holds its place in the queue.
ITEM_DATA = framing.encode_items([b""])


@dataclass(frozen=True)
class Paths:
    root: str

    @property
    def queue(self) -> str:
        return naming.join(self.root, "queue")

    @property
    def locks(self) -> str:
        return naming.join(self.root, "locks")

    @property
    def records(self) -> str:
        return naming.join(self.root, "records")

    @property
    def completed(self) -> str:
        return naming.join(self.root, "completed")

    @property
    def dead(self) -> str:
        return naming.join(self.root, "dead")

    @property
    def cancelled(self) -> str:
        return naming.join(self.root, "cancelled")

    @property
    def control(self) -> str:
        """The queue's control node: paused or not (see :mod:`zkqueue.jobs.control`)."""
        return naming.join(self.root, "control")

    @property
    def cancels(self) -> str:
        """Where cancel requests of running jobs wait for their workers (``cancels/<escaped id>``)."""
        return naming.join(self.root, "cancels")

    def all(self) -> tuple[str, ...]:
        return (self.queue, self.locks, self.records, self.completed, self.dead, self.cancelled, self.control,
                self.cancels)

    def record(self, job_id: str) -> str:
        return naming.join(self.records, names.node_id(job_id))

    def finished(self, job_id: str, state: JobState) -> str:
        parent = {JobState.COMPLETED: self.completed, JobState.CANCELLED: self.cancelled}.get(state, self.dead)
        return naming.join(parent, names.node_id(job_id))

    def ended(self, job_id: str) -> list[str]:
        """The paths where ``job_id``'s record is once it has finished: completed, dead and cancelled."""
        return [self.finished(job_id, state) for state in FINISHED]

    def cancel_request(self, job_id: str) -> str:
        return naming.join(self.cancels, names.node_id(job_id))

    def item_prefix(self, record: Record, kind: str) -> str:
        """The sequential prefix of ``record``'s queue item in the queue node (see :func:`item_name`)."""
        return naming.join(self.queue, item_name(record, kind))


def item_name(record: Record, kind: str) -> str:
    """The name prefix of ``record``'s queue item (see :func:`zkqueue.jobs.names.item_name_prefix`). A first run
    (``kind`` :data:`~zkqueue.jobs.names.NEW`) due at once (``record.due_ms`` 0) is named
    :data:`~zkqueue.jobs.names.IMMEDIATE` with the time it was queued (the record's ``updated_ms``): due at once on
    every host, ordered by that time among the due jobs of its priority. Else the ms field is the due time."""
    if kind == names.NEW and record.due_ms <= 0:
        return names.item_name_prefix(record.id, due_ms=record.updated_ms, priority=record.priority,
                                      kind=names.IMMEDIATE)
    return names.item_name_prefix(record.id, due_ms=record.due_ms, priority=record.priority, kind=kind)


def add_ops(paths: Paths, record: Record, stale: list[tuple[str, int]], acl: Any, at: str | None = None
            ) -> list[Any]:
    """Ops that add a job: its record (fails if the id is unfinished), the finished records of an earlier run
    deleted (version-checked), and its queue item (at the sequential prefix ``at``: a time bucket when the job is
    parked; by default the queue node)."""
    return [
        create_op(paths.record(record.id), record.encode(), acl=acl),
        *(delete_op(path, version) for path, version in stale),
        create_op(at or paths.item_prefix(record, names.NEW), ITEM_DATA, sequence=True, acl=acl),
    ]


def claim_ops(paths: Paths, record: Record, version: int) -> tuple[Record, list[Any]]:
    """The claim of a job: its record ACTIVE with one more attempt (version-checked)."""
    active = record.moved(JobState.ACTIVE, attempts=record.attempts + 1)
    return active, [api.SetDataOp(paths.record(record.id), active.encode(), version)]


def unclaim(paths: Paths, record: Record, version: int) -> Completion:
    """Give back a claimed job that never ran (a worker's prefetch at stop): the item stays where it is and the
    record is as before the claim, its attempt uncounted (version-checked, in the release's multi)."""
    attempts = max(0, record.attempts - 1)
    # QUEUED when no attempt is left counted (a new job, or one brought back from the dead letters with its errors
    # kept); else it is waiting to run again after earlier attempts.
    before = record.moved(JobState.RETRYING if attempts else JobState.QUEUED, attempts=attempts)
    return Completion.release(extra_ops=[api.SetDataOp(paths.record(record.id), before.encode(), version)])


def finish(paths: Paths, record: Record, version: int, state: JobState, acl: Any, *,
           cancel_request: bool = False, **changes: Any) -> Completion:
    """Ack the item; the record moves from ``records/`` to ``completed/``, ``dead/`` or ``cancelled/``, in the same
    multi (with the job's cancel request, when ``cancel_request``: the worker saw one)."""
    final = record.moved(state, **changes)
    return Completion.ack(extra_ops=[
        delete_op(paths.record(record.id), version),
        create_op(paths.finished(record.id, state), final.encode(), acl=acl),
        *([delete_op(paths.cancel_request(record.id))] if cancel_request else []),
    ])


def cancel_ops(paths: Paths, record: Record, version: int, item_path: str, acl: Any) -> list[Any]:
    """Ops that cancel a job that is not running (queued, parked or retrying): its item (at ``item_path``, in the
    queue node or a time bucket) and its record go, and the record is kept CANCELLED; the id is free again."""
    final = record.moved(JobState.CANCELLED)
    return [
        delete_op(item_path),
        delete_op(paths.record(record.id), version),
        create_op(paths.finished(record.id, JobState.CANCELLED), final.encode(), acl=acl),
    ]


def cancel_held_ops(paths: Paths, record: Record, version: int) -> list[Any]:
    """Ops that cancel a waiting job whose item a worker holds claimed ahead (its item cannot be deleted under the
    lease): its record says CANCELLED (version-checked), so the holder's start fails, and the next claim of the
    item ends it (:class:`~zkqueue.jobs.claims.JobClaims`)."""
    return [api.SetDataOp(paths.record(record.id), record.moved(JobState.CANCELLED).encode(), version)]


def cancel_request_ops(paths: Paths, record: Record, version: int, acl: Any) -> list[Any]:
    """Ops that ask the worker running a job (its record ACTIVE at ``version``) to cancel it."""
    return [check_op(paths.record(record.id), version),
            create_op(paths.cancel_request(record.id), str(record.attempts).encode(), acl=acl)]


def progress_ops(paths: Paths, record: Record, version: int) -> tuple[Record, list[Any]]:
    """The record of a running job with its latest progress (``record.progress``), version-checked."""
    updated = replace(record, updated_ms=now_ms())
    return updated, [api.SetDataOp(paths.record(record.id), updated.encode(), version)]


def retry(paths: Paths, record: Record, version: int, due_ms: int, errors: tuple[Any, ...],
          place: Callable[[str, int], str] | None = None) -> Completion:
    """Requeue the item due at ``due_ms``; the record RETRYING with the error, in the same multi. ``place`` maps
    the item's name prefix and due time to where it goes (a time bucket for a long backoff; default: the queue)."""
    waiting = record.moved(JobState.RETRYING, errors=errors, due_ms=due_ms)
    prefix = (place(item_name(waiting, names.RETRY), due_ms) if place is not None
              else paths.item_prefix(waiting, names.RETRY))
    return Completion.requeue(
        prefix=prefix, data=ITEM_DATA,
        extra_ops=[api.SetDataOp(paths.record(record.id), waiting.encode(), version)],
    )


def redrive_ops(paths: Paths, dead: Record, version: int, acl: Any) -> list[Any]:
    """Ops that bring a dead job back: a fresh run (attempts from 0, errors kept) queued now."""
    fresh = dead.moved(JobState.QUEUED, attempts=0, due_ms=0, result=None)
    return [
        delete_op(paths.finished(dead.id, JobState.DEAD), version),
        create_op(paths.record(dead.id), fresh.encode(), acl=acl),
        create_op(paths.item_prefix(fresh, names.NEW), ITEM_DATA, sequence=True, acl=acl),
    ]


def due_at(delay: float | None, run_at: datetime | None = None) -> int:
    """A due time ``delay`` seconds from now, or at ``run_at`` (a timezone-aware datetime); 0 (due at once on
    every host, ordered by its add time: see :func:`item_name`) for neither or a time already past."""
    if run_at is not None:
        if delay is not None:
            raise ConfigurationError("give delay or run_at, not both")
        if not isinstance(run_at, datetime):
            raise ConfigurationError(f"run_at must be a datetime, got {run_at!r}")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise ConfigurationError(f"run_at must be timezone-aware (e.g. datetime(..., tzinfo=timezone.utc)), "
                                     f"got {run_at!r}")
        due = int(run_at.timestamp() * 1000)
        return due if due > now_ms() else 0
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, (int, float))):
        raise ConfigurationError(f"delay must be a number of seconds, got {delay!r}")
    return 0 if not delay or delay <= 0 else now_ms() + int(delay * 1000)


__all__ = ["FINISHED", "ITEM_DATA", "Paths", "add_ops", "cancel_held_ops", "cancel_ops", "cancel_request_ops",
           "claim_ops", "due_at", "finish", "item_name", "progress_ops", "redrive_ops", "retry", "unclaim"]
