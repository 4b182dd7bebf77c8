"""``ProgressConsumer``: runs the jobs of an indexed source in order of index, at most ``max_processing`` at once,
never more than ``max_search_ahead`` past the processed index, and stores the processed index (which only moves
over consecutive finished jobs) with compare-and-set. Several processes may run the same consumer: one is active
(elected), the others stand by. The threads: one coordinator (``zkqueue-progress``) and ``max_processing``
workers (``zkqueue-progress-worker``).

A term ends when the session is lost (or a write is fenced); the workers it started finish their current run and
retry no more (a retry wait ends with the term). When the process is elected again, the new term starts no job
until those runs have returned: it runs their jobs again, and one job never runs twice at once in one process."""

from __future__ import annotations

import inspect
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from zkqueue.errors import ConfigurationError, JobNotFoundError, JobPrunedError, ProgressFencedError, \
    QueueStateError
from zkqueue.jobs.queue import DEFAULT_STOP_TIMEOUT
from zkqueue.jobs.retry import RetryPolicy
from zkqueue.progress.attempts import JobRun, StuckCallback
from zkqueue.progress.context import JobContext
from zkqueue.progress.inflight import InFlight
from zkqueue.progress.leader import Leadership
from zkqueue.progress.runner import JobRunner, JobTask, ThreadRunner
from zkqueue.progress.store import LEADER, ProgressStore
from zkqueue.progress.window import Window

log = logging.getLogger("zkqueue.progress.consumer")

#: The default retry policy of workers: quick first retries, ``on_stuck`` after 5 failed runs.
DEFAULT_RETRY = RetryPolicy(max_attempts=5, backoff=0.1, max_backoff=30.0)
_ERROR_BACKOFF_MAX = 5.0
#: Shortest wait of the coordinator while the connection is suspended (it wakes at once when the connection
#: comes back): a progress write that is due but cannot be sent never makes it spin.
_SUSPENDED_WAIT = 0.5


class Jobs(Protocol):
    """A jobs source: ``head()`` is the highest index available; ``at_index(i)`` the job at ``i`` (raise
    ``LookupError`` or return None when there is none yet). Optional: ``at_range(start, stop)`` (a list, cut at
    the first missing job), ``watch(callback) -> stop`` (call ``callback()`` on new jobs), and
    ``register_consumer(progress_path, default_index)`` (for pruning)."""

    def head(self) -> int: ...

    def at_index(self, index: int) -> Any: ...


class _SteppedDown(Exception):
    """The coordinator's leadership ended (session lost, or a fenced write)."""


class _WorkerDied(RuntimeError):
    """A worker thread ended without finishing its job or giving it up (a bug): the term ends, and the jobs above
    the stored index run again in the next one."""


