"""``zkqueue worker module:app`` runs an app's tasks (:mod:`zkqueue.tasks.worker`); ``zkqueue workers`` lists the
live workers of an app."""

from __future__ import annotations

import datetime
import json
import logging
import queue
import sys
from logging.handlers import QueueHandler, QueueListener
from typing import Any

import click

from zkqueue.errors import ZkQueueError

log = logging.getLogger("zkqueue.ops.worker_cli")


def _app(spec: str) -> Any:
    from zkqueue.tasks.worker import load_app  # noqa: PLC0415

    try:
        return load_app(spec)
    except ZkQueueError as exc:
        raise click.ClickException(str(exc)) from exc


def _queues(value: str | None) -> list[str] | None:
    return [q.strip() for q in value.split(",") if q.strip()] if value else None


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--queues", "-Q", default=None, help="Comma-separated queues (default: every queue of the app's tasks).")
@click.option("--concurrency", "-c", default=1, show_default=True, type=click.IntRange(1, 10_000),
              help="Jobs running at once.")
@click.option("--pool", default="thread", show_default=True, type=click.Choice(["thread", "process"]),
              help="Where sync tasks run: threads, or child processes for CPU-bound tasks (async tasks run on the "
              "worker's event loop).")
@click.option("--prefetch", default=None, type=click.IntRange(0),
              help="Jobs held ahead of free slots, with no attempt counted until they start (default: "
              "max(concurrency, 32); 0: claim only for free slots).")
@click.option("--start-ahead", default=0, show_default=True, type=click.IntRange(0),
              help="Held jobs whose attempts are counted with the ones starting, so that freed slots fill without "
              "a round trip each: for short tasks (only while tasks average 0.25 s or less, and only jobs with an "
              "attempt to spare). A worker that dies costs each such job an attempt.")
@click.option("--burst", is_flag=True, help="Exit 0 once the queues hold no job that is queued and due, running or "
              "waiting for a retry.")
@click.option("--max-jobs", default=None, type=click.IntRange(1), help="Exit after running this many jobs.")
@click.option("--shutdown-timeout", default=30.0, show_default=True, type=click.FloatRange(0),
              help="Seconds running jobs get to finish on SIGTERM/SIGINT before they are given back.")
@click.option("--quiet", "-q", is_flag=True, help="No line per job (start and stop lines and warnings only).")
def worker(app_spec: str, queues: str | None, concurrency: int, pool: str, prefetch: int | None, start_ahead: int,
           burst: bool, max_jobs: int | None, shutdown_timeout: float, quiet: bool) -> None:
    """Run the tasks of the app MODULE:APP (e.g. myapp.tasks:app) until SIGTERM/SIGINT (a warm shutdown; a second
    signal is a cold one, exit 1), --burst or --max-jobs."""
    from zkqueue.tasks.worker import serve  # noqa: PLC0415

    for name in ("zkqueue.tasks.worker", "zkqueue.runtime.worker"):
        logger = logging.getLogger(name)
        if not logger.isEnabledFor(logging.INFO):
            logger.setLevel(logging.INFO)
    listener = _log_from_a_thread()
    try:
        app = _app(app_spec)
        try:
            code = serve(app, _queues(queues), spec=app_spec, pool=pool, concurrency=concurrency,
                         prefetch=prefetch, burst=burst, max_jobs=max_jobs, shutdown_timeout=shutdown_timeout,
                         log_jobs=not quiet, start_ahead=start_ahead)
        except ZkQueueError as exc:
            raise click.ClickException(str(exc)) from exc
        finally:
            app.close()
    finally:
        listener.stop()  # writes what is still queued
    sys.exit(code)


class _InProcessQueueHandler(QueueHandler):
    """A QueueHandler for a listener in this process: records are queued as they are, and formatted once, by the
    listener's handlers (the standard ``prepare`` formats and copies each record on the logging thread, for
    listeners in other processes)."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


def _log_from_a_thread() -> QueueListener:
    """Hand the root logger's records to a thread that writes them (the standard library's QueueHandler and
    QueueListener): a worker logs two lines per job, and writing them on the threads that start and end jobs
    slowed a worker of trivial jobs to about half its rate."""
    root = logging.getLogger()
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = QueueListener(records, *root.handlers, respect_handler_level=True)
    root.handlers = [_InProcessQueueHandler(records)]
    listener.start()
    return listener


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per worker.")
def workers(app_spec: str, as_json: bool) -> None:
    """List the live workers of the app MODULE:APP: host, pid, queues, pool, concurrency, start and running jobs."""
    from zkqueue.tasks.live import live_workers  # noqa: PLC0415

    app = _app(app_spec)
    try:
        found = live_workers(app.client, app.workers_path)
    except ZkQueueError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        app.close()
    for w in found:
        if as_json:
            click.echo(json.dumps({"name": w.name, "host": w.host, "pid": w.pid, "queues": list(w.queues),
                                   "pool": w.pool, "concurrency": w.concurrency, "started": w.started,
                                   "running": list(w.running)}))
            continue
        started = datetime.datetime.fromtimestamp(w.started, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
        click.echo(f"{w.name}  queues={','.join(w.queues)}  pool={w.pool}x{w.concurrency}  started={started}  "
                   f"running={len(w.running)}{' ' + ','.join(w.running[:5]) if w.running else ''}")
    if not found and not as_json:
        click.echo("no live workers", err=True)


def register(main: Any) -> None:
    main.add_command(worker)
    main.add_command(workers)
