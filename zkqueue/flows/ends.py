"""Ending one claimed step job: the seam that thread workers (:class:`~zkqueue.flows.worker.FlowWorker`) and
coroutine workers (:class:`zkqueue.aio.AsyncFlow`) share, so a step ends the same way whoever ran its handler.

A worker runs a started step job (a :class:`~zkqueue.jobs.scope.HeldJob`) in two parts. Its step call (on a
handler thread, or as a task of an event loop) calls :func:`look` (reads the flow record and builds the handler's
:class:`~zkqueue.flows.model.StepJob`) and runs the handler however it likes. Then its end joins what was read to
the held job (:meth:`StepRun.of`) and calls :func:`settle` once with the handler's value; :func:`settle` checks the
value (``Next``, JSON), and commits the end: the hand-off in one fenced multi (:mod:`zkqueue.flows.handoff`), a
retry with the step's policy (the job layer's requeue with a due time), or a dead step handed off as a failure. An
attempt that failed (timed out, or its handler or the read before it raised) ends with :func:`fail`. These calls
block on ZooKeeper; none calls the handler.
"""

from __future__ import annotations

import copy
import json
import logging
import traceback as tb
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol

from zkqueue.errors import ConfigurationError, SerializationError
from zkqueue.flows import handoff
from zkqueue.flows.definition import Definition, Ending, Step
from zkqueue.flows.handoff import Handoff, StepRef, step_errors
from zkqueue.flows.model import FlowState, Next, StepJob
from zkqueue.jobs import JobQueue, RetryPolicy
from zkqueue.jobs import store as job_store
from zkqueue.jobs.model import now_ms
from zkqueue.jobs.scope import HeldJob, finish_many, release_many

log = logging.getLogger("zkqueue.flows.ends")

# What settle() did with a step job.
COMPLETED = "completed"  # handed off with its result (the next steps queued in the same multi)
RETRIED = "retried"  # the attempt failed; the job runs again after the step's backoff
DEAD = "dead"  # the attempt failed for the last time; handed off as a failure
DROPPED = "dropped"  # its flow job failed meanwhile, is gone, or is of another run: ended without running
RELEASED = "released"  # nothing committed (the lease was lost, or the hand-off could not commit): given back


class EndedFlow(Protocol):
    """What ending a step job uses of its :class:`~zkqueue.flows.flow.Flow`."""

    definition: Definition
    handoff: Handoff

    def queue(self, name: str) -> JobQueue: ...

    def retry_of(self, step: Step) -> RetryPolicy: ...


@dataclass(frozen=True)
class StepView:
    """What :func:`look` read for a step job: the flow record and its version (``read``), the handler's ``job``
    (None when the step job is to be dropped without running) and the shared data as it was (``before``)."""

    read: Any
    job: StepJob | None
    before: dict[str, Any]


@dataclass
class StepRun:
    """One started step job and what :func:`look` read for it, to :func:`settle`. ``job`` is what the handler gets;
    None when the step job is to be dropped without running (call :func:`settle` all the same)."""

    step: Step
    held: HeldJob
    ref: StepRef
    read: Any
    job: StepJob | None
    before: dict[str, Any]

    @classmethod
    def of(cls, step: Step, held: HeldJob, view: StepView) -> StepRun:
        """The run of ``held`` whose flow record :func:`look` read as ``view``."""
        return cls(step, held, StepRef(step.name, held.record, held.version, held.ack_ops, held), view.read, view.job,
                   view.before)


def look(flow: EndedFlow, step: Step, job_id: str, run: int, attempt: int, read: Any = handoff.UNREAD) -> StepView:
    """Read the flow record of ``job_id`` (blocks; unless ``read`` is what a read as the step job started gave) and
    build the job ``step``'s handler gets for its attempt number ``attempt`` of the flow job's run ``run``; the
    view's job is None when that run is over (failed, or gone, or another run is going on)."""
    if read is handoff.UNREAD:
        read = flow.handoff.read(job_id)
    rec = read[0] if read is not None else None
    if rec is None or rec.run != run or rec.state is not FlowState.RUNNING:
        return StepView(read, None, {})
    job = StepJob(rec.id, step.name, attempt, rec.params, dict(rec.results), list(rec.errors),
                  copy.deepcopy(rec.data))
    return StepView(read, job, copy.deepcopy(rec.data))


