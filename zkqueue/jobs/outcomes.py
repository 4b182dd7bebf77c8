"""How a claimed job ends: completed with its result, retried after a backoff, or dead; and how records become
the :class:`~zkqueue.jobs.model.Job` users see."""

from __future__ import annotations

import logging
import threading
import traceback as tb
from collections import Counter
from dataclasses import replace
from typing import Any, Callable

from zkqueue.engine.api import Completion, RepeatLimiter
from zkqueue.errors import UndecodableParamsError
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

    def policy(self, record: Record, policy: RetryPolicy | None = None) -> RetryPolicy:
        """The retry policy that decides ``record``'s failures: ``policy`` when given (a worker passes its task's),
        else the queue's, with the record's own ``max_attempts`` when it has one (a task's policy travels with its
        jobs that way)."""
        if policy is not None:
            return policy
        if record.max_attempts is None or record.max_attempts == self._retry.max_attempts:
            return self._retry
        return replace(self._retry, max_attempts=record.max_attempts)

    def success(self, claimed: Claimed, result: Any, policy: RetryPolicy | None = None) -> Completion:
        """The completion of a job that returned ``result``; a result the serializer refuses fails the attempt
        (decided by ``policy``, see :meth:`failure`)."""
        try:
            data = self._serializer.serialize(result)
        except Exception as exc:
            log.warning("job %s returned a result the serializer refuses (%r): the attempt fails", claimed.record.id,
                        exc)
            return self.failure(claimed, exc, policy)
        self.count("completed")
        return store.finish(self._paths, claimed.record, claimed.version, JobState.COMPLETED, self._acl,
                            result=bytes(data))

    def failure(self, claimed: Claimed, error: BaseException, policy: RetryPolicy | None = None) -> Completion:
        """The completion of a job whose attempt raised ``error``: retried after a backoff, or dead, as ``policy``
        decides (the worker passes its task's; default: :meth:`policy`, the queue's with the record's own
        ``max_attempts``). A :class:`~zkqueue.errors.NonRetryableError` is never retried."""
        record = claimed.record
        retry = self.policy(record, policy)
        trace = "".join(tb.format_exception(type(error), error, error.__traceback__))
        errors = record.failed(f"{type(error).__name__}: {error}", trace)
        if retry.retries(error, record.attempts):
            delay = retry.delay(record.attempts)
            JOB_ERRORS.error(log, error, "job %s failed (attempt %d of %d): %s: %s; again in %.1fs", record.id,
                             record.attempts, retry.max_attempts, type(error).__name__, error, delay,
                             level=logging.WARNING, scope=self._paths.root)
            self.count("retried")
            return store.retry(self._paths, record, claimed.version, now_ms() + int(delay * 1000), errors,
                               self._place)
        # Its own line, always shown (a death is rare and needs attention), whatever the retries of the same error
        # logged before; the traceback is in the job's record (zkqueue jobs show / the dashboard).
        log.warning("job %s of %s failed (attempt %d of %d): %s: %s; it goes to the dead letters", record.id,
                    self._paths.root, record.attempts, retry.max_attempts, type(error).__name__, error)
        self.count("dead_lettered")
        return store.finish(self._paths, record, claimed.version, JobState.DEAD, self._acl, errors=errors)

    def cancelled(self, claimed: Claimed) -> Completion:
        """The completion of a running job whose cancel was requested and whose handler has ended (whatever it
        returned or raised): CANCELLED, its cancel request deleted in the same multi."""
        self.count("cancelled")
        log.info("job %s of %s was cancelled while it ran (attempt %d)", claimed.record.id, self._paths.root,
                 claimed.record.attempts)
        return store.finish(self._paths, claimed.record, claimed.version, JobState.CANCELLED, self._acl,
                            cancel_request=True)

    def unstarted(self, claimed: Claimed) -> Completion:
        """A claimed job given back before its handler started: released, its attempt not counted."""
        self.count("returned")
        return store.unclaim(self._paths, claimed.record, claimed.version)

    def job(self, record: Record) -> Job:
        """The job of ``record``, to run: :class:`~zkqueue.errors.UndecodableParamsError` (never retried) when the
        serializer cannot read its params or result."""
        return self._job(record, raw=False)

    def view(self, record: Record) -> Job:
        """The job of ``record``, to look at (get, listings, waits): params or a result the serializer cannot read
        are given as their raw bytes instead, so such a job can still be seen (and its dead letter dealt with)."""
        return self._job(record, raw=True)

    def _decode(self, record: Record, what: str, data: bytes, raw: bool) -> Any:
        try:
            return self._serializer.deserialize(data)
        except Exception as exc:
            if raw:
                log.debug("job %s of %s: its %s cannot be read (%r): shown as raw bytes", record.id,
                          self._paths.root, what, exc)
                return bytes(data)
            raise UndecodableParamsError(f"job {record.id} of {self._paths.root}: its {what} cannot be read by "
                                         f"{type(self._serializer).__name__}: {exc}") from exc

    def _job(self, record: Record, raw: bool) -> Job:
        return Job(
            id=record.id,
            params=self._decode(record, "params", record.params, raw),
            state=record.state,
            attempts=record.attempts,
            errors=list(record.errors),
            result=self._decode(record, "result", record.result, raw) if record.result is not None else None,
            priority=record.priority,
            created_at=record.created_ms / 1000.0,
            updated_at=record.updated_ms / 1000.0,
            timeout=record.timeout,
            task=record.task,
            max_attempts=record.max_attempts,
            queue_path=self._paths.root,
            headers=dict(record.headers) if record.headers else {},
            progress=record.progress,
        )
