"""Where a :class:`~zkqueue.progress.ProgressConsumer` runs its jobs: the seam between the coordinator (election,
window, stored progress: the same whoever runs the jobs) and the code that calls the worker.

The coordinator hands each job to a :class:`JobRunner` as a :class:`JobTask` and hears back through
``task.finished(ok)``, exactly once per task; ``stop()`` waits for that call of every task it submitted (in
whichever term) before it calls ``shutdown()``. Runners run tasks on the drivers of the worker runtime
(:class:`DriverRunner`): the default, :class:`ThreadRunner`, calls the worker on ``max_processing`` slot threads;
:class:`zkqueue.aio.AsyncProgressConsumer` runs coroutine workers on the application's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from zkqueue.progress.attempts import JobRun
from zkqueue.progress.context import JobContext
from zkqueue.runtime.attempt import Attempt
from zkqueue.runtime.threads import ThreadDriver
from zkqueue.runtime.worker import Driver

log = logging.getLogger("zkqueue.progress.runner")


class JobTask:
    """One job to run: its ``index`` and ``job``. The runner calls :meth:`open` where the job runs (on its
    thread or task: a failure there is the runner's), then runs the worker through ``task.run``
    (:meth:`JobRun.run` / :meth:`JobRun.run_async`: attempts and retry waits) with :attr:`args`, and calls
    ``finished(ok)`` once: True (ran to success), False (given up unfinished: the consumer stopped or lost its
    term), None (the runner failed: the consumer steps down and the job runs again)."""

    def __init__(self, index: int, job: Any, opener: Callable[[], tuple[JobRun, JobContext | None]],
                 finished: Callable[[bool | None], None]) -> None:
        self.index = index
        self.job = job
        self.finished = finished
        self._opener = opener
        self.run: JobRun | None = None
        #: The worker's third argument, or None for a worker that takes two (set by :meth:`open`).
        self.context: JobContext | None = None

    def open(self) -> JobRun:
        """Make the job's run (and context); returns the run."""
        self.run, self.context = self._opener()
        return self.run

    @property
    def args(self) -> tuple[Any, ...]:
        """The worker's arguments: ``(index, job)`` or ``(index, job, ctx)``."""
        return (self.index, self.job) if self.context is None else (self.index, self.job, self.context)


class JobRunner(Protocol):
    """Runs a consumer's jobs. :meth:`submit` is called on the coordinator thread and must not block."""

    def start(self, max_processing: int) -> None: ...

    def submit(self, task: JobTask) -> None: ...

    def shutdown(self) -> None: ...


class DriverRunner:
    """A :class:`JobRunner` on a driver of the worker runtime (:mod:`zkqueue.runtime`): each task is one
    :class:`~zkqueue.runtime.Attempt` whose call, ``call(task)``, runs the job's whole :class:`JobRun` (its runs
    and retry waits) there, so the consumer's jobs run where and as every other job of zkqueue runs.

    The attempt's outcome is ``task.finished``: the run's verdict; or, when the call raised (a bug of ours, logged
    as such: :class:`JobRun` retries whatever the worker raises), None, so the consumer steps down, unless
    ``interrupted(task, error)`` says the error was the runner's own stop (then False: unfinished)."""

    def __init__(self, driver: Driver | None, call: Callable[[JobTask], Any], progress_path: str, *,
                 interrupted: Callable[[JobTask, BaseException], bool] | None = None) -> None:
        self._driver = driver
        self._call = call
        self._path = progress_path
        self._interrupted = interrupted
        self._lock = threading.Lock()
        self._attempts: set[Attempt] = set()
        self._counted: set[Attempt] = set()  # the attempts running: _begun saw them, _settled not yet
        self._closed = False
        #: The most runs that were going at once.
        self.peak = 0

    def start(self, max_processing: int) -> None:
        assert self._driver is not None, "no driver to start"
        self._driver.start(max_processing)

    def submit(self, task: JobTask) -> None:
        """Hand ``task`` to the driver (does not block)."""
        assert self._driver is not None, "start() first"
        attempt = Attempt(None, None, task, self._call, None, self._settled, driver=self._driver,
                          on_begin=self._begun, label=f"{task.index} of {self._path}")
        with self._lock:
            closed = self._closed
            if not closed:
                self._attempts.add(attempt)
        if closed:  # a coordinator still going after its stop gave up waiting: the job stays unfinished
            task.finished(False)
            return
        try:
            self._driver.submit(attempt)
        except BaseException:
            with self._lock:
                self._attempts.discard(attempt)
            raise

    def _begun(self, attempt: Attempt) -> None:
        with self._lock:
            self._counted.add(attempt)  # counted as running from here, whether or not it begins after all
            self.peak = max(self.peak, len(self._counted))

    def _settled(self, attempt: Attempt) -> None:
        task: JobTask = attempt.job
        with self._lock:
            self._attempts.discard(attempt)
            self._counted.discard(attempt)
        ok: bool | None = None
        if attempt.error is None:
            ok = bool(attempt.result)
        elif self._interrupted is not None and self._interrupted(task, attempt.error):
            ok = False
        elif isinstance(attempt.error, asyncio.CancelledError):  # e.g. the loop shut down under the consumer
            log.warning("the run of job %d of %s was cancelled; the consumer steps down", task.index, self._path)
        else:
            log.critical("the run of job %d of %s died", task.index, self._path, exc_info=attempt.error)
        task.finished(ok)

    @property
    def running(self) -> int:
        """Runs going now (a job waiting for its retry included)."""
        with self._lock:
            return len(self._counted)

    def _left(self) -> list[Attempt]:
        with self._lock:
            return list(self._attempts)

    def shutdown(self) -> None:
        """Close the driver; runs still going (a stop's timeout ran out) end as their keep_going turns False, and
        a task submitted from now on ends unfinished at once."""
        with self._lock:
            self._closed = True
        if self._driver is not None:
            self._driver.close(wait=0.0)


class ThreadRunner(DriverRunner):
    """Calls ``worker(*task.args)`` on ``max_processing`` threads (``zkqueue-progress-worker-N``) of the runtime's
    thread driver."""

    def __init__(self, worker: Callable[..., Any], progress_path: str) -> None:
        self._worker = worker
        super().__init__(ThreadDriver("zkqueue-progress-worker"), self._run, progress_path)

    def _run(self, task: JobTask) -> bool:
        return task.open().run(lambda attempt: self._worker(*task.args))


__all__ = ["DriverRunner", "JobRunner", "JobTask", "ThreadRunner"]
