"""JobHandle: what ``enqueue`` returns, and ``app.job(id)``: a job's id and queue, with ways to read its state and
wait for its result (on ZooKeeper watches)."""

from __future__ import annotations

import logging
from typing import Any

from zkqueue.jobs.model import Job, JobState
from zkqueue.jobs.queue import JobQueue

log = logging.getLogger("zkqueue.tasks.handle")


class JobHandle:
    """A job of an app: ``id``, ``queue`` (its name), ``task`` (its task's name, when known here) and ``created``
    (False when enqueueing found that id unfinished: the handle then points at that existing job, whose params are
    left as they were). Every read goes to ZooKeeper; nothing is cached."""

    def __init__(self, job_queue: JobQueue, queue: str, job_id: str, *, created: bool = True,
                 task: str | None = None) -> None:
        self.job_queue = job_queue
        self.queue = queue
        self.id = job_id
        self.created = created
        self.task = task

    def get(self) -> Job | None:
        """The job now (any state), or None if it is unknown (never added, or its finished record was reaped)."""
        return self.job_queue.get(self.id)

    @property
    def state(self) -> JobState | None:
        """The job's state now (QUEUED, ACTIVE, RETRYING, COMPLETED, DEAD or CANCELLED), or None if it is
        unknown."""
        job = self.get()
        return job.state if job is not None else None

    @property
    def progress(self) -> Any:
        """The progress its handler last reported (``job.report_progress(value)``), read now; None until one was,
        or if the job is unknown."""
        job = self.get()
        return job.progress if job is not None else None

    def cancel(self) -> bool:
        """Cancel the job (:meth:`JobQueue.cancel <zkqueue.jobs.JobQueue.cancel>`): a waiting job becomes CANCELLED
        at once; a running one is asked to stop and ends CANCELLED when its handler ends. True if it was cancelled
        or asked to; False if it is unknown or already finished."""
        return self.job_queue.cancel(self.id)

    def wait(self, timeout: float | None = None) -> Job:
        """The job once it is finished (COMPLETED, DEAD or CANCELLED), on a watch;
        :class:`~zkqueue.errors.WaitTimeoutError` after ``timeout`` seconds (None: no limit),
        :class:`~zkqueue.errors.JobNotFoundError` if it is unknown."""
        return self.job_queue.wait(self.id, timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The job's result once it completes (a ZooKeeper watch wakes the wait: no polling). Raises
        :class:`~zkqueue.errors.JobDeadError` (a :class:`~zkqueue.errors.JobFailedError`: ``.job``,
        ``.last_error``) when it ends dead, :class:`~zkqueue.errors.JobCancelledError` (a ``JobFailedError`` too)
        when it was cancelled, :class:`~zkqueue.errors.WaitTimeoutError` (a ``TimeoutError``) after ``timeout``
        seconds (None: no limit), :class:`~zkqueue.errors.JobNotFoundError` if it is unknown."""
        return self.job_queue.wait_result(self.id, timeout)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JobHandle):
            return NotImplemented
        return (self.job_queue.paths.root, self.id) == (other.job_queue.paths.root, other.id)

    def __hash__(self) -> int:
        return hash((self.job_queue.paths.root, self.id))

    def __repr__(self) -> str:
        task = f" task={self.task!r}" if self.task is not None else ""
        return f"<JobHandle {self.id!r} queue={self.queue!r}{task} created={self.created}>"
