"""The job layer's claim hook: an attempt is counted when a job is claimed, before any worker sees it.

For each step the records of the claimed jobs are read in one multiRead (:meth:`JobClaims.prepare`); each job's
record then becomes ACTIVE with one more attempt, committed fenced by the lease before delivery. A job already out
of attempts (its workers kept dying) goes to the dead letters instead of running again; an item without a record
is quarantined. The claimed records wait here for the worker or scope that takes the node.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from zkqueue.engine import api
from zkqueue.engine.api import ClaimHook, ClaimedNode, Completion
from zkqueue.errors import CorruptItemError
from zkqueue.jobs import names, store
from zkqueue.jobs.control import QueueControl
from zkqueue.jobs.model import JobState, Record
from zkqueue.jobs.rate import RateLimiter
from zkqueue.jobs.retry import RetryPolicy

log = logging.getLogger("zkqueue.jobs.claims")


@dataclass(frozen=True)
class Claimed:
    """A job's record as this claim left it (ACTIVE) and the record node's version after the claim."""

    record: Record
    version: int
    #: False for a job claimed ahead without counting an attempt (see :meth:`JobClaims.uncounted`): its record is
    #: as before the claim until it starts.
    counted: bool = True


#: The seam for a job out of attempts at claim time: ``on_exhausted(record, version)`` returns the completion that
#: ends it (committed fenced, with the claim), or None for the default (the dead letters).
OnExhausted = Callable[[Record, int], "Completion | None"]


#: Seconds an admission of starts retries ZooKeeper errors before it gives up for now (the worker's starts wait).
START_ADMIT_RETRY = 2.0


class JobClaims(ClaimHook):
    """Counts attempts at claim time and hands the claimed records to whoever takes the nodes.

    ``on_exhausted`` is a seam for the layers above (flows): it decides how a job whose workers kept dying ends, so
    that layer can record the death in its own state in the same fenced multi. A completion whose ops fail (e.g. a
    version check of that layer's state) fails the claim: the node is released and the decision is taken again at
    its next claim.

    ``rate`` (a :class:`~zkqueue.jobs.rate.RateLimiter`) bounds the jobs claimed per time window across every
    worker of the queue: the engine asks :meth:`admit` before each claim and gives back through :meth:`unused`
    what it did not deliver. One JobClaims serves every worker and pull of a job queue in this process, so they
    share the limiter's slices."""

    def __init__(self, client: Any, paths: store.Paths, retry: RetryPolicy, acl: Any,
                 on_exhausted: OnExhausted | None = None, rate: RateLimiter | None = None,
                 control: QueueControl | None = None) -> None:
        self._client = client
        #: The queue's pause state: a paused queue is not claimed from, and a claim that counts an attempt checks
        #: that it was not paused meanwhile (see :mod:`zkqueue.jobs.control`).
        self.control = control
        self.rate = rate
        self._on_exhausted = on_exhausted
        self._paths = paths
        self._retry = retry
        self._acl = acl
        self._lock = threading.Lock()
        self._read: dict[str, tuple[Record, int] | BaseException] = {}
        self._claimed: dict[str, Claimed] = {}
        self._local = threading.local()  # per claiming thread: whether its claims count attempts (see uncounted)

    @contextmanager
    def uncounted(self) -> Iterator[None]:
        """Claims made by this thread inside the block lease their jobs without counting an attempt: the record
        stays as it is (QUEUED or RETRYING) until the job starts (:meth:`JobQueue.start_many
        <zkqueue.jobs.JobQueue.start_many>` counts it then), so a worker that dies holding jobs it claimed ahead
        costs them nothing. A job already out of attempts still ends at claim."""
        self._local.uncounted = True
        try:
            yield
        finally:
            self._local.uncounted = False

    def admit(self, count: int, closing: threading.Event, timeout: float | None = None) -> int:
        """The rate limit's admission (all of ``count`` without one): see :class:`~zkqueue.jobs.rate.RateLimiter`.
        Claims ahead (:meth:`uncounted`) are not admitted here: their jobs are admitted as they start
        (:meth:`admit_starts`), so a job held ahead of a free slot spends no budget while it waits."""
        if self.rate is None or getattr(self._local, "uncounted", False):
            return count
        return self.rate.admit(count, closing, timeout)

    def unused(self, count: int) -> None:
        if self.rate is not None and not getattr(self._local, "uncounted", False):
            self.rate.unused(count)

    def admit_starts(self, count: int, closing: threading.Event) -> int:
        """How many of ``count`` jobs claimed ahead may start now (0..count; all without a rate limit), without
        waiting for budget: the rest wait, held, until :meth:`rate_free_in` has passed. It waits for the rate
        node's answer until ``closing`` is set (see :meth:`RateLimiter.admit
        <zkqueue.jobs.rate.RateLimiter.admit>`) and retries ZooKeeper errors for :data:`START_ADMIT_RETRY`
        seconds (then 0, and ``rate_free_in`` 0: the caller pauses). Report the admitted jobs that did not start
        to :meth:`unused_starts` from the same thread."""
        if self.rate is None or count <= 0:
            return count
        # A slice at a time (one write), whatever the few starts now need: the rest serve the next starts of this
        # process while the tokens live.
        got = self.rate.admit(max(count, self.rate.limit.slice_cap), closing, START_ADMIT_RETRY, wait=False)
        if got > count:
            self.rate.keep(got - count)
            got = count
        return got

    def unused_starts(self, count: int) -> None:
        """``count`` jobs the last :meth:`admit_starts` of this thread admitted did not start (given back)."""
        if self.rate is not None:
            self.rate.unused(count)

    def rate_free_in(self) -> float:
        """Seconds until the rate limit's budget may free (0: now, or no rate limit)."""
        return self.rate.free_in() if self.rate is not None else 0.0

    def rate_stats(self) -> dict[str, int]:
        """The rate limiter's counters (none without a rate limit)."""
        return self.rate.stats() if self.rate is not None else {}

    def prepare(self, nodes: Sequence[ClaimedNode]) -> None:
        records = []
        for node in nodes:
            item = names.parse_item(node.name)
            records.append(self._paths.record(item.job_id) if item is not None else None)
        paths = [p for p in records if p is not None]
        reads = api.multi_read(self._client, paths) if paths else []
        by_path = dict(zip(paths, reads))
        with self._lock:
            for node, path in zip(nodes, records):
                res = by_path.get(path) if path is not None else CorruptItemError(f"not a job item: {node.name}")
                if isinstance(res, BaseException) or res is None:
                    self._read[node.path] = res if res is not None else CorruptItemError(node.name)
                    continue
                data, stat = res
                try:
                    self._read[node.path] = (Record.decode(data), stat.version)
                except CorruptItemError as exc:
                    self._read[node.path] = exc

    def claim_ops(self, node: ClaimedNode) -> Sequence[Any] | Completion:
        with self._lock:
            read = self._read.pop(node.path, None)
        if read is None or isinstance(read, BaseException):
            return Completion.quarantine(f"job item without a readable record: {read!r}")
        record, version = read
        if record.state is JobState.CANCELLED:  # cancelled while a worker held it ahead: it ends here, unrun
            return store.finish(self._paths, record, version, JobState.CANCELLED, self._acl)
        if record.attempts >= self.max_attempts(record):
            log.warning("job %s used all %d attempts (its workers were lost); it goes to the dead letters",
                        record.id, record.attempts)
            if self._on_exhausted is not None:
                try:
                    completion = self._on_exhausted(record, version)
                except Exception:  # decided again at the next claim
                    log.warning("ending job %s (out of attempts) failed; it is released", record.id, exc_info=True)
                    return Completion.release()
                if completion is not None:
                    return completion
            errors = record.failed("worker lost: attempts exhausted without an outcome", "")
            return store.finish(self._paths, record, version, JobState.DEAD, self._acl, errors=errors)
        if getattr(self._local, "uncounted", False):
            with self._lock:
                self._claimed[node.path] = Claimed(record, version, counted=False)
            return ()
        fence = self.control.fence_ops() if self.control is not None else []
        if fence is None:  # paused since the claim began: nothing starts
            return Completion.release()
        active, ops = store.claim_ops(self._paths, record, version)
        with self._lock:
            self._claimed[node.path] = Claimed(active, version + 1)
        return [*fence, *ops]

    def wait_running(self, timeout: float | None) -> tuple[bool, float | None]:
        """Before a claim: wait while the queue is paused, up to ``timeout`` seconds; whether it runs now, and what
        is left of ``timeout``."""
        if self.control is None or not self.control.paused:
            return True, timeout
        began = time.monotonic()
        running = self.control.wait_running(timeout)
        return running, None if timeout is None else max(0.0, timeout - (time.monotonic() - began))

    def max_attempts(self, record: Record) -> int:
        """The attempts ``record`` may use: its own limit (a task's retry policy), else the queue's."""
        return getattr(record, "max_attempts", None) or self._retry.max_attempts

    def claim_failed(self, node: ClaimedNode, error: BaseException | None) -> Completion:
        with self._lock:
            self._claimed.pop(node.path, None)
        return Completion.release()

    def take(self, node_path: str) -> Claimed | None:
        """The claimed record of the node at ``node_path`` (once)."""
        with self._lock:
            return self._claimed.pop(node_path, None)
