"""``zkqueue jobs ...``: add, look at and redrive the jobs of a job queue, and list its repeating jobs
(:mod:`zkqueue.jobs`)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import click

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


def _job_dict(job: Any) -> dict[str, Any]:
    return {
        "id": job.id, "state": job.state.value, "attempts": job.attempts, "params": job.params, "result": job.result,
        "priority": job.priority, "created_at": job.created_at, "updated_at": job.updated_at,
        "errors": [{"attempt": e.attempt, "error": e.error} for e in job.errors],
    }


def _stamp(when: Any) -> str:
    return "-" if when is None else when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _repeats_table(path: str, repeats: list[Any]) -> Any:
    from rich.table import Table  # noqa: PLC0415

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
        """Job queues: add jobs, look at them, redrive or purge dead letters, list repeating jobs."""

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
        """Print the job JOB_ID as JSON (exit 1 if unknown)."""
        with _job_queue(connect, auth, acl, path) as jq:
            job = jq.get(job_id)
        if job is None:
            raise click.ClickException(f"no job {job_id!r} in {path}")
        click.echo(json.dumps(_job_dict(job), indent=2, default=str))

    @jobs.command("counts")
    @connect_option
    @click.argument("path")
    def counts(connect: str, auth: str | None, acl: str | None, path: str) -> None:
        """Jobs by state: queued, active, retrying, dead, completed."""
        with _job_queue(connect, auth, acl, path) as jq:
            result = jq.counts()
        for key, value in result.items():
            click.echo(f"{key:10} {value}")

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
        from rich.console import Console  # noqa: PLC0415

        from zkqueue.jobs import JobQueue  # noqa: PLC0415
        from zkqueue.ops.depth import kind_of  # noqa: PLC0415

        client = client_for(connect, auth, acl)
        try:
            if kind_of(client, path) != "jobs":
                raise click.ClickException(f"no job queue at {path}")
            found = JobQueue(client, path).repeats()  # not started: reads only
        except ZkQueueError as exc:
            raise click.ClickException(str(exc)) from exc
        finally:
            client.stop()
            client.close()
        if not found:
            click.echo(f"no repeating jobs in {path}")
            return
        console = Console()
        if not console.is_terminal:
            console = Console(width=160)  # piped: one line per repeat, nothing cut
        console.print(_repeats_table(path, found))

    dead_command("retry-dead", "Queue dead jobs again as fresh runs.", "requeued", "retry_dead")
    dead_command("purge-dead", "Delete dead jobs.", "purged", "purge_dead")
