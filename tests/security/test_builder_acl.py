"""ACLs and auth given to the builder (not the client): every node the queue creates carries the queue's ACL."""

from __future__ import annotations

import threading

import pytest
from kazoo.exceptions import NoAuthError

from zkqueue.builder import QueueBuilder
from zkqueue.errors import ConfigurationError, QueuePermissionError
from zkqueue.transport.security import queue_acl
from zkqueue.formats.serializers import StrSerializer
from zkqueue.server.testing import wait_for

QPATH = "/acl-builder/jobs"
LPATH = "/acl-builder/jobs-locks"


def _digest_only(acls) -> bool:
    return bool(acls) and all(a.id.scheme == "digest" and a.id.id.startswith("app:") for a in acls)


def _secured(builder):
    return builder.auth("app:s3cret").acl(queue_acl("app", "s3cret"))


def test_builder_acl_covers_queue_lock_fence_item_quarantine(zk_client_factory) -> None:
    owner = zk_client_factory()  # a plain client: no default ACL, no auth of its own
    got: list[str] = []
    release = threading.Event()

    def consume(item: str) -> None:
        got.append(item)
        release.wait(30)

    q = _secured(QueueBuilder.builder(owner, consume, StrSerializer(), QPATH).lock_path(LPATH)).build_queue()
    with q:
        q.put("a")
        wait_for(lambda: got == ["a"])
        (item,) = owner.get_children(QPATH)
        locks = owner.get_children(LPATH)  # the item's lock and this consumer's session fence
        assert len(locks) == 2, locks
        fences = owner.get_children(f"{QPATH}/{item}")
        assert fences, "the fence child should exist while the item is held"
        paths = [QPATH, LPATH, q.quarantine_path, f"{QPATH}/{item}", *(f"{LPATH}/{lock}" for lock in locks)]
        paths += [f"{QPATH}/{item}/{f}" for f in fences]
        for path in paths:
            assert _digest_only(owner.get_acls(path)[0]), (path, owner.get_acls(path)[0])
        release.set()
        wait_for(lambda: owner.get_children(QPATH) == [])
        owner.create(f"{QPATH}/queue-", b"\x00not a frame", sequence=True)
        wait_for(lambda: q.stats().corrupt_quarantined == 1)
        (moved,) = owner.get_children(q.quarantine_path)
        assert _digest_only(owner.get_acls(f"{q.quarantine_path}/{moved}")[0])


def test_builder_acl_without_lock_covers_receipts(zk_client_factory) -> None:
    owner = zk_client_factory()
    got: list[str] = []
    with _secured(QueueBuilder.builder(owner, got.append, StrSerializer(), QPATH)).build_queue() as q:
        q.put("x")
        wait_for(lambda: got == ["x"])
    assert _digest_only(owner.get_acls(QPATH + "-receipts")[0])


def test_client_without_the_credentials_is_refused(zk_client_factory) -> None:
    owner = zk_client_factory()
    with _secured(QueueBuilder.builder(owner, None, StrSerializer(), QPATH).put_in_background(False)).build_queue() as q:
        q.put("kept")
    (item,) = owner.get_children(QPATH)
    intruder = zk_client_factory()
    consumer = QueueBuilder.builder(intruder, print, StrSerializer(), QPATH).lock_path(LPATH).build_queue()
    with pytest.raises(QueuePermissionError):
        consumer.start()
    consumer.close()
    with pytest.raises(NoAuthError):
        intruder.delete(f"{QPATH}/{item}")
    assert owner.get_children(QPATH) == [item]  # nothing lost


def test_bad_acl_and_auth_are_configuration_errors(zk_client) -> None:
    builder = QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH)
    with pytest.raises(ConfigurationError):
        builder.acl([])
    with pytest.raises(ConfigurationError):
        builder.acl(["not an ACL"])
    with pytest.raises(ConfigurationError):
        builder.auth("no-colon")
