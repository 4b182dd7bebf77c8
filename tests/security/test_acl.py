"""Digest auth and ACLs on a real ZooKeeper: the queue's nodes are the owner's; others cannot take or delete."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions

from zkqueue.formats import framing
from zkqueue.builder import QueueBuilder
from zkqueue.errors import ConfigurationError, QueuePermissionError
from zkqueue.transport.security import TlsOptions, client_kwargs, digest_acl, parse_acl, parse_auth, queue_acl
from zkqueue.formats.serializers import StrSerializer
from zkqueue.server.testing import wait_for

QPATH = "/secure/jobs"
LPATH = "/secure/jobs-locks"
AUTH = "app:s3cret"


def _digest_only(acls) -> bool:
    return bool(acls) and all(a.id.scheme == "digest" and a.id.id.startswith("app:") for a in acls)


def _owner_queue(client, consumer=None, **kw):
    return QueueBuilder.builder(client, consumer, StrSerializer(), QPATH).lock_path(LPATH).put_in_background(
        False
    ).build_queue()


def test_every_queue_node_gets_the_owner_acl(zk_client_factory) -> None:
    owner = zk_client_factory(**client_kwargs(auth=AUTH))
    got: list = []
    release = threading.Event()

    def consume(item: str) -> None:
        got.append(item)
        release.wait(30)

    q = _owner_queue(owner, consume)
    with q:
        q.put("a")
        wait_for(lambda: got == ["a"])
        # mid-item: the item node, its lock and fence exist now
        (item,) = owner.get_children(QPATH)
        locks = owner.get_children(LPATH)  # the item's lock and this consumer's session fence
        assert len(locks) == 2, locks
        fences = owner.get_children(f"{QPATH}/{item}")
        nodes = ["/secure", QPATH, LPATH, f"{QPATH}/{item}", *(f"{LPATH}/{lock}" for lock in locks)]
        nodes += [f"{QPATH}/{item}/{f}" for f in fences]
        for path in nodes:
            assert _digest_only(owner.get_acls(path)[0]), (path, owner.get_acls(path)[0])
        release.set()
        wait_for(lambda: owner.get_children(QPATH) == [])
        # a corrupt node goes to the quarantine, which is created with the same ACL
        owner.create(f"{QPATH}/queue-", b"\x00garbage", sequence=True)
        wait_for(lambda: q.stats().corrupt_quarantined == 1)
        assert _digest_only(owner.get_acls(q.quarantine_path)[0])
        (moved,) = owner.get_children(q.quarantine_path)
        assert _digest_only(owner.get_acls(f"{q.quarantine_path}/{moved}")[0])


def test_client_without_credentials_cannot_put_consume_or_delete(zk_client_factory) -> None:
    owner = zk_client_factory(**client_kwargs(auth=AUTH))
    with _owner_queue(owner) as q:
        for item in ("a", "b", "c"):
            q.put(item)
    owner.ensure_path(LPATH)
    items = sorted(owner.get_children(QPATH))
    for intruder in (zk_client_factory(), zk_client_factory(**client_kwargs(auth="app:wrong"))):
        # producing: a clear permission error (when the queue starts, or at the latest on put)
        producer = QueueBuilder.builder(intruder, None, StrSerializer(), QPATH).put_in_background(False).build_queue()
        with pytest.raises(QueuePermissionError):
            producer.start()
            producer.put("x")
        producer.close()
        # consuming, lock-safe or not: refused when the queue starts, nothing taken
        got: list = []
        for builder in (
            QueueBuilder.builder(intruder, got.append, StrSerializer(), QPATH).lock_path(LPATH),
            QueueBuilder.builder(intruder, got.append, StrSerializer(), QPATH),
        ):
            queue = builder.build_queue()
            with pytest.raises(QueuePermissionError):
                queue.start()
            queue.close()
        # deleting by hand: refused by the server
        with pytest.raises(NoAuthError):
            intruder.delete(f"{QPATH}/{items[0]}")
        assert got == []
    assert sorted(owner.get_children(QPATH)) == items  # nothing lost
    got = []
    with _owner_queue(owner, got.append):
        wait_for(lambda: got == ["a", "b", "c"], message=f"got {got}")


def test_reader_may_look_but_not_consume(zk_client_factory) -> None:
    """A read-only user (e.g. a dashboard) can list and read items; its consumer deletes nothing."""
    acl = queue_acl("app", "s3cret", readers=[("viewer", "look")])
    owner = zk_client_factory(**client_kwargs(auth=AUTH, acl=acl))
    with _owner_queue(owner) as q:
        q.put("a")
    owner.ensure_path(LPATH)
    viewer = zk_client_factory(**client_kwargs(auth="viewer:look", acl=acl))
    (name,) = viewer.get_children(QPATH)
    assert framing.decode_items(viewer.get(f"{QPATH}/{name}")[0]) == [b"a"]
    got: list = []
    queue = QueueBuilder.builder(viewer, got.append, StrSerializer(), QPATH).lock_path(LPATH).build_queue()
    with pytest.raises(QueuePermissionError):
        queue.start()
    queue.close()
    with pytest.raises(NoAuthError):
        viewer.delete(f"{QPATH}/{name}")
    assert got == [] and owner.get_children(QPATH) == [name]


def test_cli_auth_puts_consumes_and_refuses_without(zk_hosts, zk_client_factory) -> None:
    cli = [sys.executable, "-m", "zkqueue.ops.cli"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=90)

    put = run("put", "--connect", zk_hosts, "--auth", AUTH, QPATH, "one", "two")
    assert put.returncode == 0, put.stderr
    owner = zk_client_factory(**client_kwargs(auth=AUTH))
    assert _digest_only(owner.get_acls(QPATH)[0])
    denied = run("consume", "--connect", zk_hosts, QPATH, "--timeout", "2")
    assert denied.returncode != 0
    assert "credentials" in denied.stderr.lower() or "permission" in denied.stderr.lower(), denied.stderr
    denied_put = run("put", "--connect", zk_hosts, QPATH, "three")
    assert denied_put.returncode != 0 and "credentials" in denied_put.stderr.lower(), denied_put.stderr
    assert len(owner.get_children(QPATH)) == 2
    got = run("consume", "--connect", zk_hosts, "--auth", AUTH, QPATH, "--count", "2", "--timeout", "20")
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["one", "two"]
    bad = run("put", "--connect", zk_hosts, "--auth", "no-colon", QPATH, "x")
    assert bad.returncode != 0 and "user:password" in bad.stderr


def test_cli_acl_option_grants_a_reader(zk_hosts, zk_client_factory) -> None:
    cmd = [sys.executable, "-m", "zkqueue.ops.cli", "put", "--connect", zk_hosts, "--auth", AUTH,
           "--acl", "digest:app:s3cret:all,world:anyone:read", QPATH, "visible"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    anyone = zk_client_factory()
    (name,) = anyone.get_children(QPATH)
    assert framing.decode_items(anyone.get(f"{QPATH}/{name}")[0]) == [b"visible"]
    with pytest.raises(NoAuthError):
        anyone.delete(f"{QPATH}/{name}")


@pytest.mark.parametrize(
    "call",
    [
        lambda: parse_auth("nocolon"),
        lambda: parse_auth(":pw"),
        lambda: parse_auth("user:"),
        lambda: parse_auth(42),
        lambda: digest_acl("u", "p", "fly"),
        lambda: digest_acl("u", "p", []),
        lambda: parse_acl("digest:u:p"),
        lambda: parse_acl("ip:1.2.3.4:read"),
        lambda: parse_acl(""),
        lambda: client_kwargs(acl=[]),
        lambda: client_kwargs(acl=["not an acl"]),
        lambda: TlsOptions(ca="/nonexistent/ca.pem"),
        lambda: TlsOptions(),
    ],
)
def test_bad_security_options_are_configuration_errors(call) -> None:
    with pytest.raises(ConfigurationError):
        call()


def test_parse_acl_and_permissions() -> None:
    (entry,) = parse_acl("digest:u:p:read+create")
    assert entry.perms == Permissions.READ | Permissions.CREATE and entry.id.scheme == "digest"
    assert entry.id.id.startswith("u:") and "p" not in entry.id.id.split(":", 1)[0][1:]
    assert parse_acl("open")[0].id.scheme == "world"
    kwargs = client_kwargs(auth=("u", "p"))
    assert kwargs["auth_data"] == [("digest", "u:p")]
    assert kwargs["default_acl"][0].perms == Permissions.ALL
