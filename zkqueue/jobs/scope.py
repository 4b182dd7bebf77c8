"""Scoped takes (seed 000): ``with jq.take(max_jobs=10) as jobs:`` holds every job's lease for the scope.

A clean exit completes every job (result None) and an exception fails them all (each records an attempt and is
retried or dead-lettered), in as few fenced multis as possible; ``job.complete(result)`` or ``job.fail(exc)``
inside the scope decides for that one job.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from zkqueue.engine.completion import Outcome
from zkqueue.engine.queue import DistributedQueue
from zkqueue.errors import QueueStateError
from zkqueue.jobs.claims import Claimed, JobClaims
from zkqueue.jobs.model import Job
from zkqueue.jobs.outcomes import JobOutcomes

log = logging.getLogger("zkqueue.jobs.scope")

_UNDECIDED = object()


@dataclass
class ClaimedJob(Job):
    """A job held by a scope: decide its end with :meth:`complete` or :meth:`fail` (else the scope does)."""

    _decision: Any = field(default=_UNDECIDED, repr=False)
    _error: BaseException | None = field(default=None, repr=False)

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


class TakeScope:
    """The context manager :meth:`JobQueue.take` returns."""

    def __init__(self, engine: DistributedQueue[Any], claims: JobClaims, outcomes: JobOutcomes, max_jobs: int,
                 timeout: float | None) -> None:
        self._engine = engine
        self._claims = claims
        self._outcomes = outcomes
        self._max_jobs = max_jobs
        self._timeout = timeout
        self._held: list[tuple[Outcome, Claimed, ClaimedJob]] = []
        self._entered = False

    def __enter__(self) -> list[ClaimedJob]:
        if self._entered:
            raise QueueStateError("a take scope can be entered once")
        self._entered = True
        for o in self._engine.claim_nodes(self._max_jobs, self._timeout):
            claimed = self._claims.take(o.held.path) if o.held is not None else None
            if claimed is None:  # cannot happen: the claim hook ran for every node it returned
                log.error("claimed node %s has no claimed record; giving it back", o.name)
                self._engine.release_nodes([o])
                continue
            job = self._outcomes.job(claimed.record)
            self._held.append((o, claimed, ClaimedJob(**{k: getattr(job, k) for k in job.__dataclass_fields__})))
        return [job for _o, _c, job in self._held]

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if not self._held:
            return
        for o, claimed, job in self._held:
            if job._error is not None:
                o.completion = self._outcomes.failure(claimed, job._error)
            elif job._decision is not _UNDECIDED:
                o.completion = self._outcomes.success(claimed, job._decision)
            elif exc is not None:
                o.completion = self._outcomes.failure(claimed, exc)
            else:
                o.completion = self._outcomes.success(claimed, None)
        outcomes = [o for o, _c, _j in self._held]
        self._held = []
        self._engine.complete_nodes(outcomes)
