"""How a task worker ends a canvas node's job: the runtime's :attr:`Route.end <zkqueue.runtime.Route>` for jobs
whose header names a canvas (:data:`~zkqueue.flows.canvas_graph.HEADER`).

A failed attempt follows the task's retry policy (the job layer's requeue, as for any task job); a success, or the
last failure, is the canvas hand-off (:meth:`CanvasHandoff.end <zkqueue.flows.canvas_handoff.CanvasHandoff>`): one
fenced multi with the canvas record's update and the next nodes' jobs. A task worker queues its successes' hand-offs
on an :class:`~zkqueue.flows.committer.EndCommitter` (:func:`commit_many`): the slot is free as the task returns,
and the ends of one canvas that finished meanwhile share one multi and one write of its record. A job whose canvas
is over is dropped unrun (:class:`CanvasCall` looks first on the thread pool) and ended by a hand-off that records
the drop.
"""

from __future__ import annotations

import json
import logging
import traceback as tb
from dataclasses import replace
from typing import Any, Callable

from zkqueue.errors import ConfigurationError, SerializationError, UnknownTaskError
from zkqueue.flows import handoff
from zkqueue.flows.canvas_graph import HEADER, canvas_of_job
from zkqueue.flows.canvas_handoff import CanvasHandoff, CanvasRef
from zkqueue.flows.committer import EndCommitter
from zkqueue.flows.definition import Ending
from zkqueue.flows.handoff import step_errors
from zkqueue.flows.model import FlowState
from zkqueue.jobs.model import Job
from zkqueue.jobs.queue import JobQueue
from zkqueue.jobs.scope import release_many

log = logging.getLogger("zkqueue.flows.canvas_ends")


class Skipped:
    """What :class:`CanvasCall` returns for a job whose canvas is over: the end drops it."""

    def __reduce__(self) -> str:
        return "SKIPPED"

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = Skipped()


def is_canvas_job(job: Job) -> bool:
    return bool(job.headers) and HEADER in job.headers


class CanvasCall:
    """A canvas job's call on a thread: run ``call(job)`` unless its canvas failed or was cancelled (then
    :data:`SKIPPED`; one ``exists`` of a marker node, see :meth:`CanvasHandoff.over_path`)."""

    def __init__(self, canvases: CanvasHandoff, call: Callable[[Job], Any]) -> None:
        self.canvases = canvases
        self.call = call

    def __call__(self, job: Job) -> Any:
        if self.canvases.is_over(canvas_of_job(job.id)):
            return SKIPPED
        return self.call(job)


def unknown_task(job: Job) -> Any:
    """The call of a canvas job whose task this worker's app does not know: the node is dead at once."""
    raise UnknownTaskError(job.task, None, job.id)


#: A canvas job's decided end waiting for its commit: the held job, its ref and how it ended.
QueuedEnd = tuple[Any, CanvasRef, Ending]


def end_attempt(canvases: CanvasHandoff, jq: JobQueue, queue: str, task_policy: Any, attempt: Any, *,
                committer: EndCommitter[QueuedEnd] | None = None) -> None:
    """End a settled attempt of a canvas job (see the module docs). Raises what made the end fail (the runtime
    gives the job back). With a ``committer``, a success's hand-off is queued there (:func:`commit_many` commits
    it with the others waiting, off the handler's thread) and the attempt's slot is free at once."""
    held = attempt.held
    record = held.record
    node = str(record.headers[HEADER][1])
    ref = CanvasRef(node, record, held.version, held.ack_ops, queue=queue)
    error = attempt.error
    value = attempt.result
    if error is None and isinstance(value, Skipped):
        _end(canvases, held, ref, None)
        return
    if error is None:
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            error = SerializationError(f"task {record.task} returned a result that is not JSON (a canvas keeps "
                                       f"results as JSON): {exc}")
    if error is not None:
        policy = jq.outcomes.policy(record, task_policy)
        if policy.retries(error, record.attempts) and not isinstance(error, (ConfigurationError,
                                                                              SerializationError)):
            held.finish(jq.outcomes.failure(held.claimed, error, task_policy))  # requeued after its backoff
            return
        trace = "".join(tb.format_exception(type(error), error, error.__traceback__))
        dead = replace(record, errors=record.failed(f"{type(error).__name__}: {error}", trace))
        log.warning("node %s (%s) of canvas %s is dead after attempt %d: %s: %s", node, record.task,
                    canvas_of_job(record.id), record.attempts, type(error).__name__, error)
        ref = CanvasRef(node, dead, held.version, held.ack_ops, queue=queue)
        if _end(canvases, held, ref, Ending(ok=False, errors=step_errors(node, dead))):
            read = canvases.read(record.id)
            if read is not None and read[0].state is FlowState.FAILED:
                canvases.sweep(read[0].id)  # its queued members are removed (or dropped when claimed)
        return
    ending = Ending(ok=True, result=value, errors=step_errors(node, record))
    if committer is not None:
        committer.put((held, ref, ending))
        return
    _end(canvases, held, ref, ending)


def commit_many(canvases: CanvasHandoff, batch: list[QueuedEnd]) -> None:
    """Commit the queued ends of ``batch`` (:class:`~zkqueue.flows.committer.EndCommitter`'s ``commit``): the ends
    of one canvas in as few multis as fit (:meth:`CanvasHandoff.end_many`). A job whose end did not commit is given
    back (its lease was lost, or the hand-off failed: it runs again); none is left without an outcome."""
    try:
        outcomes = canvases.end_many([(ref, ending, None) for _held, ref, ending in batch])
    except BaseException:
        release_many([held for held, _ref, _ending in batch])
        raise
    for (held, ref, _ending), outcome in zip(batch, outcomes):
        handoff.ended(held, outcome, _describe(ref))


def _describe(ref: CanvasRef) -> Callable[[], str]:
    return lambda: f"node {ref.step} of canvas {canvas_of_job(ref.job_id)}"


def _end(canvases: CanvasHandoff, held: Any, ref: CanvasRef, ending: Ending | None) -> bool:
    """The hand-off; whether it committed (else the job is given back). What keeps it from committing is raised
    (the runtime logs it; the job was given back here)."""
    try:
        outcome = canvases.end(ref, ending)
    except BaseException:
        held.release()
        raise
    return handoff.ended(held, outcome, _describe(ref))


__all__ = ["SKIPPED", "CanvasCall", "QueuedEnd", "commit_many", "end_attempt", "is_canvas_job", "unknown_task"]
