"""Large items (over one znode) on a real ZooKeeper: round trips, order, corruption, lost acks, garbage."""

from __future__ import annotations

import hashlib
import os
import queue as stdqueue
import threading
import time
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from zkqueue import BytesSerializer, QueueBuilder
from zkqueue.engine import blobs
from zkqueue.errors import ConfigurationError, ItemTooLargeError
from zkqueue.formats import large_ref
from zkqueue.transport import protocol

MiB = 2**20


def _queue(client: Any, path: str, consumer: Any = None, *, lock: bool = True, **large: Any) -> Any:
    b = QueueBuilder.builder(client, consumer, BytesSerializer(), path).large_items(**large)
    if lock and consumer is not None:
        b = b.lock_path(path + "-locks")
    return b.build_queue()


class Collect:
    def __init__(self) -> None:
        self.items: stdqueue.Queue[bytes] = stdqueue.Queue()

    def __call__(self, item: bytes) -> None:
        self.items.put(item)

    def take(self, n: int, timeout: float = 60.0) -> list[bytes]:
        return [self.items.get(timeout=timeout) for _ in range(n)]


def _until(check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


@pytest.mark.parametrize("lock", [True, False], ids=["lock-safe", "no-lock"])
def test_5_and_20_mib_round_trip_byte_for_byte(zk_client, lock) -> None:
    payloads = [os.urandom(5 * MiB), os.urandom(20 * MiB), b"small"]
    got = Collect()
    with _queue(zk_client, "/big", got, lock=lock):
        with _queue(zk_client, "/big") as producer:
            for p in payloads:
                producer.put(p)
            assert producer.flush_puts(30)
            assert producer.stats().large_items_put == 2
        out = got.take(3)
    assert [hashlib.sha256(x).hexdigest() for x in out] == [hashlib.sha256(x).hexdigest() for x in payloads]
    # every node of the two large items went with their acks
    deadline = time.monotonic() + 10
    while zk_client.get_children("/big-blobs") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert zk_client.get_children("/big-blobs") == []
    assert zk_client.get_children("/big") == []


def test_small_items_are_stored_as_curator_frames(zk_client) -> None:
    with _queue(zk_client, "/plain") as q:
        q.put(b"x" * 1000)
        assert q.flush_puts(10)
    (name,) = zk_client.get_children("/plain")
    data, _ = zk_client.get("/plain/" + name)
    assert not large_ref.is_ref(data) and data[:4] == b"\x00\x01\x00\x01"


def test_compressible_items_are_stored_compressed(zk_client) -> None:
    text = b"the same line of a log file, again and again\n" * 100_000  # 4.5 MB
    got = Collect()
    with _queue(zk_client, "/zip") as producer:
        producer.put(text)
        (name,) = zk_client.get_children("/zip")
        ref = large_ref.decode_ref(zk_client.get("/zip/" + name)[0])
        assert ref.compression == "zlib" and ref.chunks == 1 and ref.stored < len(text) // 50
    with _queue(zk_client, "/zip", got):
        assert got.take(1) == [text]


def test_mixed_small_and_large_items_keep_fifo_order(zk_client) -> None:
    items = []
    for i in range(40):
        body = str(i).encode()
        items.append(body + (os.urandom(int(1.5 * MiB)) if i % 7 == 3 else b""))
    got = Collect()
    with _queue(zk_client, "/mixed") as producer:
        for item in items:
            producer.put(item)  # background puts; large ones wait for those before them
        assert producer.flush_puts(30)
    with _queue(zk_client, "/mixed", got):
        out = got.take(len(items))
    assert out == items


def test_mixed_items_keep_order_in_no_lock_mode(zk_client) -> None:
    items = [b"a", os.urandom(2 * MiB), b"b", b"c", os.urandom(3 * MiB), b"d"]
    got = Collect()
    with _queue(zk_client, "/mixed-nl") as producer:
        for item in items:
            producer.put(item)
    with _queue(zk_client, "/mixed-nl", got, lock=False):
        assert got.take(len(items)) == items


def test_over_max_item_bytes_raises_before_sending(zk_client) -> None:
    with _queue(zk_client, "/cap", max_item_bytes=3 * MiB) as q:
        with pytest.raises(ItemTooLargeError):
            q.put(os.urandom(4 * MiB))
        assert q.flush_puts(5)
        assert zk_client.get_children("/cap") == []
        assert not zk_client.exists("/cap-blobs") or zk_client.get_children("/cap-blobs") == []


def test_without_the_option_a_large_item_is_still_refused(zk_client) -> None:
    with QueueBuilder.builder(zk_client, None, BytesSerializer(), "/off").build_queue() as q:
        with pytest.raises(ItemTooLargeError):
            q.put(os.urandom(2 * MiB))


def test_bad_options_are_configuration_errors(zk_client) -> None:
    b = QueueBuilder.builder(zk_client, None, BytesSerializer(), "/opts")
    with pytest.raises(ConfigurationError):
        b.large_items(max_item_bytes=0)
    with pytest.raises(ConfigurationError):
        b.large_items(compression="lz4")
    with pytest.raises(ConfigurationError):
        b.large_items(orphan_grace=-1)


def test_corrupted_chunk_is_quarantined_not_delivered(zk_client) -> None:
    good = os.urandom(3 * MiB)
    with _queue(zk_client, "/bad") as producer:
        producer.put(os.urandom(3 * MiB))
        producer.put(good)
    first = sorted(zk_client.get_children("/bad"))[0]
    ref = large_ref.decode_ref(zk_client.get("/bad/" + first)[0])
    chunk = ref.chunk_paths()[1]
    data, _ = zk_client.get(chunk)
    zk_client.set(chunk, bytes([data[0] ^ 0xFF]) + data[1:])
    got = Collect()
    with _queue(zk_client, "/bad", got) as q:
        assert got.take(1) == [good]
        assert _until(lambda: q.stats().corrupt_quarantined == 1)
    assert zk_client.get_children("/bad-quarantine") == [first]
    # the quarantined reference keeps its blob for inspection
    assert zk_client.exists(ref.blob)
    assert large_ref.BlobState.decode(zk_client.get(ref.blob)[0]).state == "quarantined"
    assert got.items.empty()


def test_missing_blob_is_quarantined_in_no_lock_mode(zk_client) -> None:
    with _queue(zk_client, "/gone") as producer:
        producer.put(os.urandom(2 * MiB))
        producer.put(b"after")
    first = sorted(zk_client.get_children("/gone"))[0]
    ref = large_ref.decode_ref(zk_client.get("/gone/" + first)[0])
    zk_client.delete(ref.blob, recursive=True)
    got = Collect()
    with _queue(zk_client, "/gone", got, lock=False) as q:
        assert got.take(1) == [b"after"]
        assert _until(lambda: q.stats().corrupt_quarantined == 1)
    assert zk_client.get_children("/gone-quarantine") == [first]


def test_ack_lost_to_a_connection_loss_is_retried_safely(zk_client, monkeypatch) -> None:
    payload = os.urandom(3 * MiB)
    with _queue(zk_client, "/lost") as producer:
        producer.put(payload)
    real = protocol.send_multi
    real_run = protocol.run_multi
    dropped = threading.Event()
    choosing = threading.Lock()

    class LostReply:
        def __init__(self, pending: Any) -> None:
            self._pending = pending

        def result(self, timeout: float | None = None) -> Any:
            self._pending.result(timeout)  # it commits; only the reply is lost
            raise ConnectionLoss("reply lost (test)")

    def first_ack(ops: list[Any]) -> bool:
        """Whether ``ops`` is the first ack (it deletes the blob); marked so BEFORE it is sent: once it commits,
        the test thread may see the queue empty and look at ``dropped`` at once."""
        if not any(isinstance(op, protocol.DeleteOp) and "/lost-blobs/" in op.path for op in ops):
            return False
        with choosing:
            if dropped.is_set():
                return False
            dropped.set()
            return True

    def send_multi(client: Any, ops: Any, **kw: Any) -> Any:
        ops = list(ops)
        drop = first_ack(ops)
        pending = real(client, ops, **kw)
        return LostReply(pending) if drop else pending

    def run_multi(client: Any, ops: Any, **kw: Any) -> Any:  # the synchronous completion path
        ops = list(ops)
        drop = first_ack(ops)
        result = real_run(client, ops, **kw)  # it commits; only the reply is lost
        if drop:
            raise ConnectionLoss("reply lost (test)")
        return result

    # An ack goes out pipelined (send_multi) or, when a flush finishes it first, synchronously (run_multi): which
    # one depends on timing, so both lose the first ack's reply.
    monkeypatch.setattr(protocol, "send_multi", send_multi)
    monkeypatch.setattr(protocol, "run_multi", run_multi)
    got = Collect()
    with _queue(zk_client, "/lost", got) as q:
        assert got.take(1) == [payload]
        assert q.flush_acks(10)
        deadline = time.monotonic() + 10
        while zk_client.get_children("/lost") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert dropped.is_set()
        stats = q.stats()
    assert zk_client.get_children("/lost") == []
    assert zk_client.get_children("/lost-blobs") == []
    assert stats.consumed == 1 and stats.lock_lost == 0
    assert got.items.empty()


def test_requeued_large_item_keeps_its_blob_and_comes_back(zk_client) -> None:
    payload = os.urandom(2 * MiB)
    seen: list[bytes] = []

    def flaky(item: bytes) -> None:
        seen.append(item)
        if len(seen) == 1:
            raise RuntimeError("first try fails")

    with _queue(zk_client, "/again") as producer:
        producer.put(payload)
    with _queue(zk_client, "/again", flaky):
        deadline = time.monotonic() + 30
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert seen == [payload, payload]
    deadline = time.monotonic() + 10
    while zk_client.get_children("/again-blobs") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert zk_client.get_children("/again-blobs") == []


def test_reaper_reclaims_a_committed_blob_whose_reference_was_deleted(zk_client) -> None:
    with _queue(zk_client, "/orphan", orphan_grace=0.5) as q:
        q.put(os.urandom(2 * MiB))
        (name,) = zk_client.get_children("/orphan")
        ref = large_ref.decode_ref(zk_client.get("/orphan/" + name)[0])
        deadline = time.monotonic() + 5
        while large_ref.BlobState.decode(zk_client.get(ref.blob)[0]).item is None and time.monotonic() < deadline:
            time.sleep(0.02)
        zk_client.delete("/orphan/" + name)  # as a foreign consumer would
        deadline = time.monotonic() + 10
        while zk_client.exists(ref.blob) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not zk_client.exists(ref.blob)
        assert q.stats().blobs_reclaimed == 1


def test_reaper_leaves_live_and_queued_blobs_alone(zk_client) -> None:
    with _queue(zk_client, "/keep", orphan_grace=0.2) as q:
        q.put(os.urandom(2 * MiB))
        time.sleep(1.5)
        assert q.stats().blobs_reclaimed == 0
        assert len(zk_client.get_children("/keep-blobs")) == 1
        # a blob being written (its owner alive) is not touched either
        reaper = blobs.blob_root("/keep")
        zk_client.create(reaper + "/b-writing", large_ref.BlobState("writing", "/keep").encode())
        zk_client.create(reaper + "/b-writing/owner", b"", ephemeral=True)
        time.sleep(1.0)
        assert zk_client.exists(reaper + "/b-writing")
        zk_client.delete(reaper + "/b-writing/owner")  # the writer is gone now
        deadline = time.monotonic() + 10
        while zk_client.exists(reaper + "/b-writing") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not zk_client.exists(reaper + "/b-writing")
        assert len(zk_client.get_children("/keep-blobs")) == 1


def test_priority_queue_with_an_executor_orders_large_items_too(zk_client) -> None:
    from concurrent.futures import ThreadPoolExecutor

    low, high = os.urandom(2 * MiB), os.urandom(3 * MiB)
    got = Collect()
    with (QueueBuilder.builder(zk_client, None, BytesSerializer(), "/prio").large_items()
          .build_priority_queue(0)) as producer:
        producer.put(low, 5)
        producer.put(b"middle", 3)
        producer.put(high, 1)
        assert producer.flush_puts(10)
    with ThreadPoolExecutor(1) as pool:
        with (QueueBuilder.builder(zk_client, got, BytesSerializer(), "/prio").lock_path("/prio-locks")
              .executor(pool).build_priority_queue(0)):
            assert got.take(3) == [high, b"middle", low]


def test_pull_mode_returns_large_items_read(zk_client) -> None:
    payload = os.urandom(2 * MiB)
    with _queue(zk_client, "/pull") as producer:
        producer.put(payload)
    q = QueueBuilder.builder(zk_client, None, BytesSerializer(), "/pull").lock_path("/pull-locks").build_queue()
    with q:
        (o,) = q.claim_nodes(5, timeout=10)
        assert o.items == [payload]
        q.complete_nodes([o])
        assert _until(lambda: zk_client.get_children("/pull-blobs") == [])
    assert zk_client.get_children("/pull") == []


@pytest.mark.parametrize("sent", [True, False], ids=["reply-lost", "never-sent"])
def test_a_put_whose_commit_is_lost_stores_the_item_once(zk_client, monkeypatch, sent) -> None:
    """The commit multi's reply is lost after it committed (the blob's state says so: no second commit), or the
    commit never reached the server (the put goes on step by step and commits once)."""
    payload = os.urandom(3 * MiB)
    real = protocol.send_multi
    hit = threading.Event()

    class Lost:
        def __init__(self, pending: Any) -> None:
            self._pending = pending

        def result(self, timeout: float | None = None) -> Any:
            if self._pending is not None:
                self._pending.result(timeout)
            raise ConnectionLoss("reply lost (test)")

    def send_multi(client: Any, ops: Any, **kw: Any) -> Any:
        ops = list(ops)
        is_commit = any(isinstance(op, protocol.SetDataOp) and "/commit-blobs/" in op.path for op in ops)
        if is_commit and not hit.is_set():
            hit.set()
            return Lost(real(client, ops, **kw) if sent else None)
        return real(client, ops, **kw)

    with _queue(zk_client, "/commit") as q:
        q.put(b"first")
        zk_client.ensure_path("/commit-blobs")  # so the first try is the pipelined one
        monkeypatch.setattr(protocol, "send_multi", send_multi)
        q.put(payload)
        monkeypatch.undo()
        assert hit.is_set()
        assert q.stats().large_items_put == 1
    assert len(zk_client.get_children("/commit")) == 2
    assert len(zk_client.get_children("/commit-blobs")) == 1
    got = Collect()
    with _queue(zk_client, "/commit", got):
        assert got.take(2) == [b"first", payload]
    assert _until(lambda: zk_client.get_children("/commit-blobs") == [])
