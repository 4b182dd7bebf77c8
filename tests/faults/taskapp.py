"""The app of the task-worker fault scenario (test_task_worker_faults.py): one sync task, run by real
``zkqueue worker`` processes, that leaves a line in a shared record file for every run.

A task function does not see its job, so :class:`RecordingApp` wraps what :meth:`App.resolve
<zkqueue.tasks.App.resolve>` gives the worker: each run appends (one ``O_APPEND`` write per line, so the lines of
several processes never mix) ``start <job id> <attempt> <pid> <time>`` before the task runs, then ``end <job id>
<attempt> <pid> <result> <time>`` or ``fail <job id> <attempt> <pid> <time>``. The attempt is the one the worker
counted as the job started (the job's record). While the file named by ``$ZKQUEUE_FAULTS_HOLD`` exists, a run writes
``hold <job id> <attempt> <pid> <time>`` after its start line and never ends: the test SIGKILLs that worker then,
provably mid-job.

The test writes a two-line module that calls :func:`make_app` with its connect string and record file, and starts
``zkqueue worker thatmodule:app``; its producer calls :func:`make_app` too, for the same task and retry policy.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from zkqueue import App, RetryPolicy
from zkqueue.jobs.model import Job
from zkqueue.server.testing import FAST_RECONNECT

log = logging.getLogger("zkqueue.tests.faults.taskapp")

TASK = "faults.compute"
QUEUE = "calc"
MAX_ATTEMPTS = 4
#: The task's policy: short waits, so that the jobs that always fail are dead within a second.
RETRY = RetryPolicy(max_attempts=MAX_ATTEMPTS, backoff=0.05, jitter=False)
#: A job's second argument: when it fails on purpose.
NEVER, FIRST, ALWAYS = "never", "first", "always"
HOLD_ENV = "ZKQUEUE_FAULTS_HOLD"
#: Seconds of "work" per run: a SIGKILL or a leader kill lands in the middle of runs.
WORK_SECONDS = 0.003

_run = threading.local()  # the attempt of the job this thread runs (the task reads it)
_files: dict[tuple[int, str], int] = {}  # (pid, path) -> an O_APPEND descriptor of this process


class PlannedFailure(Exception):
    """A run that fails on purpose."""


def result_of(n: int) -> int:
    """What the task returns for ``n``."""
    return 3 * n + 1


def _append(path: str, line: str) -> None:
    key = (os.getpid(), path)
    fd = _files.get(key)
    if fd is None:
        fd = _files[key] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{line} {time.time():.3f}\n".encode())


class _Recorded:
    """A task as the worker runs it: its run recorded around the call."""

    def __init__(self, task: Any, record: str) -> None:
        self.task = task
        self.name = task.name
        self.is_async = task.is_async
        self.retry = task.retry
        self.timeout = task.timeout
        self._record = record

    def call(self, job: Job) -> Any:
        pid = os.getpid()
        _append(self._record, f"start {job.id} {job.attempts} {pid}")
        hold = os.environ.get(HOLD_ENV)
        if hold and os.path.exists(hold):
            _append(self._record, f"hold {job.id} {job.attempts} {pid}")
            threading.Event().wait()  # until the process is SIGKILLed
        _run.attempt = job.attempts
        try:
            value = self.task.call(job)
        except BaseException:
            _append(self._record, f"fail {job.id} {job.attempts} {pid}")
            raise
        _append(self._record, f"end {job.id} {job.attempts} {pid} {value}")
        return value


class RecordingApp(App):
    """An App whose workers record every run of its tasks in ``record`` (see the module docs)."""

    def __init__(self, connect: str, record: str, **options: Any) -> None:
        super().__init__(connect, **options)
        self.record = record

    def resolve(self, job: Job) -> Any:
        return _Recorded(super().resolve(job), self.record)


def make_app(connect: str, record: str, *, session_timeout: float,
             client_options: Mapping[str, Any] | None = None) -> RecordingApp:
    """The scenario's app on ``connect`` (sessions of ``session_timeout`` seconds, reconnecting fast) with its one
    task, :data:`TASK` on queue :data:`QUEUE`: ``compute(n, fail)`` returns :func:`result_of` ``(n)``, or raises
    :class:`PlannedFailure` on every run (``fail`` is :data:`ALWAYS`) or on its first attempt (:data:`FIRST`)."""
    options = {"timeout": session_timeout, "connection_retry": dict(FAST_RECONNECT), **(client_options or {})}
    app = RecordingApp(connect, record, retry=RETRY, client_options=options)

    @app.task(name=TASK, queue=QUEUE, retry=RETRY)
    def compute(n: int, fail: str) -> int:
        attempt = _run.attempt
        if fail == ALWAYS or (fail == FIRST and attempt == 1):
            raise PlannedFailure(f"job of {n} fails on purpose (attempt {attempt})")
        time.sleep(WORK_SECONDS)
        return result_of(n)

    return app