class _Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values: dict[str, int] = dict.fromkeys(
            ("jobs_done", "failures", "retries", "stuck", "progress_writes", "handoffs", "skipped_done",
             "source_errors", "callback_errors", "elected", "fenced", "errors", "coordinator_loops"), 0)

    def __call__(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.values[name] = self.values.get(name, 0) + n


@dataclass(frozen=True)
class ProgressStats:
    """Counters of one consumer (this process)."""

    active: bool
    processed_index: int | None
    stored_index: int | None
    running: int
    jobs_done: int
    failures: int
    retries: int
    stuck: int
    progress_writes: int
    handoffs: int
    skipped_done: int
    source_errors: int
    callback_errors: int
    elected: int
    fenced: int
    errors: int
    #: Rounds of the coordinator's loop while active (each one sleeps unless there is work: a spinning
    #: coordinator shows as a fast-growing count).
    coordinator_loops: int


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _seconds(name: str, value: Any, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _takes_context(worker: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(worker).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params)


class ProgressConsumer:
    """Runs ``worker(index, job)`` (or ``worker(index, job, ctx)``, see :class:`JobContext`) for every job of
    ``jobs`` above the stored processed index, in index order, and stores the processed index at
    ``progress_path``.

    - ``max_processing``: jobs running at once; ``max_search_ahead``: how far past the processed index a job may
      start.
    - ``default_index``: the processed index when none is stored (jobs from ``default_index + 1`` run; a
      :class:`~zkqueue.progress.JobLog` starts at 1, so 0 runs them all).
    - ``retry``: the :class:`~zkqueue.jobs.RetryPolicy` of failing workers; a job is retried until it succeeds,
      ``on_stuck(index, error, attempts)`` callbacks hear once when the policy would give up.
    - Progress is written when ``progress_batch`` jobs finished since the last write, or ``progress_interval``
      seconds passed, and when the consumer stops. After a crash the jobs above the stored index run again.
    - ``poll_interval``: how often ``head()`` is read without a ``check()`` (sources without ``watch``).
    - ``with_context``: pass ``ctx`` as a third argument (default: when the worker takes three).
    - ``runner``: where jobs run (:mod:`zkqueue.progress.runner`; default: ``max_processing`` threads).
    """

    def __init__(self, client: KazooClient, jobs: Any, progress_path: str, worker: Callable[..., Any], *,
                 max_processing: int = 8, max_search_ahead: int = 1000, default_index: int = 0,
                 retry: RetryPolicy | None = None, progress_interval: float = 1.0, progress_batch: int = 100,
                 poll_interval: float | None = 5.0, on_stuck: StuckCallback | None = None,
                 with_context: bool | None = None, identifier: str | None = None,
                 runner: JobRunner | None = None) -> None:
        if not callable(getattr(jobs, "head", None)) or not callable(getattr(jobs, "at_index", None)):
            raise ConfigurationError("jobs must have head() and at_index(i)")
        if not callable(worker):
            raise ConfigurationError("worker must be callable: worker(index, job)")
        if not isinstance(progress_path, str) or not progress_path.startswith("/") or progress_path.endswith("/"):
            raise ConfigurationError(f"progress_path must be an absolute path, got {progress_path!r}")
        if isinstance(default_index, bool) or not isinstance(default_index, int) or default_index < -1:
            raise ConfigurationError(f"default_index must be an int >= -1, got {default_index!r}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigurationError("retry must be a zkqueue.jobs.RetryPolicy")
        self.client = client
        self.jobs = jobs
        self.progress_path = progress_path
        self.worker = worker
        self.max_processing = _positive_int("max_processing", max_processing)
        self.max_search_ahead = _positive_int("max_search_ahead", max_search_ahead)
        if self.max_search_ahead < self.max_processing:
            raise ConfigurationError("max_search_ahead must be >= max_processing")
        self.default_index = default_index
        self.retry = retry or DEFAULT_RETRY
        self.progress_interval = _seconds("progress_interval", progress_interval)
        self.progress_batch = _positive_int("progress_batch", progress_batch)
        self.poll_interval = _seconds("poll_interval", poll_interval, allow_none=True)
        self.with_context = _takes_context(worker) if with_context is None else bool(with_context)
        self.identifier = identifier or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._store = ProgressStore(client, progress_path, self.identifier)
        self._leadership = Leadership(client, f"{progress_path}/{LEADER}", self.identifier)
        self._progress_cbs: list[Callable[[int], None]] = []
        self._stuck_cbs: list[StuckCallback] = [on_stuck] if on_stuck else []
        self._error_cbs: list[Callable[[BaseException], None]] = []
        self._count = _Counters()
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._checked = True  # a check() since the last head()
        self._finished: deque[tuple[int, int, bool | None]] = deque()  # (epoch, index, finished; None: died)
        self._handed: set[int] = set()
        self._epoch = 0
        #: Set when the current term ends (or the consumer stops): its runs' retry waits end then.
        self._term_over = threading.Event()
        self._active = False
        self._suspended = False
        self._lost = False
        self._window: Window | None = None
        self._processed: int | None = None
        self._thread: threading.Thread | None = None
        self._runner: JobRunner = runner if runner is not None else ThreadRunner(worker, progress_path)
        self._inflight = InFlight()  # runs handed to the runner and not ended, whichever term started them
        self._unwatch: Callable[[], None] | None = None
        self._state = "new"
        self.last_error: BaseException | None = None

    # ------------------------------------------------------------------------------------------------ public
    def start(self) -> ProgressConsumer:
        """Join the election and, once active, run jobs (returns at once)."""
        if self._state != "new":
            raise QueueStateError(f"consumer is {self._state}; a consumer starts once")
        self._state = "started"
        register = getattr(self.jobs, "register_consumer", None)
        if callable(register):
            register(self.progress_path, self.default_index)
        self.client.add_listener(self._on_state)
        watch = getattr(self.jobs, "watch", None)
        if callable(watch):
            self._unwatch = watch(self.check)
        self._runner.start(self.max_processing)
        self._thread = threading.Thread(target=self._main, name="zkqueue-progress", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = DEFAULT_STOP_TIMEOUT) -> None:
        """Stop starting jobs, let running ones finish their current run, store the processed index, leave the
        election. A job waiting for a retry stays unfinished (it runs again later).

        Returns only once every worker this consumer started has returned, session lost or not: the runs of a
        term that ended (their jobs run again in the next term, here or in another process) are waited for too.
        ``timeout`` bounds the whole stop; past it, stop logs what still runs and returns."""
        if self._state != "started":
            self._state = "closed"
            return
        self._state = "closing"
        deadline = None if timeout is None else time.monotonic() + timeout
        self._stop.set()
        self._term_over.set()
        self._leadership.cancel()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("consumer %s did not stop within %s s", self.progress_path, timeout)
        self._inflight.close()  # a coordinator still going (past the timeout) starts no run after this
        if self._unwatch is not None:
            self._unwatch()
        self.client.remove_listener(self._on_state)
        running = self._inflight.count
        if running:  # runs of a term that ended (a lost session): the coordinator no longer waits for them
            log.info("consumer %s stops: waiting for %d running job(s) to finish", self.progress_path, running)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._inflight.wait_idle(left):
            log.error("consumer %s stops with %d job(s) still running after %s s", self.progress_path,
                      self._inflight.count, timeout)
        self._runner.shutdown()
        self._state = "closed"

    close = stop

    def __enter__(self) -> ProgressConsumer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def check(self) -> None:
        """New jobs may be there: read the source's head soon (at most one check runs at a time)."""
        self._checked = True
        self._wake.set()

    def on_progress(self, callback: Callable[[int], None]) -> None:
        """``callback(processed_index)`` after the processed index moved (coordinator thread)."""
        self._progress_cbs.append(callback)

    def on_stuck(self, callback: StuckCallback) -> None:
        """``callback(index, error, attempts)`` once a job failed as often as the retry policy allows."""
        self._stuck_cbs.append(callback)

    def on_error(self, callback: Callable[[BaseException], None]) -> None:
        """``callback(error)`` for errors of the source, the store or the election (the consumer goes on)."""
        self._error_cbs.append(callback)

    @property
    def processed_index(self) -> int | None:
        """Every job up to this index finished (in this process while active; else the last stored index it
        read or wrote; None before it knows)."""
        return self._processed

    @property
    def stored_index(self) -> int | None:
        """The processed index as last stored or read by this process."""
        return self._store.index

    @property
    def is_active(self) -> bool:
        return self._active

    def leader(self) -> str | None:
        """The identifier of the active process (``host:pid:id``), if any."""
        return self._leadership.leader()

    def wait_processed(self, index: int, timeout: float | None = None) -> bool:
        """Block until ``processed_index >= index``; whether it got there."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._processed is None or self._processed < index:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is None else min(left, 1.0))
            return True

    def stats(self) -> ProgressStats:
        v = dict(self._count.values)
        window = self._window
        return ProgressStats(active=self._active, processed_index=self._processed, stored_index=self._store.index,
                             running=len(window.running) if window else 0, **v)

    # ------------------------------------------------------------------------------------------------ events
    def _on_state(self, state: str) -> None:  # kazoo's connection thread: flags only
        if state == KazooState.LOST:
            self._lost = True
        elif state == KazooState.SUSPENDED:
            self._suspended = True
        else:
            self._suspended = False
        self._wake.set()

    def _report(self, exc: BaseException) -> None:
        self.last_error = exc
        self._count("errors")
        self._notify(self._error_cbs, "on_error", exc)

    def _notify(self, callbacks: list[Callable[..., None]], what: str, *args: Any) -> None:
        """Call each user callback; one that raises is logged and counted, the others still run."""
        for cb in list(callbacks):
            try:
                cb(*args)
            except Exception:
                self._count("callback_errors")
                log.exception("%s callback of %s failed", what, self.progress_path)

    # ------------------------------------------------------------------------------------------------ coordinator
    def _main(self) -> None:
        backoff = 0.1
        try:
            while not self._stop.is_set():
                self._lost = False
                try:
                    fence = self._leadership.campaign()
                except Exception as exc:  # no connection (or the client was closed): try again later
                    log.warning("election of %s failed: %r (again in %.1f s)", self.progress_path, exc, backoff)
                    self._report(exc)
                    self._leadership.resign()
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, _ERROR_BACKOFF_MAX)
                    continue
                if fence is None or self._stop.is_set():
                    self._leadership.resign()
                    break
                self._epoch += 1
                self._term_over = threading.Event()
                if self._stop.is_set():  # stop() may have set the previous term's event
                    self._term_over.set()
                self._count("elected")
                log.info("%s is the active consumer of %s (%s)", self.identifier, self.progress_path, fence)
                try:
                    self._lead(fence)
                    backoff = 0.1
                except _SteppedDown as exc:
                    log.warning("%s stepped down as the active consumer of %s: %s", self.identifier,
                                self.progress_path, exc)
                except Exception as exc:
                    log.exception("consumer %s failed; it steps down and campaigns again", self.progress_path)
                    self._report(exc)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, _ERROR_BACKOFF_MAX)
                finally:
                    self._active = False
                    self._epoch += 1  # workers of that term stop retrying,
                    self._term_over.set()  # and those waiting for a retry stop waiting
                    self._window = None
                    self._leadership.resign()
        except BaseException as exc:  # never die silently
            log.critical("the coordinator of %s died", self.progress_path, exc_info=True)
            self._report(exc)
            raise
        finally:
            with self._cond:
                self._cond.notify_all()

    def _lead(self, fence: str) -> None:
        epoch = self._epoch
        store = self._store
        store.fence = fence
        stored = store.load(self.default_index)
        markers = store.done_above(stored)
        self._handed = set()
        window = Window(stored, self.max_processing, self.max_search_ahead)
        self._window = window
        self._finished.clear()
        self._set_processed(stored)
        self._active = True
        last_write = time.monotonic()
        head = window.processed
        self._checked = True
        last_head = 0.0
        error_wait = 0.1
        missing_wait = 0.05
        # Runs an earlier term of this process started and that have not returned (this term started none yet):
        # their jobs are above the stored index, so this term runs them again. It starts no job until they all
        # returned, or one job would run twice at once here (and more than max_processing would run).
        earlier = self._inflight.count
        if earlier:
            log.info("%s waits for %d run(s) of an earlier term of %s to return before it starts jobs",
                     self.identifier, earlier, self.progress_path)
        while True:
            if self._lost:
                raise _SteppedDown("session lost")
            if self._stop.is_set():
                self._drain(window, epoch)
                if not self._lost:
                    self._flush(window, markers)
                return
            self._count("coordinator_loops")
            self._wake.clear()  # before the look at the runs in flight: a run that returns after it wakes us
            if earlier and self._inflight.count == 0:
                earlier = 0
                log.info("the runs of an earlier term of %s returned: %s starts jobs", self.progress_path,
                         self.identifier)
            if self._collect(window, epoch):
                self._set_processed(window.processed)
            now = time.monotonic()
            pending = store.index is not None and window.processed > store.index
            if pending and not self._suspended and (
                    window.processed - store.index >= self.progress_batch  # type: ignore[operator]
                    or now - last_write >= self.progress_interval):
                self._flush(window, markers)
                last_write = now
                pending = False
            timeout = max(0.0, last_write + self.progress_interval - now) if pending else 60.0
            if self.poll_interval is not None:
                timeout = min(timeout, self.poll_interval)
            if self._suspended:  # a due write waits for the connection: its return wakes us, else a floor
                timeout = max(timeout, _SUSPENDED_WAIT)
            if not earlier and not self._suspended and window.free() > 0:
                poll_due = self.poll_interval is not None and now - last_head >= self.poll_interval
                if window.next_index > head and (self._checked or poll_due):
                    self._checked = False
                    try:
                        head = int(self.jobs.head())
                        error_wait = 0.1
                    except Exception as exc:
                        error_wait = self._source_error("head()", exc, error_wait)
                        continue
                    last_head = now
                if window.next_index <= head:
                    try:
                        complete = self._dispatch(window, head, epoch, fence, markers)
                        error_wait = 0.1
                    except _SteppedDown:
                        raise
                    except JobPrunedError as exc:
                        log.error("consumer %s cannot go on: %s", self.progress_path, exc)
                        error_wait = self._source_error("at_index()", exc, max(error_wait, 1.0))
                        continue
                    except Exception as exc:
                        error_wait = self._source_error("at_index()", exc, error_wait)
                        continue
                    if complete:
                        missing_wait = 0.05
                    else:  # head() said more than at_index() gave: look again soon, not in a hot loop
                        timeout = min(timeout, missing_wait)
                        missing_wait = min(missing_wait * 2, _ERROR_BACKOFF_MAX)
            self._wake.wait(timeout)

    def _source_error(self, what: str, exc: BaseException, wait: float) -> float:
        self._count("source_errors")
        log.warning("jobs source of %s: %s failed: %r (again in %.1f s)", self.progress_path, what, exc, wait)
        self._report(exc)
        self._stop.wait(wait)
        return min(wait * 2, _ERROR_BACKOFF_MAX)

    def _dispatch(self, window: Window, head: int, epoch: int, fence: str, markers: set[int]) -> bool:
        """Start jobs from ``window.next_index`` while there is room; False if one up to ``head`` was missing."""
        while window.free() > 0 and window.next_index <= head:
            start = window.next_index
            stop = min(head, window.limit()) + 1
            if start in markers:
                window.skip(start)
                self._count("skipped_done")
                log.info("job %d finished in a hand-off before: not run again", start)
                continue
            n = min(window.free(), stop - start)
            jobs = self._fetch(start, start + n)[:n]  # a source may give more than it was asked for
            if not jobs:
                self._checked = True  # head said more: read it again later
                return False
            for job in jobs:
                i = window.next_index
                if i in markers:
                    break
                task = self._task(epoch, fence, i, job)
                try:
                    window.start(i)
                    self._runner.submit(task)
                except BaseException:
                    task.finished(None)  # never ran: the term ends and the job runs again
                    raise
        return True

    def _fetch(self, start: int, stop: int) -> list[Any]:
        at_range = getattr(self.jobs, "at_range", None)
        try:
            if callable(at_range) and stop - start > 1:
                return list(at_range(start, stop))
            job = self.jobs.at_index(start)
        except JobPrunedError:
            raise
        except (JobNotFoundError, LookupError):
            return []
        return [] if job is None else [job]

    def _collect(self, window: Window, epoch: int, stopping: bool = False) -> bool:
        """Count the jobs whose runs ended; whether the processed index moved. :class:`_WorkerDied` if a worker
        thread died with its job (unless ``stopping``): that job would never run again in this term."""
        moved = False
        died: int | None = None
        while self._finished:
            e, index, ok = self._finished.popleft()
            if e != epoch or index not in window.running:
                continue
            if ok:
                moved |= window.finish(index)
                self._count("jobs_done")
            else:  # abandoned (stop or a lost term), or its thread died: stays unfinished, runs again later
                window.running.discard(index)
                if ok is None and died is None:
                    died = index
        if died is not None and not stopping:
            raise _WorkerDied(f"the worker thread of job {died} died; the consumer steps down and runs the jobs "
                              f"above the stored index again")
        return moved

    def _set_processed(self, index: int) -> None:
        with self._cond:
            self._processed = index
            self._cond.notify_all()
        self._notify(self._progress_cbs, "on_progress", index)

    def _flush(self, window: Window, markers: set[int]) -> None:
        store = self._store
        if store.index is not None and window.processed <= store.index:
            return
        try:
            store.write(window.processed)
        except ProgressFencedError as exc:
            self._count("fenced")
            raise _SteppedDown(str(exc)) from exc
        self._count("progress_writes")
        covered = [i for i in (markers | self._handed) if i <= window.processed]
        if covered:
            markers.difference_update(covered)
            self._handed.difference_update(covered)
            store.drop_markers(covered)

    def _drain(self, window: Window, epoch: int) -> None:
        """On stop: wait for the running jobs' current runs to end, and count the finished ones."""
        while window.running and not self._lost:
            self._wake.clear()
            if self._collect(window, epoch, stopping=True):
                self._set_processed(window.processed)
            if window.running:
                self._wake.wait(0.1)

    # ------------------------------------------------------------------------------------------------ workers
    def _keep_going(self, epoch: int) -> bool:
        return self._epoch == epoch and not self._stop.is_set() and not self._lost

    def _task(self, epoch: int, fence: str, index: int, job: Any) -> JobTask:
        """Job ``index`` for the runner: its attempts (that stop when this term or the consumer ends), its context,
        and the report of its end (picked up by the coordinator). :class:`_SteppedDown` once stop() has stopped
        waiting for runs (no run may start that stop would not wait for)."""
        if not self._inflight.add():
            raise _SteppedDown("the consumer is stopping")
        term_over = self._term_over

        def opener() -> tuple[JobRun, JobContext | None]:
            run = JobRun(index, self.retry, self._stuck_cbs, lambda: self._keep_going(epoch), term_over.wait,
                         self._count)
            return run, JobContext(index, run, self._store, fence, self._handed_off) if self.with_context else None

        once = threading.Lock()

        def finished(ok: bool | None) -> None:
            if not once.acquire(blocking=False):  # counted once per task, whatever the runner does
                return
            self._inflight.done()  # before the coordinator can see it: a drained stop finds nothing running
            self._finished.append((epoch, index, ok))
            self._wake.set()

        return JobTask(index, job, opener, finished)

    def _handed_off(self, index: int) -> None:
        self._handed.add(index)
        self._count("handoffs")
