"""What every ``zkqueue`` command that talks to ZooKeeper shares: the --connect/--auth/--acl options and the
client they make."""

from __future__ import annotations

import os
from typing import Any

import click

from zkqueue.errors import ZkQueueError

DEFAULT_CONNECT = "127.0.0.1:2181"


def connect_option(fn: Any) -> Any:
    fn = click.option(
        "--acl",
        envvar="ZKQUEUE_ACL",
        default=None,
        help="ACL of the nodes this command creates, e.g. 'digest:app:secret:all,world:anyone:read' "
        "(env ZKQUEUE_ACL; default with --auth: everything for that user, nothing for others).",
    )(fn)
    fn = click.option(
        "--auth",
        envvar="ZKQUEUE_AUTH",
        default=None,
        metavar="USER:PASSWORD",
        help="Digest credentials (env ZKQUEUE_AUTH).",
    )(fn)
    return click.option(
        "--connect",
        envvar="ZKQUEUE_CONNECT",
        default=DEFAULT_CONNECT,
        show_default=True,
        help="ZooKeeper connect string (env ZKQUEUE_CONNECT); a /chroot suffix is allowed.",
    )(fn)


def client_for(connect: str, auth: str | None = None, acl: str | None = None) -> Any:
    from zkqueue.engine.api import client_kwargs, parse_acl  # noqa: PLC0415 - keeps `zkqueue server` light
    from zkqueue.server.testing import make_client  # noqa: PLC0415

    try:
        kwargs = client_kwargs(auth=auth, acl=parse_acl(acl) if acl else None)
    except ZkQueueError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        return make_client(connect, start_timeout=float(os.environ.get("ZKQUEUE_CONNECT_TIMEOUT", 15)), **kwargs)
    except Exception as exc:  # noqa: BLE001 - kazoo raises a bare timeout
        raise NoServer(f"cannot connect to ZooKeeper at {connect}: {exc or type(exc).__name__}") from exc


class NoServer(click.ClickException):
    """No ZooKeeper answered: exit code 3."""

    exit_code = 3