def settle(flow: EndedFlow, run: StepRun, value: Any = None, error: BaseException | None = None) -> str:
    """Commit the end of ``run`` (blocks): the handler returned ``value``, or raised ``error``. Returns
    :data:`COMPLETED`, :data:`RETRIED`, :data:`DEAD`, :data:`DROPPED` or :data:`RELEASED`. Exactly one end is
    committed (or the job is given back); an exit exception (BaseException) gives the job back and is raised."""
    if run.job is None:
        return DROPPED if _end(flow, run.held, run.ref, None, run.read) else RELEASED
    if error is None:
        try:
            ending = _success(flow, run, value)
        except Exception as exc:
            error = exc
    if error is not None:
        return _failed(flow, run, error)
    return COMPLETED if _end(flow, run.held, run.ref, ending, run.read) else RELEASED


def _success(flow: EndedFlow, run: StepRun, value: Any) -> Ending:
    """The ending of a run whose handler returned ``value`` (a result, or :class:`Next` with the steps it chose):
    raises ConfigurationError for an unknown chosen step, SerializationError for a result or data that is not
    JSON (the attempt then fails)."""
    chosen = None
    if isinstance(value, Next):
        chosen = value.steps
        for name in chosen:
            flow.definition.step(name)  # raises ConfigurationError for an unknown step
        value = value.result
    changed = {k: v for k, v in run.job.data.items() if run.before.get(k, _MISSING) != v}  # type: ignore[union-attr]
    try:
        json.dumps([value, changed])
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"step {run.step.name} returned a result (or data) that is not JSON: "
                                 f"{exc}") from exc
    return Ending(ok=True, result=value, chosen=chosen, errors=step_errors(run.step.name, run.held.record),
                  data=changed)


def settle_many(flow: EndedFlow, runs: list[tuple[StepRun, Any, BaseException | None]]) -> list[str]:
    """:func:`settle` of many step jobs at once (``(run, value, error)`` each; ``error`` set: the attempt failed,
    its flow record possibly unread, see :func:`fail`): the hand-offs commit many per multi
    (:meth:`Handoff.end_many <zkqueue.flows.handoff.Handoff.end_many>`), the retries in one engine call. Returns
    each one's outcome, in order; an exit exception gives back the jobs not ended yet and is raised."""
    out: list[str | None] = [None] * len(runs)
    todo: list[tuple[int, HeldJob, StepRef, Ending | None, Any, str]] = []
    retries: list[tuple[int, HeldJob, Any]] = []
    for i, (run, value, error) in enumerate(runs):
        decided = _decide(flow, run, value, error)
        if isinstance(decided, str):
            out[i] = decided
        elif decided[0] == RETRIED:
            retries.append((i, run.held, decided[1]))
        else:
            _kind, ref, ending, read, done = decided
            todo.append((i, run.held, ref, ending, read, done))
    try:
        if retries:
            finish_many([(held, completion) for _i, held, completion in retries])
            for i, _held, _completion in retries:
                out[i] = RETRIED
        if todo:
            outcomes = flow.handoff.end_many([(ref, ending, read) for _i, _h, ref, ending, read, _d in todo])
            for (i, held, ref, _ending, _read, done), outcome in zip(todo, outcomes):
                out[i] = done if handoff.ended(held, outcome, _describe(ref)) else RELEASED
    except BaseException:
        release_many([run.held for (run, _v, _e), o in zip(runs, out) if o is None])
        raise
    return [o if o is not None else RELEASED for o in out]


