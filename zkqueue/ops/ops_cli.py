"""Operations commands: ``zkqueue peek``, ``purge``, ``quarantine list|redrive|purge``, ``watch``, ``metrics`` and
``dashboard``. Errors are one line and an exit code: 1 no such queue or another refusal, 3 no server, 4 not
allowed (auth/ACL), 2 a usage error (click's)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import click
from kazoo.exceptions import ConnectionClosedError, NoAuthError, NoNodeError

from zkqueue._extras import require
from zkqueue.engine.api import CONNECTION_ERRORS
from zkqueue.errors import ConnectionLostError, QueuePermissionError, ZkQueueError
from zkqueue.ops.connect import NoServer, client_for

log = logging.getLogger("zkqueue.ops.ops_cli")

EXIT_NOT_ALLOWED = 4


class NotAllowed(click.ClickException):
    exit_code = EXIT_NOT_ALLOWED


class _GiveUp:
    """Stops ``client`` when its connection stays lost for ``grace`` seconds: kazoo would otherwise hold a call made
    while it reconnects for ever; stopping fails it with a connection error (exit code 3)."""

    def __init__(self, client: Any, grace: float) -> None:
        self.client = client
        self.grace = grace
        self.gave_up = False
        self._back = threading.Event()

    def __call__(self, state: Any) -> None:  # a kazoo state listener: runs on kazoo's event thread
        from kazoo.client import KazooState  # noqa: PLC0415

        if state == KazooState.CONNECTED:
            self._back.set()
        else:
            self._back.clear()
            threading.Thread(target=self._wait, name="zkqueue-cli-give-up", daemon=True).start()

    def _wait(self) -> None:
        if not self._back.wait(self.grace) and not self.gave_up:
            self.gave_up = True
            log.debug("no ZooKeeper for %.0f s: stopping the client", self.grace)
            self.client.stop()


@contextlib.contextmanager
def zk_session(connect: str, auth: str | None, acl: str | None = None, give_up: bool = True) -> Iterator[Any]:
    """A client for one command; ZooKeeper errors become one-line messages with their exit codes. With
    ``give_up``, a connection lost for longer than ``ZKQUEUE_CONNECT_TIMEOUT`` (15 s) ends the command (exit code
    3) instead of waiting for the server for ever."""
    client = client_for(connect, auth, acl)
    watchdog = _GiveUp(client, float(os.environ.get("ZKQUEUE_CONNECT_TIMEOUT", 15)))
    if give_up:
        client.add_listener(watchdog)
    try:
        yield client
    except (QueuePermissionError, NoAuthError) as exc:
        raise NotAllowed(str(exc) or "not allowed: check --auth and the ACLs") from exc
    except (*CONNECTION_ERRORS, ConnectionClosedError, ConnectionLostError) as exc:
        raise NoServer(f"lost the connection to ZooKeeper at {connect} ({type(exc).__name__}): is the server "
                       "up?") from exc
    except NoNodeError as exc:
        raise click.ClickException(f"no such node: {exc}") from exc
    except ZkQueueError as exc:
        if watchdog.gave_up:  # whatever the call that was cut raised
            raise NoServer(f"lost the connection to ZooKeeper at {connect} for {watchdog.grace:.0f} s: is the "
                           "server up?") from exc
        raise click.ClickException(str(exc)) from exc
    finally:
        client.stop()
        client.close()


def _require(client: Any, path: str) -> None:
    from zkqueue.formats import naming  # noqa: PLC0415

    try:
        path = naming.validate_queue_path(path)
    except ZkQueueError as exc:
        raise click.BadParameter(str(exc), param_hint="PATH") from exc
    try:
        if client.exists(path) is None:
            raise click.ClickException(f"no queue at {path} (no such node)")
    except NoAuthError as exc:
        raise NotAllowed(f"not allowed to read {path}: check --auth and the ACLs") from exc


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=repr)


def register(main: click.Group, connect_option: Any) -> None:
    """Add the operations commands to the ``zkqueue`` command."""
    from zkqueue.ops.items import SERIALIZERS  # noqa: PLC0415

    yes_option = click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
    serializer_option = click.option("--serializer", type=click.Choice(sorted(SERIALIZERS)), default="str",
                                      show_default=True, help="How to decode items.")

    @main.command()
    @connect_option
    @click.argument("path")
    @click.option("-n", "count", type=click.IntRange(1), default=10, show_default=True, help="How many nodes.")
    @serializer_option
    def peek(connect: str, auth: str | None, acl: str | None, path: str, count: int, serializer: str) -> None:
        """Show the first items of the queue at PATH without taking them."""
        from zkqueue.ops.items import peek as peek_items  # noqa: PLC0415

        with zk_session(connect, auth, acl) as client:
            _require(client, path)
            nodes = peek_items(client, path, count, serializer)
        for node in nodes:
            shown = node.error or ", ".join(_show(i) for i in node.items)
            click.echo(f"{node.name}\t{shown}")
        click.echo(f"{len(nodes)} node(s) shown", err=True)

    @main.command()
    @connect_option
    @click.argument("path")
    @yes_option
    def purge(connect: str, auth: str | None, acl: str | None, path: str, yes: bool) -> None:
        """Delete every item of the queue at PATH (batched multis, with a progress bar)."""
        require("rich", what="zkqueue purge (its progress bar)")
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

        from zkqueue.ops.items import purge as purge_items  # noqa: PLC0415

        with zk_session(connect, auth, acl) as client:
            _require(client, path)
            count = client.exists(path).numChildren
            if not yes:
                click.confirm(f"Delete all {count:,} item(s) of {path}?", abort=True, err=True)
            columns = (TextColumn("purging"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            with Progress(*columns, transient=True) as progress:
                task = progress.add_task("purge", total=count)
                deleted = purge_items(client, path, lambda done, total: progress.update(task, completed=done,
                                                                                      total=total))
        click.echo(f"purged {deleted} item(s) from {path}")

    @main.group()
    def quarantine() -> None:
        """A queue's quarantine (PATH-quarantine): list, redrive into the queue, or purge."""

    @quarantine.command("list")
    @connect_option
    @click.argument("path")
    @click.option("-n", "count", type=click.IntRange(1), default=None, help="At most this many.")
    @serializer_option
    def quarantine_list(connect: str, auth: str | None, acl: str | None, path: str, count: int | None,
                        serializer: str) -> None:
        """List the quarantined nodes of the queue at PATH with their decoded items."""
        from zkqueue.ops.items import quarantined  # noqa: PLC0415

        with zk_session(connect, auth, acl) as client:
            _require(client, path)
            nodes = quarantined(client, path, count, serializer)
        for node in nodes:
            click.echo(f"{node.name}\t{node.size} bytes\t{node.error or ', '.join(_show(i) for i in node.items)}")
        click.echo(f"{len(nodes)} quarantined node(s)", err=True)

    @quarantine.command("redrive")
    @connect_option
    @click.argument("path")
    @click.argument("names", nargs=-1)
    def quarantine_redrive(connect: str, auth: str | None, acl: str | None, path: str,
                           names: tuple[str, ...]) -> None:
        """Move quarantined nodes (all, or NAMES) back into the queue at PATH."""
        from zkqueue.ops.items import redrive  # noqa: PLC0415

        with zk_session(connect, auth, acl) as client:
            _require(client, path)
            moved = redrive(client, path, list(names) or None)
        click.echo(f"redrove {moved} node(s) into {path}")

    @quarantine.command("purge")
    @connect_option
    @click.argument("path")
    @yes_option
    def quarantine_purge(connect: str, auth: str | None, acl: str | None, path: str, yes: bool) -> None:
        """Delete every quarantined node of the queue at PATH."""
        from zkqueue.ops.items import purge_quarantine  # noqa: PLC0415

        with zk_session(connect, auth, acl) as client:
            _require(client, path)
            if not yes:
                click.confirm(f"Delete the quarantine of {path}?", abort=True, err=True)
            deleted = purge_quarantine(client, path)
        click.echo(f"purged {deleted} quarantined node(s) of {path}")

    @main.command()
    @connect_option
    @click.argument("paths", nargs=-1, required=True)
    @click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds between refreshes.")
    @click.option("--count", "refreshes", type=click.IntRange(1), default=None, help="Stop after this many.")
    def watch(connect: str, auth: str | None, acl: str | None, paths: tuple[str, ...], interval: float,
              refreshes: int | None) -> None:
        """A live table of the depths and rates of the queues at PATHS (job queues and flows too)."""
        require("rich", what="zkqueue watch")
        from rich.console import Console  # noqa: PLC0415
        from rich.live import Live  # noqa: PLC0415

        from zkqueue.ops.watch import Watcher  # noqa: PLC0415

        with zk_session(connect, auth, acl) as client:
            for path in paths:
                _require(client, path)
            watcher = Watcher(client, list(paths))
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            console = Console()
            if not console.is_terminal:
                console = Console(width=160)  # piped: one line per queue, nothing cut
            with Live(watcher.table(), console=console, refresh_per_second=4,
                      auto_refresh=console.is_terminal) as live:
                n = 0
                try:
                    while True:
                        live.update(watcher.table(), refresh=True)
                        n += 1
                        if (refreshes is not None and n >= refreshes) or stop.wait(interval):
                            break
                except KeyboardInterrupt:
                    pass

    @main.command()
    @connect_option
    @click.argument("paths", nargs=-1, required=True)
    @click.option("--port", type=click.IntRange(0, 65535), default=9464, show_default=True)
    @click.option("--addr", default="0.0.0.0", show_default=True, help="Address to listen on.")
    def metrics(connect: str, auth: str | None, acl: str | None, paths: tuple[str, ...], port: int,
                addr: str) -> None:
        """Serve Prometheus gauges of the depths of the queues at PATHS (child counts only, cheap on big queues)."""
        from zkqueue.metrics import run_exporter  # noqa: PLC0415

        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        with zk_session(connect, auth, acl, give_up=False) as client:  # an exporter outlives an outage
            for path in paths:
                _require(client, path)
            click.echo(f"serving metrics of {len(paths)} path(s) at http://{addr}:{port}/metrics", err=True)
            run_exporter(client, list(paths), port, addr, stop)

    @main.command()
    @connect_option
    @click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
    @click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
    @click.option("--root", default="/queues", show_default=True, help="Where to look for queues.")
    @click.option("--allow-actions", is_flag=True,
                  help="Allow retry, purge and redrive from the page (with the --auth credentials).")
    def dashboard(connect: str, auth: str | None, acl: str | None, port: int, host: str, root: str,
                  allow_actions: bool) -> None:
        """Serve a web dashboard of the queues, job queues and flows under --root."""
        from zkqueue.ops.dashboard.app import create_app, run  # noqa: PLC0415

        if allow_actions and not auth:
            raise click.UsageError("--allow-actions needs --auth USER:PASSWORD (or ZKQUEUE_AUTH): actions run with "
                                   "those digest credentials")

        with zk_session(connect, auth, acl, give_up=False) as client:
            if client.exists(root) is None:
                raise click.ClickException(f"no node {root}: give the --root that holds your queues")
            app = create_app(client, root=root, allow_actions=allow_actions, auth_user=(auth or "").split(":")[0])
            click.echo(f"dashboard of {root} at http://{host}:{port}/ (actions "
                       f"{'on' if allow_actions else 'off'})", err=True)
            run(app, host, port)
