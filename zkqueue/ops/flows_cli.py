"""``zkqueue flows ...``: look at the flow jobs of a flow (:mod:`zkqueue.flows`), read-only. Errors are one line
and an exit code: 1 no such flow or flow job, 3 no server, 4 not allowed (auth/ACL)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import click
from kazoo.exceptions import NoAuthError, NoNodeError

from zkqueue.engine.api import CONNECTION_ERRORS
from zkqueue.errors import ConnectionLostError, QueuePermissionError, ZkQueueError
from zkqueue.ops.connect import NoServer, client_for

log = logging.getLogger("zkqueue.ops.flows_cli")


class NotAllowed(click.ClickException):
    """Refused by ZooKeeper's ACLs: exit code 4."""

    exit_code = 4


@contextlib.contextmanager
def _flow(connect: str, auth: str | None, acl: str | None, path: str) -> Iterator[Any]:
    """The flow at ``path``, opened read-only (nothing is created); ZooKeeper errors become one line and an exit
    code: 1 no such flow (or another refusal), 3 no server, 4 not allowed."""
    from zkqueue.flows import Flow  # noqa: PLC0415

    client = client_for(connect, auth, acl)  # exits 3 when no server answers
    try:
        flow = Flow.open_existing(client, path)
        try:
            yield flow
        finally:
            flow.close()
    except (QueuePermissionError, NoAuthError) as exc:
        raise NotAllowed(f"not allowed to read {path}: check --auth and the ACLs") from exc
    except (*CONNECTION_ERRORS, ConnectionLostError) as exc:
        raise NoServer(f"lost the connection to ZooKeeper ({type(exc).__name__})") from exc
    except NoNodeError as exc:
        raise click.ClickException(f"no flow at {path} (no such node: {exc})") from exc
    except ZkQueueError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        client.stop()
        client.close()


def _flow_dict(job: Any) -> dict[str, Any]:
    return {
        "id": job.id, "state": job.state.value, "run": job.run, "pending": job.pending, "steps": job.steps,
        "params": job.params, "results": job.results, "data": job.data,
        "errors": [{"step": e.step, "attempt": e.attempt, "error": e.error} for e in job.errors],
        "history": [{"step": h.step, "status": h.status, "attempts": h.attempts, "started_ms": h.started_ms,
                     "finished_ms": h.finished_ms} for h in job.history],
        "created_at": job.created_at, "updated_at": job.updated_at,
    }


def register(main: click.Group, connect_option: Any) -> None:
    """Add the ``flows`` group to the ``zkqueue`` command."""

    @main.group()
    def flows() -> None:
        """Flows: look at flow jobs and counts, cancel flow jobs."""

    @flows.command("get")
    @connect_option
    @click.argument("path")
    @click.argument("job_id")
    def get(connect: str, auth: str | None, acl: str | None, path: str, job_id: str) -> None:
        """Print the flow job JOB_ID of the flow at PATH as JSON (exit 1 if unknown)."""
        from zkqueue.flows.canvas_handoff import describe  # noqa: PLC0415

        with _flow(connect, auth, acl, path) as flow:
            job = flow.get(job_id)
            graph = describe(flow.client, job) if job is not None else None
        if job is None:
            raise click.ClickException(f"no flow job {job_id!r} in {path}")
        out = _flow_dict(job)
        if graph is not None:  # a canvas (chain, group, chord: /<namespace>/canvases): its nodes' tasks and edges
            out["canvas"] = graph
        click.echo(json.dumps(out, indent=2, default=str))

    @flows.command("cancel")
    @connect_option
    @click.argument("path")
    @click.argument("job_ids", nargs=-1, required=True)
    @click.pass_context
    def cancel(ctx: click.Context, connect: str, auth: str | None, acl: str | None, path: str,
               job_ids: tuple[str, ...]) -> None:
        """Cancel the running flow jobs JOB_IDS of the flow at PATH; print one line per id: "cancelled" (now
        CANCELLED: its waiting step jobs are removed, nothing more of it starts; a step running now finishes) or
        "not found or finished". Exit 0 if at least one was cancelled, 1 if none."""
        from zkqueue.flows.canvas_handoff import cancel_at  # noqa: PLC0415

        def cancel_one(flow: Any, job_id: str) -> bool:  # a canvas (/<namespace>/canvases) is cancelled as one
            as_canvas = cancel_at(flow.client, path, job_id)
            return flow.cancel(job_id) if as_canvas is None else as_canvas

        with _flow(connect, auth, acl, path) as flow:
            done = [(job_id, cancel_one(flow, job_id)) for job_id in job_ids]
        for job_id, cancelled in done:
            click.echo(f"{job_id}\t{'cancelled' if cancelled else 'not found or finished'}")
        if not any(cancelled for _id, cancelled in done):
            ctx.exit(1)

    @flows.command("counts")
    @connect_option
    @click.argument("path")
    def counts(connect: str, auth: str | None, acl: str | None, path: str) -> None:
        """Flow jobs by state (running, completed, failed, cancelled), and each step's queued, active and retrying
        jobs."""
        with _flow(connect, auth, acl, path) as flow:
            result = flow.counts()
        for key in ("running", "completed", "failed", "cancelled", "unreadable"):
            if key != "unreadable" or result[key]:
                click.echo(f"{key:10} {result[key]}")
        for step, by_state in result["steps"].items():
            click.echo(f"step {step}: " + " ".join(f"{k}={v}" for k, v in by_state.items()))
