"""``zkqueue jobs ...``: add, look at, cancel and redrive the jobs of a job queue, pause and resume it, list its queued
and running jobs and its repeating jobs (:mod:`zkqueue.jobs`)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import click

from zkqueue._extras import require
from zkqueue.errors import ZkQueueError
from zkqueue.ops.connect import client_for

log = logging.getLogger("zkqueue.ops.jobs_cli")


@contextlib.contextmanager
def _job_queue(connect: str, auth: str | None, acl: str | None, path: str) -> Iterator[Any]:
    from zkqueue.jobs import JobQueue  # noqa: PLC0415

    client = client_for(connect, auth, acl)
    try:
        with JobQueue(client, path) as jq:
            yield jq
    except ZkQueueError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        client.stop()
        client.close()


@contextlib.contextmanager
def _looking_at(connect: str, auth: str | None, acl: str | None, path: str) -> Iterator[Any]:
    """The job queue at ``path``, not started (reads only: nothing is created, no election joined); exit 1 if no
    job queue is there."""
    from zkqueue.jobs import JobQueue  # noqa: PLC0415
    from zkqueue.ops.depth import kind_of  # noqa: PLC0415

    client = client_for(connect, auth, acl)
    try:
        if kind_of(client, path) != "jobs":
            raise click.ClickException(f"no job queue at {path}")
        yield JobQueue(client, path)
    except ZkQueueError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        client.stop()
        client.close()


def _job_dict(job: Any) -> dict[str, Any]:
    return {
        "id": job.id, "state": job.state.value, "attempts": job.attempts, "params": job.params, "result": job.result,
        "priority": job.priority, "created_at": job.created_at, "updated_at": job.updated_at,
        "progress": job.progress, "headers": job.headers,
        "errors": [{"attempt": e.attempt, "error": e.error} for e in job.errors],
    }


def _progress(value: Any) -> str:
    return "-" if value is None else json.dumps(value, default=str)


def _job_line(job: Any, *extra: str) -> str:
    return "\t".join([job.id, job.state.value, f"attempts={job.attempts}", f"priority={job.priority}", *extra])


#: What ``zkqueue jobs cancel`` prints for each id.
CANCELLED, REQUESTED, NOT_FOUND = "cancelled", "cancel requested (running)", "not found or finished"


def _cancel_one(jq: Any, job_id: str) -> str:
    """Cancel ``job_id``: :data:`CANCELLED` (it was waiting: now CANCELLED), :data:`REQUESTED` (it is running: its
    handler was asked to stop; it ends CANCELLED when it does) or :data:`NOT_FOUND` (unknown or already finished)."""
    if not jq.cancel(job_id):
        return NOT_FOUND
    job = jq.get(job_id)
    return CANCELLED if job is not None and job.state.value == "CANCELLED" else REQUESTED


def _stamp(when: Any) -> str:
    return "-" if when is None else when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _repeats_table(path: str, repeats: list[Any]) -> Any:
    Table = require("rich.table", what="zkqueue jobs repeats").Table

    table = Table(title=f"repeating jobs of {path}", caption="times in UTC; job ids are <name>@<fire time>")
    for name in ("name", "schedule", "tz", "catch_up", "last fired", "next fire"):
        table.add_column(name, no_wrap=name in ("name", "last fired", "next fire"))
    for r in repeats:
        table.add_row(r.name, r.schedule, r.tz, r.catch_up, _stamp(r.last_fired), _stamp(r.next_fire))
    return table


def _ids(job_ids: tuple[str, ...], every: bool) -> list[str] | None:
    if every and job_ids:
        raise click.UsageError("give job ids or --all, not both")
    if not every and not job_ids:
        raise click.UsageError("give job ids, or --all for every dead job")
    return None if every else list(job_ids)


def register(main: click.Group, connect_option: Any) -> None:
    """Add the ``jobs`` group to the ``zkqueue`` command."""

    @main.group()
    def jobs() -> None:
        """Job queues: add jobs, look at them, cancel them, pause and resume a queue, list queued and running jobs,
        redrive or purge dead letters, list repeating jobs."""

    @jobs.command("add")
    @connect_option
    @click.argument("path")
    @click.argument("params")
    @click.option("--id", "job_id", default=None, help="The job id (default: a new random one).")
    @click.option("--delay", type=float, default=None, help="Seconds before the job may run.")
    @click.option("--priority", type=int, default=0, show_default=True, help="Lower runs first.")
    def add(connect: str, auth: str | None, acl: str | None, path: str, params: str, job_id: str | None,
            delay: float | None, priority: int) -> None:
        """Add a job with PARAMS (JSON) to the job queue at PATH; print its id (exit 1 if that id is unfinished)."""
        try:
            value = json.loads(params)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="PARAMS") from exc
        with _job_queue(connect, auth, acl, path) as jq:
            added = jq.add(value, job_id=job_id, delay=delay, priority=priority)
        if added is None:
            raise click.ClickException(f"job {job_id!r} is already queued, active or retrying")
        click.echo(added)

    @jobs.command("get")
    @connect_option
    @click.argument("path")
    @click.argument("job_id")
    def get(connect: str, auth: str | None, acl: str | None, path: str, job_id: str) -> None:
        """Print the job JOB_ID as JSON, with its progress (null until its handler reports one) and headers (exit 1
        if unknown)."""
        with _job_queue(connect, auth, acl, path) as jq:
            job = jq.get(job_id)
        if job is None:
            raise click.ClickException(f"no job {job_id!r} in {path}")
        click.echo(json.dumps(_job_dict(job), indent=2, default=str))

    @jobs.command("counts")
    @connect_option
    @click.argument("path")
    def counts(connect: str, auth: str | None, acl: str | None, path: str) -> None:
        """Jobs by state (queued, active, retrying, scheduled, dead, completed, cancelled), and whether the queue is
        paused (yes/no)."""
        with _job_queue(connect, auth, acl, path) as jq:
            result = jq.counts()
            paused = jq.paused
        for key, value in result.items():
            click.echo(f"{key:10} {value}")
        click.echo(f"{'paused':10} {'yes' if paused else 'no'}")

    @jobs.command("dead")
    @connect_option
    @click.argument("path")
    @click.option("--limit", type=int, default=50, show_default=True)
    def dead(connect: str, auth: str | None, acl: str | None, path: str, limit: int) -> None:
        """The dead letters, the latest first, with their last error."""
        with _job_queue(connect, auth, acl, path) as jq:
            letters = jq.dead_letters(limit)
        for job in letters:
            click.echo(f"{job.id}\tattempts={job.attempts}\t{job.last_error or ''}")

    @jobs.command("cancel")
    @connect_option
    @click.argument("path")
    @click.argument("job_ids", nargs=-1, required=True)
    @click.pass_context
    def cancel(ctx: click.Context, connect: str, auth: str | None, acl: str | None, path: str,
               job_ids: tuple[str, ...]) -> None:
        """Cancel the jobs JOB_IDS of the job queue at PATH; print one line per id: "cancelled" (it was queued,
        scheduled or waiting for a retry: now CANCELLED, its id free again), "cancel requested (running)" (its
        handler is asked to stop; the job ends CANCELLED when it does) or "not found or finished". Exit 0 if at least
        one id was cancelled or asked to cancel, 1 if none was found."""
        with _job_queue(connect, auth, acl, path) as jq:
            outcomes = [(job_id, _cancel_one(jq, job_id)) for job_id in job_ids]
        for job_id, outcome in outcomes:
            click.echo(f"{job_id}\t{outcome}")
        if all(outcome == NOT_FOUND for _id, outcome in outcomes):
            ctx.exit(1)

    def pause_command(name: str, doc: str, action: str, done: str) -> None:
        @jobs.command(name, help=doc)
        @connect_option
        @click.argument("path")
        def command(connect: str, auth: str | None, acl: str | None, path: str) -> None:
            with _job_queue(connect, auth, acl, path) as jq:
                getattr(jq, action)()
            click.echo(f"{done} {path}")

    pause_command("pause", "Pause the job queue at PATH: adds go on, no worker of any process starts a job until "
                  "`zkqueue jobs resume`; running jobs finish. Idempotent.", "pause", "paused")
    pause_command("resume", "Resume the job queue at PATH after `zkqueue jobs pause`: workers start jobs again. "
                  "Idempotent.", "resume", "resumed")

    @jobs.command("queued")
    @connect_option
    @click.argument("path")
    @click.option("--limit", type=click.IntRange(1), default=100, show_default=True)
    def queued(connect: str, auth: str | None, acl: str | None, path: str, limit: int) -> None:
        """The jobs waiting to run (queued or waiting for a retry) in the order workers take them: id, state,
        attempts, priority. Jobs parked for later are counted as scheduled by `zkqueue jobs counts`, not listed.
        Read only."""
        with _looking_at(connect, auth, acl, path) as jq:
            found = jq.queued(limit)
        for job in found:
            click.echo(_job_line(job))
        if not found:
            click.echo(f"no queued jobs in {path}", err=True)

    @jobs.command("running")
    @connect_option
    @click.argument("path")
    def running(connect: str, auth: str | None, acl: str | None, path: str) -> None:
        """The jobs held by workers now, with the progress their handlers reported ("-" until one is): id, state
        (ACTIVE; QUEUED or RETRYING while claimed ahead and about to start), attempts, priority, progress. Read
        only."""
        with _looking_at(connect, auth, acl, path) as jq:
            found = jq.in_progress()
        for job in found:
            click.echo(_job_line(job, f"progress={_progress(job.progress)}"))
        if not found:
            click.echo(f"no running jobs in {path}", err=True)

    def dead_command(name: str, doc: str, verb: str, action: str) -> None:
        @jobs.command(name, help=doc)
        @connect_option
        @click.argument("path")
        @click.argument("job_ids", nargs=-1)
        @click.option("--all", "every", is_flag=True, help="Every dead job.")
        def command(connect: str, auth: str | None, acl: str | None, path: str, job_ids: tuple[str, ...],
                    every: bool) -> None:
            ids = _ids(job_ids, every)
            with _job_queue(connect, auth, acl, path) as jq:
                click.echo(f"{verb} {getattr(jq, action)(ids)}")

    @jobs.command("repeats")
    @connect_option
    @click.argument("path")
    def repeats(connect: str, auth: str | None, acl: str | None, path: str) -> None:
        """The repeating jobs of the job queue at PATH: schedule, time zone, catch_up, last and next fire time.
        Read only: no scheduler is started."""
        Console = require("rich.console", what="zkqueue jobs repeats").Console

        with _looking_at(connect, auth, acl, path) as jq:
            found = jq.repeats()  # not started: reads only
        if not found:
            click.echo(f"no repeating jobs in {path}")
            return
        console = Console()
        if not console.is_terminal:
            console = Console(width=160)  # piped: one line per repeat, nothing cut
        console.print(_repeats_table(path, found))

    dead_command("retry-dead", "Queue dead jobs again as fresh runs.", "requeued", "retry_dead")
    dead_command("purge-dead", "Delete dead jobs.", "purged", "purge_dead")