def _decide(flow: EndedFlow, run: StepRun, value: Any, error: BaseException | None) -> Any:
    """What :func:`settle_many` does with one run: an outcome already committed (a string), ``(RETRIED,
    completion)``, or ``("handoff", ref, ending, read, outcome)``: the hand-off to commit and its outcome if it
    does."""
    if run.job is None and error is None:
        return ("handoff", run.ref, None, run.read, DROPPED)
    if error is None:
        try:
            ending = _success(flow, run, value)
        except Exception as exc:
            error = exc
        else:
            return ("handoff", run.ref, ending, run.read, COMPLETED)
    decided = _failure(flow, run, error)
    if decided[0] == RETRIED:
        flow.handoff.counts.count(run.step.name, "retried")
    return decided


def _failure(flow: EndedFlow, run: StepRun, exc: BaseException) -> Any:
    """What a failed attempt of ``run`` comes to, by the step's retry policy: ``(RETRIED, completion)`` (the retry
    to commit), or ``("handoff", ref, ending, read, DEAD)`` (dead, handed off as a failure). Logs; commits nothing."""
    step, held, record = run.step, run.held, run.held.record
    trace = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
    errors = record.failed(f"{type(exc).__name__}: {exc}", trace)
    policy = flow.retry_of(step)
    if policy.retries(exc, record.attempts) and not isinstance(exc, (ConfigurationError, SerializationError)):
        delay = policy.delay(record.attempts)
        log.warning("step %s of flow job %s failed (attempt %d of %d): %s: %s; again in %.1fs", step.name,
                    record.id, record.attempts, policy.max_attempts, type(exc).__name__, exc, delay)
        return (RETRIED, job_store.retry(flow.queue(step.name).paths, record, held.version,
                                         now_ms() + int(delay * 1000), errors))
    log.warning("step %s of flow job %s is dead after attempt %d: %s: %s", step.name, record.id,
                record.attempts, type(exc).__name__, exc)
    dead = StepRef(step.name, replace(record, errors=errors), run.ref.version, run.ref.ack_ops, run.ref.held)
    return ("handoff", dead, Ending(ok=False, errors=step_errors(step.name, dead.record)), run.read, DEAD)


def _describe(ref: StepRef) -> Callable[[], str]:
    return lambda: f"step {ref.step} of flow job {ref.job_id}"


def fail(flow: EndedFlow, step: Step, held: HeldJob, error: BaseException) -> str:
    """Commit a failed attempt of ``held`` whose flow record was not read for it (blocks): an attempt timed out, or
    whose handler (or the read before it) raised. As :func:`settle` with ``error``: retried by the step's policy,
    or dead and handed off as a failure. Returns :data:`RETRIED`, :data:`DEAD` or :data:`RELEASED`."""
    return _failed(flow, StepRun.of(step, held, StepView(handoff.UNREAD, None, {})), error)


def _failed(flow: EndedFlow, run: StepRun, exc: BaseException) -> str:
    decided = _failure(flow, run, exc)
    if decided[0] == RETRIED:
        run.held.finish(decided[1])
        flow.handoff.counts.count(run.step.name, "retried")
        return RETRIED
    _kind, dead, ending, read, _dead = decided
    return DEAD if _end(flow, run.held, dead, ending, read) else RELEASED


def _end(flow: EndedFlow, held: HeldJob, ref: StepRef, ending: Ending | None, read: Any) -> bool:
    """Hand off; whether it committed (else the job was given back)."""
    try:
        outcome: str | BaseException = flow.handoff.end(ref, ending, read)
    except Exception as exc:  # racing for ever, no connection, a refused request: the claim counted an attempt
        outcome = exc
    except BaseException:
        held.release()
        raise
    return handoff.ended(held, outcome, _describe(ref))


_MISSING = object()

__all__ = ["COMPLETED", "DEAD", "DROPPED", "RELEASED", "RETRIED", "EndedFlow", "StepRun", "StepView", "fail", "look",
           "settle", "settle_many"]
