"""Workers of an app's tasks: what ``zkqueue worker module:app`` runs (:func:`serve`), and :class:`TaskWorker` for
running them inside a program of your own.

A task worker is the worker runtime (:mod:`zkqueue.runtime`) over the app's queues: each job's task is looked up
by the name in its record (:meth:`App.resolve <zkqueue.tasks.App.resolve>`); an async task runs on the worker's
event loop, a sync one on the pool (threads, or child processes for CPU-bound tasks), with the task's retry policy
and timeout. A job whose task this app does not know fails at once, never retried.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
from typing import Any, Sequence

from zkqueue.errors import ConfigurationError
from zkqueue.jobs.model import Job
from zkqueue.jobs.queue import DEFAULT_STOP_TIMEOUT, JobQueue
from zkqueue.runtime import AsyncioDriver, Route, Worker, pool_driver
from zkqueue.tasks.app import App
from zkqueue.tasks.live import Registration

log = logging.getLogger("zkqueue.tasks.worker")

#: Seconds between the burst checks and registry updates of a running ``zkqueue worker``.
TICK = 0.5


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
    end."""

    def __init__(self, app: App, queues: Sequence[str] | None = None, *, pool: str = "thread",
                 concurrency: int = 1, prefetch: int | None = None, max_jobs: int | None = None,
                 spec: str | None = None, log_jobs: bool = False) -> None:
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
        drivers = [self._sync] + ([self._async] if self._async is not None else [])
        self.worker = Worker([app.queue(name) for name in names], self._route, drivers, concurrency=concurrency,
                             prefetch=prefetch, max_jobs=max_jobs, name="zkqueue-worker", log_jobs=log_jobs)

    def _route(self, queue: JobQueue, job: Job) -> Route:
        task = self.app.resolve(job)  # UnknownTaskError: the attempt fails, never retried
        if task.is_async:
            if self._async is None:  # a task registered after the worker started
                raise ConfigurationError(f"task {task.name} is async; the worker started without an event loop")
            return Route(self._async, task.call, task.retry, timeout=task.timeout)
        return Route(self._sync, self._call or task.call, task.retry, timeout=task.timeout)

    def start(self) -> TaskWorker:
        self.worker.start()
        return self

    def stop(self, timeout: float | None = DEFAULT_STOP_TIMEOUT) -> bool:
        """Stop as :meth:`Worker.stop <zkqueue.runtime.Worker.stop>` does; True for a warm stop."""
        return self.worker.stop(timeout)

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
          log_jobs: bool = True) -> int:
    """Run a worker in this process until a signal, ``burst`` (nothing left to run) or ``max_jobs``; the exit code.

    SIGTERM or SIGINT: a warm shutdown (no more claims, held jobs given back uncounted, running jobs finish within
    ``shutdown_timeout``, exit 0). A second signal: a cold shutdown (running jobs given back, their attempt
    counted; exit 1). Registers the worker under the app's ``workers`` node while it runs."""
    tw = TaskWorker(app, queues, pool=pool, concurrency=concurrency, prefetch=prefetch, max_jobs=max_jobs,
                    spec=spec, log_jobs=log_jobs)
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
    log.info("worker %s started: queues %s, %s pool, concurrency %d%s", registration.info.name,
                ",".join(tw.queue_names), pool, concurrency, ", burst" if burst else "")
    warm = False
    try:
        tw.start()
        while not stop.wait(TICK):
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
