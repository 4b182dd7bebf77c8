"""What a worker that takes three arguments gets as its third, ``ctx``: the job's index and attempt, and the
pipeline hand-offs to a next stage's :class:`~zkqueue.progress.log.JobLog`.

``ctx.append_and_done(log, items)`` is one multi: the election fence of this consumer, a done marker for this
job under the progress path, and the append. Either all of it commits or none does, and a job with a marker is
never run again (a new active consumer skips it): the hand-off happens exactly once. ``ctx.append`` is a plain
append (at-least-once: a job that runs again appends again)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from zkqueue.errors import AppendConflictError, ProgressFencedError
from zkqueue.engine.api import wait_connected
from zkqueue.progress.txn import CAS_TRIES, UNKNOWN_OUTCOME, MultiFailed, cas_wait, commit

if TYPE_CHECKING:
    from zkqueue.progress.attempts import JobRun
    from zkqueue.progress.log import JobLog
    from zkqueue.progress.store import ProgressStore

log = logging.getLogger("zkqueue.progress.context")


class JobContext:
    """One run of one job: ``index``, ``attempt`` (1 for the first run), and the hand-offs."""

    def __init__(self, index: int, run: JobRun, store: ProgressStore, fence: str, handed: Any) -> None:
        self.index = index
        self._run = run
        self._store = store
        self._fence = fence
        self._handed = handed  # called with the index once a hand-off committed

    @property
    def attempt(self) -> int:
        return self._run.attempt

    def append(self, job_log: JobLog, items: bytes | Sequence[bytes]) -> list[int]:
        """Append to the next stage's log, not tied to this job's completion (at-least-once)."""
        return job_log.append_many([items] if isinstance(items, (bytes, bytearray)) else list(items))

    def append_and_done(self, job_log: JobLog, items: bytes | Sequence[bytes] = ()) -> list[int]:
        """Append ``items`` to ``job_log`` and mark this job finished in one multi (exactly-once hand-off); the
        new indexes ([] if this job's hand-off had already committed). Raises
        :class:`~zkqueue.errors.ProgressFencedError` if this consumer is no longer the active one, and
        :class:`~zkqueue.errors.AppendConflictError` (nothing written) if other appenders won every try."""
        if self._run.finished_by_handoff:
            raise ProgressFencedError(f"job {self.index} was already handed off")
        batch = job_log.check_items([items] if isinstance(items, (bytes, bytearray)) else list(items))
        marker = self._store.done_path(self.index)
        client = self._store.client
        client.ensure_path(marker.rsplit("/", 1)[0])
        token = uuid.uuid4().hex[:12]
        for attempt in range(1, CAS_TRIES + 1):
            if batch:
                log_ops, indexes, expect = job_log.plan_append(batch, token)
            else:
                log_ops, indexes, expect = [], [], None
            ops = [("check", self._fence, -1), ("create", marker, b"", False), *log_ops]
            try:
                results = commit(client, ops)
            except MultiFailed as exc:
                if exc.index == 0:
                    raise ProgressFencedError(f"job {self.index}: this consumer is no longer the active one; "
                                              "hand-off refused") from None
                if exc.index == 1 and isinstance(exc.error, NodeExistsError):
                    log.warning("job %d was already handed off", self.index)
                    self._done()
                    return []
                if job_log.refresh_after_conflict(exc):
                    if attempt < CAS_TRIES:
                        cas_wait(attempt)
                    continue
                raise exc.error from None
            except UNKNOWN_OUTCOME as exc:
                if not wait_connected(client, 30.0):
                    raise
                try:
                    client.sync(marker)  # the server we reconnected to may lag behind the leader
                    client.get(marker)
                except NoNodeError:
                    continue  # not committed: send it again
                if expect is not None:
                    job_log.forget_newest()  # re-read on the next append
                log.info("hand-off of job %d committed before the connection dropped (%r)", self.index, exc)
                self._done()
                return indexes
            if expect is not None:
                job_log.verify_append(results[2:], log_ops, indexes, expect)
            self._done()
            return indexes
        raise AppendConflictError(f"hand-off of job {self.index} kept conflicting with other appenders "
                                  f"({CAS_TRIES} tries); nothing was written")

    def _done(self) -> None:
        self._run.finished_by_handoff = True
        self._handed(self.index)
