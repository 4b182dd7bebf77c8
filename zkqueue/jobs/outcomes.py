"""How a claimed job ends: completed with its result, retried after a backoff, or dead; and how records become
the :class:`~zkqueue.jobs.model.Job` users see."""

from __future__ import annotations

import logging
import threading
import traceback as tb
from collections import Counter
from typing import Any, Callable

from zkqueue.engine.log_limits import RepeatLimiter
from zkqueue.engine.seams import Completion
from zkqueue.jobs import store
from zkqueue.jobs.claims import Claimed
from zkqueue.jobs.model import Job, JobState, Record, now_ms
from zkqueue.jobs.retry import RetryPolicy

log = logging.getLogger("zkqueue.jobs.outcomes")

#: Retried jobs: each distinct error (type and raise site, per job queue) logs its traceback once a minute; the
#: repeats are counted (``JOB_ERRORS.repeats()``) and the job's record keeps every error and traceback. A job that
#: goes to the dead letters always logs one WARNING line of its own (no traceback), not limited.
JOB_ERRORS = RepeatLimiter()


class JobOutcomes:
    """Turns a claimed job's result or error into the completion that records it."""

    def __init__(self, paths: store.Paths, serializer: Any, retry: RetryPolicy, acl: Any,
                 place: Callable[[str, int], str] | None = None) -> None:
        self._paths = paths
        #: Where a retry's item goes (name prefix, due ms) -> sequential prefix: parked when due far ahead.
        self._place = place
        self._serializer = serializer
        self._retry = retry
        self._acl = acl
        #: Job ends decided here (completed, retried, dead_lettered): :meth:`JobQueue.stats` reports them.
        self.tally: Counter[str] = Counter()
        self._tally_lock = threading.Lock()

    def count(self, what: str, n: int = 1) -> None:
        with self._tally_lock:
            self.tally[what] += n

    def tallied(self) -> dict[str, int]:
        """A copy of :attr:`tally`."""
        with self._tally_lock:
            return dict(self.tally)

    def success(self, claimed: Claimed, result: Any) -> Completion:
        try:
            data = self._serializer.serialize(result)
        except Exception as exc:
            log.warning("job %s returned a result the serializer refuses (%r): the attempt fails", claimed.record.id,
                        exc)
            return self.failure(claimed, exc)
        self.count("completed")
        return store.finish(self._paths, claimed.record, claimed.version, JobState.COMPLETED, self._acl,
                            result=bytes(data))

    def failure(self, claimed: Claimed, error: BaseException) -> Completion:
        record = claimed.record
        trace = "".join(tb.format_exception(type(error), error, error.__traceback__))
        errors = record.failed(f"{type(error).__name__}: {error}", trace)
        if self._retry.retries(error, record.attempts):
            delay = self._retry.delay(record.attempts)
            JOB_ERRORS.error(log, error, "job %s failed (attempt %d of %d): %s: %s; again in %.1fs", record.id,
                             record.attempts, self._retry.max_attempts, type(error).__name__, error, delay,
                             level=logging.WARNING, scope=self._paths.root)
            self.count("retried")
            return store.retry(self._paths, record, claimed.version, now_ms() + int(delay * 1000), errors,
                               self._place)
        # Its own line, always shown (a death is rare and needs attention), whatever the retries of the same error
        # logged before; the traceback is in the job's record (zkqueue jobs show / the dashboard).
        log.warning("job %s of %s failed (attempt %d of %d): %s: %s; it goes to the dead letters", record.id,
                    self._paths.root, record.attempts, self._retry.max_attempts, type(error).__name__, error)
        self.count("dead_lettered")
        return store.finish(self._paths, record, claimed.version, JobState.DEAD, self._acl, errors=errors)

    def unstarted(self, claimed: Claimed) -> Completion:
        """A claimed job given back before its handler started: released, its attempt not counted."""
        self.count("returned")
        return store.unclaim(self._paths, claimed.record, claimed.version)

    def job(self, record: Record) -> Job:
        return Job(
            id=record.id,
            params=self._serializer.deserialize(record.params),
            state=record.state,
            attempts=record.attempts,
            errors=list(record.errors),
            result=self._serializer.deserialize(record.result) if record.result is not None else None,
            priority=record.priority,
            created_at=record.created_ms / 1000.0,
            updated_at=record.updated_ms / 1000.0,
            timeout=record.timeout,
        )
