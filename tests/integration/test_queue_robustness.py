"""The run loop never dies; bad input is quarantined or skipped, logged and counted."""

from __future__ import annotations

import logging

import pytest

from zkqueue.builder import QueueBuilder
from zkqueue.errors import SerializationError
from zkqueue.engine.queue import DistributedQueue
from zkqueue.formats.serializers import JsonSerializer, StrSerializer
from zkqueue.server.testing import wait_for

QPATH = "/queues/jobs"
LPATH = "/queues/jobs-locks"


class PickySerializer(StrSerializer):
    """Refuses to deserialize the payload "poison"."""

    def deserialize(self, data: bytes) -> str:
        if data == b"poison":
            raise ValueError("cannot read poison")
        return super().deserialize(data)


def test_loop_survives_serializer_raising(zk_client) -> None:
    got: list = []
    with QueueBuilder.builder(zk_client, got.append, PickySerializer(), QPATH).build_queue() as q:
        q.put("a")
        q.put("poison")
        q.put("b")
        wait_for(lambda: got == ["a", "b"], message=f"got {got}")
        wait_for(lambda: q.stats().corrupt_quarantined == 1)
        (name,) = zk_client.get_children(q.quarantine_path)
        assert zk_client.get(f"{q.quarantine_path}/{name}")[0].endswith(b"poison\x02")
        q.put("c")
        wait_for(lambda: got == ["a", "b", "c"])


def test_loop_survives_consumer_raising(zk_client) -> None:
    got: list = []

    def consume(item) -> None:
        if item % 2:
            raise ValueError(f"odd {item}")
        got.append(item)

    with QueueBuilder.builder(zk_client, consume, JsonSerializer(), QPATH).build_queue() as q:
        for i in range(10):
            q.put(i)
        wait_for(lambda: got == [0, 2, 4, 6, 8])
        wait_for(lambda: q.stats().consumer_errors == 5)
        assert q.stats().loop_errors == 0


def test_loop_survives_sort_hook_raising(zk_client, caplog) -> None:
    failures = []

    class FlakySort(DistributedQueue):
        def sort_children(self, names):
            if len(failures) < 2:
                failures.append(1)
                raise RuntimeError("sort exploded")
            return super().sort_children(names)

    got: list = []
    q = FlakySort(zk_client, got.append, JsonSerializer(), QPATH)
    with caplog.at_level(logging.ERROR, logger="zkqueue.engine.queue"), q:
        q.put(1)
        q.put(2)
        wait_for(lambda: got == [1, 2], message=f"got {got}")
        assert q.stats().loop_errors == 2
    assert "sort exploded" in caplog.text


def test_loop_survives_get_delay_raising(zk_client) -> None:
    calls = []

    class FlakyDelay(DistributedQueue):
        def get_delay(self, item_node):
            calls.append(item_node)
            if len(calls) == 1:
                raise RuntimeError("delay exploded")
            return 0.0

    got: list = []
    with FlakyDelay(zk_client, got.append, JsonSerializer(), QPATH) as q:
        q.put(1)
        wait_for(lambda: got == [1])
        assert q.stats().loop_errors == 1


def test_foreign_node_skipped_and_not_counted(zk_client, caplog) -> None:
    zk_client.ensure_path(f"{QPATH}/not-an-item")
    got: list = []
    with caplog.at_level(logging.WARNING, logger="zkqueue.engine.queue"):
        with QueueBuilder.builder(zk_client, got.append, JsonSerializer(), QPATH).build_queue() as q:
            for i in range(3):
                q.put(i)
            wait_for(lambda: got == [0, 1, 2])
            wait_for(lambda: q.last_message_count == 0)
            assert q.stats().foreign_skipped == 1  # one warning per name, not per listing
    assert caplog.text.count("not-an-item") == 1
    assert zk_client.get_children(QPATH) == ["not-an-item"]  # left alone


def test_corrupt_znode_quarantined_in_plain_mode(zk_client) -> None:
    zk_client.ensure_path(QPATH)
    bad = bytes.fromhex("00010002")  # wrong version, truncated
    zk_client.create(f"{QPATH}/queue-", bad, sequence=True)
    got: list = []
    with QueueBuilder.builder(zk_client, got.append, StrSerializer(), QPATH).build_queue() as q:
        q.put("good")
        wait_for(lambda: got == ["good"])
        wait_for(lambda: q.stats().corrupt_quarantined == 1)
        (name,) = zk_client.get_children(q.quarantine_path)
        assert name == "queue-0000000000"
        assert zk_client.get(f"{q.quarantine_path}/{name}")[0] == bad
        assert zk_client.get_children(QPATH) == []


def test_empty_multi_item_is_deleted_without_consuming(zk_client) -> None:
    got: list = []
    with QueueBuilder.builder(zk_client, got.append, StrSerializer(), QPATH).build_queue() as q:
        q.put_multi([])
        q.put("after")
        wait_for(lambda: got == ["after"])
        wait_for(lambda: zk_client.get_children(QPATH) == [])


def test_serializer_failure_on_put_raises_typed_error(zk_client) -> None:
    with QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).build_queue() as q:
        with pytest.raises(SerializationError):
            q.put(123)  # not a str
        assert q.flush_puts(5)
        assert q.stats().put_failed == 0 and q.stats().put_ok == 0


