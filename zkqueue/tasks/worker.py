"""Workers of an app's tasks: what ``zkqueue worker module:app`` runs (:func:`serve`), and :class:`TaskWorker` for
running them inside a program of your own.

A task worker is the worker runtime (:mod:`zkqueue.runtime`) over the app's queues: each job's task is looked up
by the name in its record (:meth:`App.resolve <zkqueue.tasks.App.resolve>`); an async task runs on the worker's
event loop, a sync one on the pool (threads, or child processes for CPU-bound tasks), with the task's retry policy
and timeout. A job whose task this app does not know fails at once, never retried.

A job of a canvas (chain, group, chord: its header names the canvas and node) ends by the canvas hand-off instead
of the job layer's completion (:mod:`zkqueue.flows.canvas_ends`): the workers claim under item leases, since that
end is a fenced multi of its own. A success's hand-off is committed off the task's thread, with the other ends of
its canvas that came meanwhile (:class:`~zkqueue.flows.committer.EndCommitter`): the slot is free as the task
returns. ``zkqueue worker`` also reaps the finished canvases beyond ``Keep()`` every
:data:`CANVAS_REAP_INTERVAL` seconds.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from zkqueue.errors import ConfigurationError, UnknownTaskError
from zkqueue.flows import canvas_ends
from zkqueue.flows.canvas_graph import HEADER
from zkqueue.flows.committer import EndCommitter
from zkqueue.jobs.model import Job
from zkqueue.jobs.queue import DEFAULT_STOP_TIMEOUT, JobQueue
from zkqueue.runtime import AsyncioDriver, Route, Worker, pool_driver
from zkqueue.tasks import naming
from zkqueue.tasks.app import App
from zkqueue.tasks.live import Registration

log = logging.getLogger("zkqueue.tasks.worker")

#: Seconds between the burst checks and registry updates of a running ``zkqueue worker``.
TICK = 0.5
#: Seconds between two reaps of the finished canvases beyond ``Keep()`` by a running ``zkqueue worker``.
CANVAS_REAP_INTERVAL = 60.0
#: Threads committing a worker's canvas hand-offs (each takes every end queued when it starts; the ends of one
#: canvas share a multi).
CANVAS_END_THREADS = 2


def load_app(spec: str) -> App:
    """The :class:`App` named by ``spec``: ``"package.module:attribute"`` (``":app"`` may be left out). The current
    directory is importable, as for ``celery -A`` and ``rq worker``."""
    module_name, _, attribute = spec.partition(":")
    if not module_name:
        raise ConfigurationError(f"an app is given as module:attribute (e.g. myapp.tasks:app), got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r} for the app {spec!r}: {exc}") from exc
    app = getattr(module, attribute or "app", None)
    if not isinstance(app, App):
        raise ConfigurationError(f"{spec!r} is not a zkqueue.App (found {type(app).__name__})")
    return app


class TaskCall:
    """Runs a job's task in a child process of the process pool: picklable (it carries the app's spec and loads
    the app once per child), unlike the app itself."""

    _apps: dict[str, App] = {}

    def __init__(self, spec: str) -> None:
        self.spec = spec

    def __call__(self, job: Job) -> Any:
        app = TaskCall._apps.get(self.spec)
        if app is None:
            app = TaskCall._apps[self.spec] = load_app(self.spec)
        return app.resolve(job).call(job)


class TaskWorker:
    """The tasks of ``app`` from ``queues`` (default: every queue the app's tasks name) on one worker runtime.

    ``pool``: ``"thread"`` or ``"process"`` for sync tasks (a process pool needs ``spec``, the app's
    ``module:attribute``, for its children to load the app); async tasks run on an event loop. ``concurrency``,
    ``prefetch``, ``max_jobs``: see :class:`~zkqueue.runtime.Worker`. ``log_jobs``: a log line per job start and
    end. ``start_ahead`` (default 0): held jobs whose attempts are counted in the multi that starts others, so slots
    that free meanwhile fill without a round trip each (see :class:`~zkqueue.runtime.Worker`: only while tasks are
    short, only jobs that keep an attempt after it); a worker that dies costs each such job an attempt."""

    def __init__(self, app: App, queues: Sequence[str] | None = None, *, pool: str = "thread",
                 concurrency: int = 1, prefetch: int | None = None, max_jobs: int | None = None,
                 spec: str | None = None, log_jobs: bool = False, start_ahead: int = 0) -> None:
        names = list(queues) if queues else sorted({task.queue for task in app.tasks.values()})
        if not names:
            raise ConfigurationError("no queues to work on: the app has no tasks; give --queues")
        if pool == "process" and spec is None:
            raise ConfigurationError("a process pool needs the app's spec (module:attribute) for its children")
        self.app = app
        self.queue_names = names
        self.pool = pool
        self._sync = pool_driver(pool)
        self._async = AsyncioDriver() if any(t.is_async for t in app.tasks.values()) else None
        self._call: Any = TaskCall(spec) if pool == "process" else None
        self._end_pool: ThreadPoolExecutor | None = None  # where async tasks' canvas ends are decided (not the loop)
        self._canvas_ends: EndCommitter[canvas_ends.QueuedEnd] | None = None  # commits canvas hand-offs, batched
        self._canvas_lock = threading.Lock()
        drivers = [self._sync] + ([self._async] if self._async is not None else [])
        self.worker = Worker([app.queue(name) for name in names], self._route, drivers, concurrency=concurrency,
                             prefetch=prefetch, max_jobs=max_jobs, name="zkqueue-worker", log_jobs=log_jobs,
                             block_leases=False,  # item leases: a canvas job's end is a fenced multi of its own
                             start_ahead=start_ahead)

    def _route(self, queue: JobQueue, job: Job) -> Route:
        if job.headers and HEADER in job.headers:
            return self._canvas_route(queue, job)
        task = self.app.resolve(job)  # UnknownTaskError: the attempt fails, never retried
        if task.is_async:
            if self._async is None:  # a task registered after the worker started
                raise ConfigurationError(f"task {task.name} is async; the worker started without an event loop")
            return Route(self._async, task.call, task.retry, timeout=task.timeout)
        return Route(self._sync, self._call or task.call, task.retry, timeout=task.timeout)

    def _canvas_route(self, queue: JobQueue, job: Job) -> Route:
        """A canvas node's job: its task's route, ended by the canvas hand-off (:mod:`zkqueue.flows.canvas_ends`).
        A task this app does not know makes the node dead at once (the canvas learns of it)."""
        canvases = self.app.canvases()
        name = naming.queue_of_path(self.app.namespace, queue.paths.root) or queue.paths.root
        try:
            task = self.app.resolve(job)
        except UnknownTaskError:
            return Route(self._sync, canvas_ends.unknown_task,
                         end=functools.partial(canvas_ends.end_attempt, canvases, queue, name, None))
        with self._canvas_lock:
            if self._canvas_ends is None:
                self._canvas_ends = EndCommitter(functools.partial(canvas_ends.commit_many, canvases),
                                                 "zkqueue-worker-canvas", threads=CANVAS_END_THREADS)
        end = functools.partial(canvas_ends.end_attempt, canvases, queue, name, task.retry,
                                committer=self._canvas_ends)
        if task.is_async:
            if self._async is None:
                raise ConfigurationError(f"task {task.name} is async; the worker started without an event loop")
            with self._canvas_lock:
                if self._end_pool is None:
                    self._end_pool = ThreadPoolExecutor(4, thread_name_prefix="zkqueue-canvas-end")
            return Route(self._async, task.call, task.retry, end=end, timeout=task.timeout,
                         end_executor=self._end_pool)
        call = self._call or canvas_ends.CanvasCall(canvases, task.call)  # threads look at the canvas first
        return Route(self._sync, call, task.retry, end=end, timeout=task.timeout)

    def start(self) -> TaskWorker:
        self.worker.start()
        return self

    def stop(self, timeout: float | None = DEFAULT_STOP_TIMEOUT) -> bool:
        """Stop as :meth:`Worker.stop <zkqueue.runtime.Worker.stop>` does; True for a warm stop."""
        warm = self.worker.stop(timeout)
        if self._end_pool is not None:
            self._end_pool.shutdown(wait=True)
        if self._canvas_ends is not None:  # the canvas hand-offs still queued commit now
            self._canvas_ends.close()
        return warm

    def outstanding(self) -> int:
        """Jobs of its queues still to run: queued and due, running, or waiting for a retry."""
        return sum(self.app.queue(name).outstanding() for name in self.queue_names)

    def __enter__(self) -> TaskWorker:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


def _drained(tw: TaskWorker) -> bool:
    try:
        return tw.outstanding() == 0
    except Exception:  # noqa: BLE001 - e.g. a leader election: look again at the next tick
        log.warning("burst: counting the jobs left failed; looking again", exc_info=True)
        return False


def serve(app: App, queues: Sequence[str] | None, *, spec: str, pool: str = "thread", concurrency: int = 1,
          prefetch: int | None = None, burst: bool = False, max_jobs: int | None = None, shutdown_timeout: float = DEFAULT_STOP_TIMEOUT,
          log_jobs: bool = True, start_ahead: int = 0) -> int:
    """Run a worker in this process until a signal, ``burst`` (nothing left to run) or ``max_jobs``; the exit code.

    SIGTERM or SIGINT: a warm shutdown (no more claims, held jobs given back uncounted, running jobs finish within
    ``shutdown_timeout``, exit 0). A second signal: a cold shutdown (running jobs given back, their attempt
    counted; exit 1). Registers the worker under the app's ``workers`` node while it runs."""
    tw = TaskWorker(app, queues, pool=pool, concurrency=concurrency, prefetch=prefetch, max_jobs=max_jobs,
                    spec=spec, log_jobs=log_jobs, start_ahead=start_ahead)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        if stop.is_set():
            log.warning("second signal (%s): cold shutdown, running jobs are given back", signal.Signals(signum).name)
            tw.worker.kill()
        else:
            log.warning("signal %s: warm shutdown (again for a cold one)", signal.Signals(signum).name)
            stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    registration = Registration(app.client, app.workers_path, queues=tw.queue_names, pool=pool,
                                concurrency=concurrency)
    log.info("worker %s started: queues %s, %s pool, concurrency %d%s%s", registration.info.name,
                ",".join(tw.queue_names), pool, concurrency, f", start ahead {start_ahead}" if start_ahead else "",
                ", burst" if burst else "")
    warm = False
    try:
        tw.start()
        next_reap = time.monotonic() + CANVAS_REAP_INTERVAL
        while not stop.wait(TICK):
            if time.monotonic() >= next_reap:
                next_reap = time.monotonic() + CANVAS_REAP_INTERVAL
                try:
                    app.canvases().reap()
                except Exception:  # noqa: BLE001 - finished canvases wait for the next round
                    log.warning("reaping finished canvases failed; again in %.0fs", CANVAS_REAP_INTERVAL,
                                exc_info=True)
            try:
                registration.update(tw.worker.running_ids())
            except Exception:  # noqa: BLE001 - the registry is for looking; the jobs go on
                log.warning("updating the worker's registry node failed", exc_info=True)
            if tw.worker.stopping:  # max_jobs run
                break
            if burst and tw.worker.idle() and _drained(tw):
                log.info("burst: nothing left to run")
                break
    finally:  # however the loop ends (a signal, burst, an error of ours), the jobs are stopped properly
        warm = tw.stop(shutdown_timeout)
        registration.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("worker %s stopped (%s): %s", registration.info.name, "warm" if warm else "cold",
                tw.worker.stats())
    return 0 if warm else 1


__all__ = ["TaskCall", "TaskWorker", "load_app", "serve"]
