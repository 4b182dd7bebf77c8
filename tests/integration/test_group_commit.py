"""Group commit of foreground puts: concurrent put() calls on one queue instance share multi transactions, while
every caller still blocks until its own item is committed and gets its own result or error."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest
from kazoo.exceptions import NoNodeError
from kazoo.security import make_acl

from zkqueue.formats import framing, naming; from zkqueue.transport import protocol
from zkqueue.builder import QueueBuilder
from zkqueue.errors import ItemTooLargeError, QueuePermissionError
from zkqueue.listeners import QueuePutListener
from zkqueue.formats.serializers import StrSerializer
from zkqueue.server.testing import wait_for

QPATH = "/queues/group-commit"


class CountingListener(QueuePutListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.completed: list = []
        self.failed: list = []

    def put_completed(self, item) -> None:
        with self.lock:
            self.completed.append(item)

    def put_multi_completed(self, items) -> None:
        with self.lock:
            self.completed.append(list(items))

    def put_failed(self, item, exc) -> None:
        with self.lock:
            self.failed.append((item, exc))


def gate_first_send(monkeypatch, until, after=None) -> threading.Event:
    """Hold the first put request (the lone leader's) until ``until()`` holds; then send it, wait for its reply
    and run ``after()``. Returns an event set once the gate was reached."""
    real = protocol.send_creates
    reached = threading.Event()

    def gated(client, items, **kwargs):
        if reached.is_set():
            return real(client, items, **kwargs)
        reached.set()
        wait_for(until, timeout=20)
        pending = real(client, items, **kwargs)
        if after is not None:
            pending.result()
            after()
        return pending

    monkeypatch.setattr(protocol, "send_creates", gated)
    return reached


class MultiCounter:
    """Wraps protocol.send_creates (the group commit's multi), recording how many creates each multi carried
    and whether it committed."""

    def __init__(self, monkeypatch) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[int, bool]] = []
        real = protocol.send_creates
        counter = self

        class Counted:
            def __init__(self, pending, n) -> None:
                self.pending, self.n = pending, n

            def result(self, timeout=None):
                result = self.pending.result(timeout)
                with counter.lock:
                    counter.calls.append((self.n, result.ok))
                return result

        def counting(client, items, **kwargs):
            items = list(items)
            return Counted(real(client, items, **kwargs), len(items))

        monkeypatch.setattr(protocol, "send_creates", counting)


def _producer(client, **kw):
    b = QueueBuilder.builder(client, None, StrSerializer(), QPATH).put_in_background(False)
    if "jute_max_buffer" in kw:
        b = b.jute_max_buffer(kw["jute_max_buffer"])
    q = b.build_queue()
    q.start()
    return q


def _stored(client) -> dict[str, int]:
    """item -> sequence number of its node (asserting each item is stored exactly once)."""
    seen: dict[str, int] = {}
    for name in client.get_children(QPATH):
        if not naming.is_item_name(name):
            continue
        data, _ = client.get(naming.join(QPATH, name))
        for raw in framing.decode_items(data):
            item = raw.decode()
            assert item not in seen, f"{item} stored twice"
            seen[item] = naming.sequence_of(name)
    return seen


def _run_threads(targets) -> None:
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)


def test_16_threads_x_200_puts(zk_client, monkeypatch) -> None:
    counter = MultiCounter(monkeypatch)
    listener = CountingListener()
    q = _producer(zk_client)
    q.put_listeners.add(listener)
    n_threads, per_thread = 16, 200
    results: dict[int, list] = defaultdict(list)
    start = threading.Barrier(n_threads)

    def worker(t: int) -> None:
        start.wait()
        for i in range(per_thread):
            results[t].append(q.put(f"{t}-{i}"))

    try:
        _run_threads([lambda t=t: worker(t) for t in range(n_threads)])
    finally:
        q.close()
    total = n_threads * per_thread
    assert all(r == [True] * per_thread for r in results.values()) and len(results) == n_threads
    stored = _stored(zk_client)
    assert len(stored) == total
    for t in range(n_threads):
        seqs = [stored[f"{t}-{i}"] for i in range(per_thread)]
        assert seqs == sorted(seqs) and len(set(seqs)) == per_thread, f"thread {t} out of order"
    assert len(listener.completed) == total and not listener.failed
    assert q.stats().put_ok == total and q.stats().put_failed == 0
    # group commit happened: fewer requests than puts, and multis carried several items
    assert counter.calls, "no multi was sent under 16 concurrent threads"
    assert all(ok for _, ok in counter.calls)
    grouped = sum(n for n, _ in counter.calls)
    assert len(counter.calls) < total
    assert (total - grouped) + len(counter.calls) < total


def test_single_thread_sends_one_request_per_put(zk_client, monkeypatch) -> None:
    """A lone thread never waits for company: each put is one request of its own (its item and its producer
    marker's update, for exactly-once puts)."""
    counter = MultiCounter(monkeypatch)
    q = _producer(zk_client)
    try:
        for i in range(20):
            assert q.put(str(i)) is True
    finally:
        q.close()
    assert counter.calls == [(1, True)] * 20
    stored = _stored(zk_client)
    assert [stored[str(i)] for i in range(20)] == sorted(stored.values())


def test_failing_group_gives_each_caller_its_own_outcome(zk_client, monkeypatch) -> None:
    """One multi holding good puts, a put under a missing parent (NoNode) and one under a node we may not
    write (NoAuth): the multi fails as a whole, and every caller still gets its precise outcome."""
    counter = MultiCounter(monkeypatch)
    listener = CountingListener()
    q = _producer(zk_client)
    q.put_listeners.add(listener)
    zk_client.create(QPATH + "/readonly", b"", acl=[make_acl("world", "anyone", read=True)])

    # Hold the first put in flight until every other caller waits, so they all form ONE group.
    n_good = 6
    n_callers = n_good + 2
    gate_done = gate_first_send(monkeypatch, lambda: q.producer.group_waiting == n_callers - 1)
    outcomes: dict[str, object] = {}

    def put(name: str, prefix: str) -> None:
        try:
            outcomes[name] = q._put_framed(q._frame([name]), prefix, name)
        except Exception as exc:
            outcomes[name] = exc

    first = threading.Thread(target=put, args=("first", QPATH + "/queue-"))
    first.start()
    wait_for(gate_done.is_set)
    targets = [lambda i=i: put(f"good-{i}", QPATH + "/queue-") for i in range(n_good - 1)]
    targets.append(lambda: put("nonode", QPATH + "/missing/queue-"))
    targets.append(lambda: put("noauth", QPATH + "/readonly/queue-"))
    try:
        _run_threads(targets)
        first.join(30)
    finally:
        q.close()
    assert outcomes["first"] is True
    assert all(outcomes[f"good-{i}"] is True for i in range(n_good - 1)), outcomes
    assert isinstance(outcomes["nonode"], NoNodeError), outcomes
    assert isinstance(outcomes["noauth"], QueuePermissionError), outcomes
    # the group went out as one multi, which failed as a whole
    assert (n_callers - 1, False) in counter.calls, counter.calls
    stored = _stored(zk_client)
    assert set(stored) == {"first"} | {f"good-{i}" for i in range(n_good - 1)}
    assert sorted(map(str, listener.completed)) == sorted(stored)
    assert not listener.failed  # foreground failures are raised, as before
    assert q.stats().put_ok == n_good and q.stats().put_failed == 2


def test_oversized_item_among_good_ones(zk_client) -> None:
    q = _producer(zk_client, jute_max_buffer=64 * 1024)
    errors: list = []
    ok: list = []

    def good(t: int) -> None:
        for i in range(30):
            ok.append(q.put(f"{t}-{i}"))

    def big() -> None:
        for _ in range(5):
            with pytest.raises(ItemTooLargeError):
                q.put("x" * (70 * 1024))
            errors.append(1)

    try:
        _run_threads([lambda t=t: good(t) for t in range(4)] + [big])
    finally:
        q.close()
    assert ok == [True] * 120 and len(errors) == 5
    assert len(_stored(zk_client)) == 120
    assert q.stats().put_ok == 120 and q.stats().put_failed == 0


def test_queue_deleted_while_a_group_waits(zk_client, monkeypatch) -> None:
    """The queue node is deleted while a group waits: every caller of the group gets its own NoNodeError."""
    q = _producer(zk_client)
    n_waiting = 5
    gate_done = gate_first_send(monkeypatch, lambda: q.producer.group_waiting == n_waiting,
                                after=lambda: zk_client.delete(QPATH, recursive=True))
    outcomes: dict[int, object] = {}

    def put(i: int) -> None:
        try:
            outcomes[i] = q.put(str(i))
        except Exception as exc:
            outcomes[i] = exc

    first = threading.Thread(target=put, args=(0,))
    first.start()
    wait_for(gate_done.is_set)
    try:
        _run_threads([lambda i=i: put(i) for i in range(1, n_waiting + 1)])
        first.join(30)
    finally:
        q.close()
    assert outcomes[0] is True
    errors = [outcomes[i] for i in range(1, n_waiting + 1)]
    assert all(isinstance(e, NoNodeError) for e in errors), outcomes
    assert len({id(e) for e in errors}) == n_waiting  # each caller its own exception object
    assert q.stats().put_ok == 1 and q.stats().put_failed == n_waiting
