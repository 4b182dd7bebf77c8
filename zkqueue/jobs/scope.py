"""Scoped takes (seed 000): ``with jq.take(max_jobs=10) as jobs:`` holds every job's lease for the scope.

A clean exit completes every job (result None) and an exception fails them all (each records an attempt and is
retried or dead-lettered), in as few fenced multis as possible; ``job.complete(result)`` or ``job.fail(exc)``
inside the scope decides for that one job.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from zkqueue.engine.api import (
    CONNECTION_ERRORS,
    BlockTail,
    Completion,
    DistributedQueue,
    HeldNode,
    block_tail,
    commit_while_held,
    finish_nodes,
    release_nodes,
)
from zkqueue.errors import QueueStateError, UndecodableParamsError
from zkqueue.jobs import store
from zkqueue.jobs.claims import Claimed, JobClaims
from zkqueue.jobs.model import Job, Record
from zkqueue.jobs.outcomes import JobOutcomes

log = logging.getLogger("zkqueue.jobs.scope")

_UNDECIDED = object()


@dataclass
class ClaimedJob(Job):
    """A job held by a scope: decide its end with :meth:`complete` or :meth:`fail` (else the scope does)."""

    _decision: Any = field(default=_UNDECIDED, repr=False)
    _error: BaseException | None = field(default=None, repr=False)
    #: Whether a cancel of this job is requested now (the queue's watch of the requests; None: never).
    _asked: Callable[[], bool] | None = field(default=None, repr=False, compare=False)

    @property
    def cancel_requested(self) -> bool:
        """True once :meth:`JobQueue.cancel <zkqueue.jobs.JobQueue.cancel>` asked for this held job to stop: end
        the work on it soon; the scope then ends it CANCELLED, whatever was decided for it."""
        return self._asked is not None and self._asked()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_asked"] = None  # a copy does not watch the queue
        return state

    def complete(self, result: Any = None) -> None:
        """Complete this job with ``result`` when the scope ends."""
        self._decision, self._error = result, None

    def fail(self, error: BaseException) -> None:
        """Fail this attempt when the scope ends (retried or dead-lettered by the queue's retry policy)."""
        if not isinstance(error, BaseException):
            raise TypeError(f"fail() takes an exception, got {error!r}")
        self._decision, self._error = None, error

    @property
    def decided(self) -> bool:
        return self._decision is not _UNDECIDED or self._error is not None

    @classmethod
    def of(cls, job: Job) -> ClaimedJob:
        """``job`` as a job held by a scope (undecided)."""
        return cls(**{k: getattr(job, k) for k in Job.__dataclass_fields__})


def scope_completion(job: ClaimedJob, claimed: Claimed, outcomes: JobOutcomes,
                     scope_error: BaseException | None) -> Completion:
    """How a take scope ends ``job`` (a seam for the scopes of :mod:`zkqueue.aio` as well): by its own decision
    (:meth:`ClaimedJob.complete` / :meth:`ClaimedJob.fail`) if it has one, else failed by the error the scope
    exited with, else completed with result None."""
    if job._error is not None:
        return outcomes.failure(claimed, job._error)
    if job._decision is not _UNDECIDED:
        return outcomes.success(claimed, job._decision)
    if scope_error is not None:
        return outcomes.failure(claimed, scope_error)
    return outcomes.success(claimed, None)


class TakeScope:
    """The context manager :meth:`JobQueue.take` returns."""

    def __init__(self, engine: DistributedQueue[Any], claims: JobClaims, outcomes: JobOutcomes, max_jobs: int,
                 timeout: float | None, cancel_requested: Callable[..., bool] | None = None) -> None:
        self._engine = engine
        #: ``cancel_requested(job_id, confirm=False)``: the queue's view of the cancel requests (None: no cancels)
        self._cancel_requested = cancel_requested
        self._claims = claims
        self._outcomes = outcomes
        self._max_jobs = max_jobs
        self._timeout = timeout
        self._held: list[tuple[HeldNode, Claimed, ClaimedJob]] = []
        self._entered = False

    def __enter__(self) -> list[ClaimedJob]:
        if self._entered:
            raise QueueStateError("a take scope can be entered once")
        self._entered = True
        running, timeout = self._claims.wait_running(self._timeout)
        if not running:  # paused all along
            return []
        unreadable: list[tuple[HeldNode, Claimed]] = []
        claimed_nodes = self._engine.claim_nodes(self._max_jobs, timeout)
        try:
            for o in claimed_nodes:
                claimed = self._claims.take(o.path)
                if claimed is None:  # cannot happen: the claim hook ran for every node it returned
                    log.error("claimed node %s has no claimed record; giving it back", o.name)
                    self._engine.release_nodes([o])
                    continue
                try:
                    job = self._outcomes.job(claimed.record)
                except UndecodableParamsError as exc:  # it cannot run: dead now, not handed to the caller
                    o.completion = self._outcomes.failure(claimed, exc)
                    unreadable.append((o, claimed))
                    continue
                held_job = ClaimedJob.of(job)
                if self._cancel_requested is not None:
                    held_job._asked = functools.partial(self._cancel_requested, job.id)
                self._held.append((o, claimed, held_job))
            if unreadable:
                self._engine.complete_nodes([o for o, _c in unreadable])
        except BaseException:  # the scope is not entered, so its exit never runs: give back what it holds
            self._give_back_held(unreadable)
            raise
        return [job for _o, _c, job in self._held]

    def _give_back_held(self, unreadable: list[tuple[HeldNode, Claimed]]) -> None:
        """Give back every job this scope holds (and the unreadable ones whose dead letter did not commit), their
        attempts uncounted."""
        held = [(o, claimed) for o, claimed, _job in self._held] + unreadable
        self._held = []
        for o, claimed in held:
            o.completion = self._outcomes.unstarted(claimed)
        try:
            if held:
                self._engine.complete_nodes([o for o, _c in held])
        except Exception:  # their leases end with the session
            log.warning("giving back %d job(s) of a take scope that could not be entered failed", len(held),
                        exc_info=True)

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if not self._held:
            return
        interrupted = exc is not None and not isinstance(exc, Exception)  # Ctrl-C, SystemExit: not the jobs' fault
        for o, claimed, job in self._held:
            if interrupted and not job.decided:
                o.completion = self._outcomes.unstarted(claimed)  # given back, its attempt uncounted
            elif self._cancel_requested is not None and self._cancel_requested(job.id, confirm=True):
                o.completion = self._outcomes.cancelled(claimed)  # asked to stop while held: whatever was decided
            else:
                o.completion = scope_completion(job, claimed, self._outcomes, exc)
        outcomes = [o for o, _c, _j in self._held]
        self._held = []
        self._engine.complete_nodes(outcomes)


@dataclass
class HeldJob:
    """One job claimed and held under its lease, for a layer above that decides its end itself (the flows' seam).

    ``node_path`` and ``node_version`` name the queue item; ``record`` is the job's record as the claim left it
    (ACTIVE, the attempt counted) and ``version`` that record node's version: every later claim of the job changes
    it. End it exactly once: with :meth:`finish` (a :class:`~zkqueue.engine.seams.Completion`, committed by the
    engine, fenced by the lease), with :meth:`release`, or by committing the multi :meth:`ack_ops` builds yourself
    (e.g. to retry it after a version race on your own nodes) and then calling :meth:`forget`. Many at once:
    :func:`finish_many` and :func:`release_many` (one engine call for all of them).
    """

    node_path: str
    node_version: int
    record: Record
    version: int
    _node: HeldNode = field(repr=False)
    _done: bool = field(default=False, repr=False)
    #: False while a job claimed ahead has no attempt counted (see :func:`start_many`).
    counted: bool = True

    @property
    def claimed(self) -> Claimed:
        """The job's record and version as :class:`~zkqueue.jobs.outcomes.JobOutcomes` needs them."""
        return Claimed(self.record, self.version, self.counted)

    def finish(self, completion: Completion) -> None:
        """End the job by ``completion`` (once)."""
        if self._done:
            raise QueueStateError(f"job {self.record.id!r} is already finished")
        self._done = True
        self._node.finish(completion)

    def ack_ops(self, extra_ops: list[Any]) -> tuple[list[Any], int]:
        """The ops of this job's ack with ``extra_ops``, fenced by its lease exactly as the engine commits them
        (the session fence's check, the item lease's fence child, the item at its version, ``extra_ops``, the
        lease's lock), and the index of the first extra op: a failure before it means the lease was lost. Under a
        block lease the ack is the item's delete; :func:`ack_tail` gives the block locks a batch of acks empties."""
        return self._node.ack_ops(extra_ops)

    def forget(self) -> None:
        """After a multi from :meth:`ack_ops` committed: the engine lets go of the job (its nodes are gone; no
        request is sent)."""
        if not self._done:
            self._done = True
            self._node.forget()

    def release(self) -> None:
        """Give the job back untouched (its counted attempt stays counted)."""
        if self._done:
            return
        self._done = True
        self._node.release()


def finish_many(pairs: Sequence[tuple[HeldJob, Completion]]) -> None:
    """End many held jobs, each by its completion, as :meth:`HeldJob.finish` ends one, in one engine call per
    engine queue (``complete_nodes`` packs their fenced completions into as few multis as it can) instead of one
    call per job. Jobs already ended are skipped. Blocks like :meth:`HeldJob.finish`; failures of single jobs are
    the engine's to log, retry or release, as there."""
    nodes = []
    for held, completion in pairs:
        if held._done:
            continue
        held._done = True
        held._node.completion = completion
        nodes.append(held._node)
    finish_nodes(nodes)


def ack_tail(helds: Sequence[HeldJob]) -> BlockTail:
    """The block locks that acks of ``helds`` (built by :meth:`HeldJob.ack_ops`) empty, to delete in the same
    multi: see :func:`zkqueue.engine.api.block_tail`; say how that multi went (``committed()``, ``unsure()``) before
    the jobs are forgotten."""
    return block_tail(held._node for held in helds if not held._done)


def release_many(helds: Sequence[HeldJob]) -> None:
    """Give many held jobs back untouched, as :meth:`HeldJob.release` gives one, in one engine call per engine
    queue; their counted attempts stay counted and they can be claimed again at once. Jobs already ended are
    skipped."""
    nodes = []
    for held in helds:
        if held._done:
            continue
        held._done = True
        nodes.append(held._node)
    release_nodes(nodes)


#: Reads the records of jobs whose count's reply was lost: per job, its (record, version) now, or None.
Recount = Callable[[Sequence["HeldJob"]], Sequence["tuple[Record, int] | None"]]


def start_many(paths: Any, helds: Sequence[HeldJob], recount: Recount | None = None,
               fence: Sequence[Any] = ()) -> list[HeldJob]:
    """Count the attempt of every job in ``helds`` claimed without one (``claim_many(count=False)``), fenced by its
    lease, in one engine call per engine queue; return the jobs that may run now, in order (those counted at claim
    pass through). A job whose count failed (its record changed meanwhile, or its lease went with its session) is
    given back and left out. When the reply was lost, ``recount`` reads the records again: a job whose count is
    there (the next version, one more attempt, ACTIVE) runs; the others are given back uncounted. Without
    ``recount``, or when that read fails too, they are all given back (an attempt may then be counted for a job
    that did not run, never the other way round). ``fence``: ops put before each job's count (the queue's pause
    check, :mod:`zkqueue.jobs.control`), once per multi: when they fail, the jobs are given back."""
    todo = [h for h in helds if not h.counted and not h._done]
    by_queue: dict[str, list[HeldJob]] = {}
    for h in todo:
        by_queue.setdefault(h._node.queue_path, []).append(h)
    lost: list[HeldJob] = []
    for group in by_queue.values():
        changes = [store.claim_ops(paths, h.record, h.version) for h in group]
        try:
            results = commit_while_held([h._node for h in group], [ops for _active, ops in changes], fence)
        except CONNECTION_ERRORS as exc:
            lost.extend(_settle_lost_count(group, changes, recount, exc))
            continue
        for h, (active, _ops), res in zip(group, changes, results):
            if res is not None and res is not False and res.ok:
                h.record, h.version, h.counted = active, h.version + 1, True
            else:
                log.info("job %s could not start (%s); it is given back", h.record.id,
                         "lease lost" if res is False else getattr(res, "error", res))
                lost.append(h)
    release_many(lost)
    return [h for h in helds if h.counted and not h._done]


def _settle_lost_count(group: list[HeldJob], changes: list[tuple[Record, list[Any]]], recount: Recount | None,
                       exc: BaseException) -> list[HeldJob]:
    """After a lost reply of the counts of ``group``: mark the jobs whose count committed as counted (they run);
    return the others (to give back)."""
    reads: Sequence[tuple[Record, int] | None] = [None] * len(group)
    if recount is not None:
        try:
            reads = recount(group)
        except Exception as again:  # noqa: BLE001 - unknown: give them back (counted or not)
            log.warning("counting the attempts of %d job(s) lost its reply (%r) and reading them again failed "
                        "(%r); they are given back", len(group), exc, again)
            return list(group)
    left = []
    for h, (active, _ops), read in zip(group, changes, reads):
        if read is not None and read[1] == h.version + 1 and read[0].state is active.state \
                and read[0].attempts == active.attempts:
            h.record, h.version, h.counted = read[0], read[1], True
        else:
            left.append(h)
    log.warning("counting the attempts of %d job(s) lost its reply (%r): %d had committed and start, %d are given "
                "back uncounted", len(group), exc, len(group) - len(left), len(left))
    return left


def write_held(held: HeldJob, ops: list[Any], record: Record) -> bool:
    """Commit ``ops`` (a change of ``held``'s record, version-checked) fenced by its lease, as a start is; on
    success ``held`` has ``record`` at the next version. False when the lease or the record moved on."""
    if held._done:
        return False
    results = commit_while_held([held._node], [ops])
    res = results[0] if results else None
    if res is None or res is False or not res.ok:
        return False
    held.record, held.version = record, held.version + 1
    return True


def give_back_unstarted(helds: Sequence[HeldJob], outcomes: JobOutcomes) -> None:
    """Give back jobs that were claimed and never started: one claimed without counting is released as it is; one
    whose attempt the claim counted is released with that attempt uncounted again (:meth:`JobOutcomes.unstarted`)."""
    release_many([h for h in helds if not h.counted])
    finish_many([(h, outcomes.unstarted(h.claimed)) for h in helds if h.counted])


def claim_held(engine: DistributedQueue[Any], claims: JobClaims, timeout: float | None,
               max_jobs: int = 1, *, block_leases: bool = False, count: bool = True) -> list[HeldJob]:
    """Claim up to ``max_jobs`` due jobs of ``engine`` (pull mode) and hold them; [] if none was due within
    ``timeout``. ``count=False``: no attempt is counted until :func:`start_many` (jobs claimed ahead of free
    slots)."""
    running, timeout = claims.wait_running(timeout)
    if not running:  # paused all along
        return []
    if not count:
        with claims.uncounted():
            return _held(claims, engine.claim_nodes(max_jobs, timeout, block_leases=block_leases))
    return _held(claims, engine.claim_nodes(max_jobs, timeout, block_leases=block_leases))


def _held(claims: JobClaims, nodes: list[HeldNode]) -> list[HeldJob]:
    out = []
    for node in nodes:
        claimed = claims.take(node.path)
        if claimed is None:  # cannot happen: the claim hook ran for every node it returned
            log.error("claimed node %s has no claimed record; giving it back", node.name)
            node.release()
            continue
        out.append(HeldJob(node.path, node.version, claimed.record, claimed.version, node, counted=claimed.counted))
    return out
