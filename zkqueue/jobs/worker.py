"""Workers: ``jq.work(handler, concurrency=4)`` runs ``handler(job)`` for each job on a pool of threads, stores
what it returns as the job's result, and retries or dead-letters what it raises. Each worker is an engine queue
with a node consumer, so its leases, fences and completions are the engine's."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from zkqueue.engine.queue import DistributedQueue
from zkqueue.engine.seams import ClaimedNode, Completion
from zkqueue.jobs.claims import JobClaims
from zkqueue.jobs.model import Job
from zkqueue.jobs.outcomes import JobOutcomes

log = logging.getLogger("zkqueue.jobs.worker")


class _JobConsumer:
    """The engine's node consumer: one job per node."""

    def __init__(self, handler: Callable[[Job], Any], claims: JobClaims, outcomes: JobOutcomes) -> None:
        self._handler = handler
        self._claims = claims
        self._outcomes = outcomes

    def consume_node(self, node: ClaimedNode) -> Completion | None:
        claimed = self._claims.take(node.path)
        if claimed is None:  # cannot happen: the claim hook ran for every delivered node
            log.error("delivered node %s has no claimed record; releasing it", node.path)
            return Completion.release()
        job = self._outcomes.job(claimed.record)
        try:
            result = self._handler(job)
        except Exception as exc:
            return self._outcomes.failure(claimed, exc)
        return self._outcomes.success(claimed, result)


class JobWorker:
    """Running workers of one job queue; :meth:`stop` (or leaving the ``with`` block) lets running jobs finish."""

    def __init__(self, engine_factory: Callable[[Any, Any], DistributedQueue[Any]], handler: Callable[[Job], Any],
                 claims: JobClaims, outcomes: JobOutcomes, concurrency: int) -> None:
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="zkqueue-job")
        self._engine = engine_factory(_JobConsumer(handler, claims, outcomes), self._pool)
        self._engine.start()

    @property
    def queue(self) -> DistributedQueue[Any]:
        """The engine queue behind these workers (for its ``stats()``)."""
        return self._engine

    def stop(self) -> None:
        """Stop taking jobs, let running ones finish and record their outcome, then stop the threads."""
        try:
            self._engine.close()
        finally:
            self._pool.shutdown(wait=True)

    def __enter__(self) -> JobWorker:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
