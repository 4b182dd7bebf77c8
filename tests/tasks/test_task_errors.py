"""zkqueue.errors holds every exception a caller can catch: the moved names stay importable from their old
modules as the very same classes, JobDeadError is a JobFailedError, and NonRetryableError is never retried."""

from __future__ import annotations

import pickle

import pytest

import zkqueue
from zkqueue import errors
from zkqueue.jobs import Job, JobState, RetryPolicy


def dead_job() -> Job:
    return Job(id="j1", params=None, state=JobState.DEAD, attempts=2, errors=[])


def test_moved_errors_are_the_same_classes_at_their_old_paths() -> None:
    from zkqueue.aio import JobDeadError, JobTimeoutError
    from zkqueue.aio.jobs import JobDeadError as jobs_dead
    from zkqueue.aio.worker import JobTimeoutError as worker_timeout
    from zkqueue.spark import SessionLostError
    from zkqueue.spark.clients import SessionLostError as clients_lost

    assert JobDeadError is jobs_dead is errors.JobDeadError
    assert JobTimeoutError is worker_timeout is errors.JobTimeoutError
    assert SessionLostError is clients_lost is errors.SessionLostError
    for cls in (errors.JobTimeoutError, errors.WaitTimeoutError):
        assert issubclass(cls, TimeoutError) and issubclass(cls, errors.ZkQueueError)


def test_job_dead_error_is_a_job_failed_error_with_the_job_and_its_last_error() -> None:
    from zkqueue.jobs.model import JobError

    job = dead_job()
    job.errors = [JobError(1, "ValueError: first", "", 0), JobError(2, "ValueError: bad input", "", 0)]
    with pytest.raises(errors.JobFailedError) as caught:
        raise errors.JobDeadError(job)
    assert caught.value.job is job and caught.value.last_error == "ValueError: bad input"
    assert "bad input" in str(caught.value)
    again = pickle.loads(pickle.dumps(caught.value))  # crosses process boundaries intact
    assert type(again) is errors.JobDeadError and again.job == job and again.last_error == "ValueError: bad input"


def test_unknown_task_error_names_the_task_and_the_queue_and_pickles() -> None:
    error = errors.UnknownTaskError("myapp.tasks.send_mail", "mail", "j-7", app="/zkqueue")
    assert "'myapp.tasks.send_mail'" in str(error) and "'mail'" in str(error) and "'j-7'" in str(error)
    assert isinstance(error, LookupError) and isinstance(error, errors.NonRetryableError)
    again = pickle.loads(pickle.dumps(error))
    assert (again.task, again.queue, again.job_id, str(again)) == (error.task, error.queue, error.job_id, str(error))
    assert "names no task" in str(errors.UnknownTaskError(None, "mail", "j-8"))


def test_a_non_retryable_error_is_never_retried_whatever_the_policy() -> None:
    class GiveUp(errors.NonRetryableError):
        pass

    policy = RetryPolicy(max_attempts=10, retry_on=Exception)
    assert policy.retries(ValueError("again"), 1)
    for error in (errors.UnknownTaskError("x.y", "q"), errors.TaskParamsError("bad"), GiveUp("no")):
        assert not policy.retries(error, 1)
    assert not RetryPolicy(max_attempts=10, retry_on=errors.UnknownTaskError).retries(
        errors.UnknownTaskError("x.y", "q"), 1)


def test_the_errors_are_exported_at_the_top_level() -> None:
    for name in ("JobFailedError", "JobDeadError", "JobTimeoutError", "WaitTimeoutError", "SessionLostError",
                 "UnknownTaskError", "NonRetryableError"):
        assert getattr(zkqueue, name) is getattr(errors, name)
        assert name in zkqueue.__all__
