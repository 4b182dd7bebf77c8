"""A step's ``max_concurrency``: its runs at once across every worker of the flow, on kazoo's ``Semaphore`` recipe
at ``<flow>/limits/<step>``.

The worker runtime (:mod:`zkqueue.runtime`) claims a limited step's jobs through :class:`LimitedStep`, a job
source that takes a lease of the step's semaphore for each job before it claims it: a job's attempt is counted
only when it starts, so the lease has to come first, else a started job would wait for a slot with its attempt
counted and its timeout running, holding a handler thread that other steps' jobs could use. The lease is held
while the job is held (claimed ahead or running) and let go when its attempt ends: at its end's commit, when it is
given back unstarted or could not start, and at the latest when the worker stops. A hung handler let go past its
timeout no longer holds one (its attempt is over; the job runs again under a new lease).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any, Sequence

from kazoo.exceptions import LockTimeout

from zkqueue.jobs import JobQueue
from zkqueue.jobs.outcomes import JobOutcomes
from zkqueue.jobs.scope import HeldJob
from zkqueue.jobs.store import Paths

log = logging.getLogger("zkqueue.flows.limits")


class LimitedStep:
    """The job queue of a step with a ``max_concurrency`` as the worker runtime claims it (the calls it makes of a
    :class:`~zkqueue.jobs.JobQueue`), each job under a lease of the step's semaphore at ``path``. This worker holds
    at most ``most`` leases at once (its concurrency, or fewer)."""

    def __init__(self, queue: JobQueue, client: Any, path: str, max_leases: int, most: int, name: str) -> None:
        self.queue = queue
        ident = f"{socket.gethostname()}-{os.getpid()}-{name}"
        self._sems = [client.Semaphore(path, f"{ident}-{i}", max_leases=max_leases)
                      for i in range(min(most, max_leases))]
        self._lock = threading.Lock()
        self._free = list(self._sems)  # not leased now
        self._bound: dict[int, tuple[HeldJob, Any]] = {}  # id(held) -> (held, its leased semaphore)

    @property
    def paths(self) -> Paths:
        return self.queue.paths

    @property
    def outcomes(self) -> JobOutcomes:
        return self.queue.outcomes

    def __getattr__(self, name: str) -> Any:
        """Anything else the runtime asks of a job queue (``rate_limited``, ...) is the step's job queue's."""
        if name == "queue":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.queue, name)

    def leased(self) -> int:
        """Leases held now (by jobs claimed ahead or running)."""
        with self._lock:
            return len(self._bound)

    # ------------------------------------------------------------------------------------------ the runtime's calls
    def claim_many(self, max_jobs: int, timeout: float | None = None, *, block_leases: bool = False,
                   count: bool = True) -> list[HeldJob]:
        """Take up to ``max_jobs`` leases (waiting up to ``timeout`` seconds for the first), then claim as many jobs
        (:meth:`JobQueue.claim_many <zkqueue.jobs.JobQueue.claim_many>`); leases left over are let go."""
        leases = self._acquire(max_jobs, timeout)
        if not leases:
            return []
        try:
            helds = self.queue.claim_many(len(leases), timeout, block_leases=block_leases, count=count)
        except BaseException:
            self._let_go(leases)
            raise
        with self._lock:
            for held, sem in zip(helds, leases):
                self._bound[id(held)] = (held, sem)
        self._let_go(leases[len(helds):])
        return helds

    def start_many(self, helds: Sequence[HeldJob]) -> list[HeldJob]:
        """Count the attempts as the jobs start; the leases of those that could not start are let go."""
        try:
            started = self.queue.start_many(helds)
        except BaseException:
            self.done(helds)
            raise
        ran = {id(h) for h in started}
        self.done([h for h in helds if id(h) not in ran])
        return started

    def give_back(self, helds: Sequence[HeldJob]) -> None:
        """Give back jobs that never started, and let their leases go."""
        try:
            self.queue.give_back(helds)
        finally:
            self.done(helds)

    # ------------------------------------------------------------------------------------------ leases
    def done(self, helds: Sequence[HeldJob]) -> None:
        """The attempts of ``helds`` are over (or never began): let their leases go."""
        with self._lock:
            sems = [pair[1] for h in helds if (pair := self._bound.pop(id(h), None)) is not None]
        self._let_go(sems)

    def close(self) -> None:
        """Let every lease go (the worker stopped; jobs given back on a cold stop still held theirs)."""
        with self._lock:
            sems = [sem for _held, sem in self._bound.values()]
            self._bound.clear()
        self._let_go(sems)

    def _acquire(self, most: int, timeout: float | None) -> list[Any]:
        with self._lock:
            tries, self._free = self._free[:max(most, 0)], self._free[max(most, 0):]
        got: list[Any] = []
        try:
            for sem in tries:
                try:  # the first waits, the others only take what is free now
                    ok = sem.acquire(blocking=not got, timeout=None if got else timeout)
                except LockTimeout:
                    ok = False
                if not ok:
                    break
                got.append(sem)
        except BaseException:
            self._let_go(got)
            raise
        finally:
            with self._lock:
                self._free.extend(tries[len(got):])
        return got

    def _let_go(self, sems: Sequence[Any]) -> None:
        for sem in sems:
            try:
                sem.release()
            except Exception:  # the lease node is ephemeral: it goes with the session at the latest
                log.warning("letting a lease of %s go failed", sem.path, exc_info=True)
            with self._lock:
                self._free.append(sem)


__all__ = ["LimitedStep"]
