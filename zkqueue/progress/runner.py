"""Where a :class:`~zkqueue.progress.ProgressConsumer` runs its jobs: the seam between the coordinator (election,
window, stored progress: the same whoever runs the jobs) and the code that calls the worker.

The coordinator hands each job to a :class:`JobRunner` as a :class:`JobTask` and hears back through
``task.finished(ok)``, exactly once per task; ``stop()`` waits for that call of every task it submitted (in
whichever term) before it calls ``shutdown()``. The default, :class:`ThreadRunner`, calls the worker on a pool of
``max_processing`` threads; :class:`zkqueue.aio.AsyncProgressConsumer` runs coroutine workers on an event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from zkqueue.progress.attempts import JobRun
from zkqueue.progress.context import JobContext

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


class ThreadRunner:
    """Calls ``worker(*task.args)`` on ``max_processing`` threads (``zkqueue-progress-worker``)."""

    def __init__(self, worker: Callable[..., Any], progress_path: str) -> None:
        self._worker = worker
        self._path = progress_path
        self._pool: ThreadPoolExecutor | None = None

    def start(self, max_processing: int) -> None:
        self._pool = ThreadPoolExecutor(max_processing, thread_name_prefix="zkqueue-progress-worker")

    def submit(self, task: JobTask) -> None:
        assert self._pool is not None, "start() first"
        self._pool.submit(self._run, task)

    def _run(self, task: JobTask) -> None:
        # JobRun retries whatever the worker raises (BaseException too); what escapes here is a bug of ours
        ok: bool | None = None
        try:
            ok = task.open().run(lambda attempt: self._worker(*task.args))
        except BaseException:  # never die silently: the coordinator steps down
            log.critical("the worker thread of job %d of %s died", task.index, self._path, exc_info=True)
            raise
        finally:
            task.finished(ok)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["JobRunner", "JobTask", "ThreadRunner"]