def _lose_first_reply(monkeypatch, match) -> list:
    """Let ZooKeeper commit the first multi whose ops satisfy ``match``, then pretend its reply was lost."""
    from kazoo.exceptions import ConnectionLoss

    from zkqueue.transport import protocol

    real_send = protocol.send_multi
    lost: list = []

    class ReplyMaybeLost:
        def __init__(self, inner, ops) -> None:
            self.inner, self.ops = inner, ops

        def result(self, *args, **kwargs):
            result = self.inner.result(*args, **kwargs)
            if not lost and result.ok and match(self.ops):
                lost.append(self.ops)
                raise ConnectionLoss()
            return result

    def send_multi(client, ops, **kwargs):
        ops = list(ops)
        return ReplyMaybeLost(real_send(client, ops, **kwargs), ops)

    # run_multi sends through send_multi too, so this covers synchronous and pipelined multis
    monkeypatch.setattr(protocol, "send_multi", send_multi)
    return lost


def _is_take(ops) -> bool:
    """A no-lock take: a receipt create followed by item deletes."""
    from zkqueue.transport.protocol import CreateOp, DeleteOp

    return isinstance(ops[0], CreateOp) and len(ops) > 1 and all(isinstance(op, DeleteOp) for op in ops[1:])


def test_plain_delete_reply_lost_still_delivers_once(zk_client, monkeypatch) -> None:
    lost = _lose_first_reply(monkeypatch, _is_take)
    got: list = []
    with QueueBuilder.builder(zk_client, got.append, JsonSerializer(), QPATH).build_queue() as q:
        q.put_multi([1, 2])
        q.put(3)
        wait_for(lambda: got == [1, 2, 3], message=f"got {got}")
        assert lost, "the fault was not injected"
        assert q.stats().lost_races == 0
    assert zk_client.get_children(QPATH + "-receipts") == []  # receipts are cleaned up


def test_plain_take_lost_to_a_competitor_is_not_delivered(zk_client_factory, monkeypatch) -> None:
    """Regression (found by the fault suite): after a lost reply, items another consumer deleted meanwhile must
    not be delivered again. The receipt of our multi decides, not whether the items are gone."""
    from kazoo.exceptions import ConnectionLoss

    from zkqueue.formats import framing; from zkqueue.transport import protocol

    producer = zk_client_factory()
    rival = zk_client_factory()
    producer.ensure_path(QPATH)
    for i in range(3):
        producer.create(QPATH + "/queue-", framing.encode_items([str(i).encode()]), sequence=True)
    real_send = protocol.send_multi
    injected: list = []

    class RivalWinsThenReplyLost:
        """Our take never reaches the server: a rival deletes the items, and we see a lost reply."""

        def __init__(self, ops) -> None:
            self.ops = ops

        def result(self, *args, **kwargs):
            for op in self.ops[1:]:
                rival.delete(op.path)
            injected.append(self.ops)
            raise ConnectionLoss()

    def send_multi(client, ops, **kwargs):
        ops = list(ops)
        if not injected and _is_take(ops):
            return RivalWinsThenReplyLost(ops)
        return real_send(client, ops, **kwargs)

    monkeypatch.setattr(protocol, "send_multi", send_multi)
    got: list = []
    consumer = zk_client_factory()
    with QueueBuilder.builder(consumer, got.append, StrSerializer(), QPATH).build_queue():
        wait_for(lambda: injected, message="the fault was not injected")
        wait_for(lambda: producer.get_children(QPATH) == [], message="items should be gone")
        producer.create(QPATH + "/queue-", framing.encode_items([b"after"]), sequence=True)
        wait_for(lambda: got == ["after"], message=f"got {got}")
    assert got == ["after"]  # none of the rival's items was delivered here


def test_no_auth_maps_to_queue_permission_error(zk_client) -> None:
    from kazoo.security import make_acl

    from zkqueue.errors import QueuePermissionError
    from zkqueue.listeners import QueuePutListener

    zk_client.ensure_path(QPATH.rsplit("/", 1)[0])
    zk_client.create(QPATH, acl=[make_acl("world", "anyone", read=True)])
    with QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).put_in_background(False).build_queue() as q:
        with pytest.raises(QueuePermissionError):
            q.put("denied")
        assert q.stats().put_failed == 1
    failures: list = []

    class Listener(QueuePutListener):
        def put_failed(self, item, exc) -> None:
            failures.append((item, exc))

    q = QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).build_queue()
    q.put_listeners.add(Listener())
    with q:
        q.put("denied too")
        assert q.flush_puts(10)
    assert [item for item, _ in failures] == ["denied too"]
    assert isinstance(failures[0][1], QueuePermissionError)


def test_loop_survives_consumer_calling_sys_exit(zk_client) -> None:
    import sys

    got: list = []

    def consume(item) -> None:
        if item == "exit":
            sys.exit(3)
        got.append(item)

    with QueueBuilder.builder(zk_client, consume, StrSerializer(), QPATH).build_queue() as q:
        q.put("exit")
        q.put("after")
        wait_for(lambda: got == ["after"])
        assert q.stats().consumer_errors == 1
