"""SimpleDistributedQueue: Curator's TestSimpleDistributedQueue, plus CURATOR-308 and reconnects."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from zkqueue.errors import ConfigurationError
from zkqueue.recipes.simple import NoSuchElementError, SimpleDistributedQueue
from zkqueue.server.testing import expire_session, wait_for

QPATH = "/family/simple"


def make(client) -> SimpleDistributedQueue:
    return SimpleDistributedQueue(client, QPATH)


def test_offer_and_remove_same_client(zk_client) -> None:
    """testOffer1."""
    q = make(zk_client)
    assert q.offer(b"hello") is True
    assert q.remove() == b"hello"
    assert zk_client.get_children(QPATH) == []


def test_offer_and_remove_across_clients(zk_client_factory) -> None:
    """testOffer2."""
    a, b = make(zk_client_factory()), make(zk_client_factory())
    a.offer(b"x")
    assert b.remove() == b"x"


def test_take(zk_client) -> None:
    """testTake1."""
    q = make(zk_client)
    q.offer(b"t")
    assert q.take() == b"t"


def test_remove_on_empty_raises(zk_client) -> None:
    """testRemova1 (sic): remove()/element() raise on an empty (or missing) queue; poll()/peek() give None."""
    q = make(zk_client)
    with pytest.raises(NoSuchElementError):
        q.remove()
    with pytest.raises(NoSuchElementError):
        q.element()
    assert q.poll() is None and q.peek() is None
    assert isinstance(NoSuchElementError("x"), LookupError)


@pytest.mark.parametrize(("n", "m"), [(10, 2), (400, 400)])
def test_remove_last_removed_is_m_minus_1(zk_client, n, m) -> None:
    """testRemove2 / testRemove3 (1000 shortened to 400)."""
    q = make(zk_client)
    for i in range(n):
        q.offer(str(i).encode())
    last = None
    for _ in range(m):
        last = q.remove()
    assert last == str(m - 1).encode()


@pytest.mark.parametrize(("n", "m"), [(1, 0), (10, 2), (200, 100), (200, 199)])
def test_element_after_removes(zk_client, n, m) -> None:
    """testElement1-4 (1000 shortened to 200: the same paths, less time)."""
    q = make(zk_client)
    for i in range(n):
        q.offer(str(i).encode())
    for _ in range(m):
        q.remove()
    assert q.element() == str(m).encode()
    assert q.peek() == str(m).encode()


def test_poll_with_timeout_on_empty(zk_client) -> None:
    """testPollWithTimeout: an empty poll(timeout) returns None."""
    assert make(zk_client).poll(0.3) is None


@pytest.mark.parametrize("times", [1, 2])
def test_take_wait(zk_client, zk_client_factory, times) -> None:
    """testTakeWait1/2: a blocked take() returns items offered later (once, then twice in a row)."""
    q = make(zk_client)
    other = make(zk_client_factory())
    with ThreadPoolExecutor(1) as pool:
        for i in range(times):
            fut = pool.submit(q.take)
            wait_for(lambda: waiting_take(zk_client))
            assert not fut.done()
            other.offer(f"late-{i}".encode())
            assert fut.result(30) == f"late-{i}".encode()


def test_raw_bytes_and_foreign_children(zk_client) -> None:
    """Items are raw bytes in qn- nodes (no framing); children with other names are ignored."""
    q = make(zk_client)
    zk_client.ensure_path(QPATH + "/other")
    zk_client.create(QPATH + "/queue-0000000001", b"not ours")
    q.offer(b"\x00\x01raw")
    names = [n for n in zk_client.get_children(QPATH) if n.startswith("qn-")]
    assert len(names) == 1 and zk_client.get(QPATH + "/" + names[0])[0] == b"\x00\x01raw"
    assert q.remove() == b"\x00\x01raw"
    assert q.poll() is None
    assert sorted(zk_client.get_children(QPATH)) == ["other", "queue-0000000001"]


def test_no_double_delivery_with_competing_takers(zk_client_factory) -> None:
    producer = make(zk_client_factory())
    for i in range(200):
        producer.offer(str(i).encode())
    takers = [make(zk_client_factory()) for _ in range(3)]
    got: list = []
    lock = threading.Lock()

    def drain(q) -> None:
        while (item := q.poll()) is not None:
            with lock:
                got.append(item)

    threads = [threading.Thread(target=drain, args=(t,)) for t in takers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got, key=int) == [str(i).encode() for i in range(200)]


def waiting_take(client) -> bool:
    """True once ``client`` holds a child watch on the queue node (a take() is waiting on it)."""
    return bool(client._child_watchers.get(client.chroot + QPATH))


def test_curator_308_take_survives_reaped_parent(zk_client, zk_client_factory) -> None:
    """CURATOR-308 (testHangFromContainerLoss): the queue node vanishes (a container reaped) while take()
    waits; take() must still return the next offered item. Ten rounds."""
    q = make(zk_client)
    admin = zk_client_factory()
    other = make(zk_client_factory())
    with ThreadPoolExecutor(1) as pool:
        for i in range(10):
            fut = pool.submit(q.take, 60)
            wait_for(lambda: waiting_take(zk_client) and not fut.done())
            admin.delete(QPATH, recursive=True)  # the reaper
            other.offer(f"r{i}".encode())
            assert fut.result(60) == f"r{i}".encode()


def test_take_survives_session_expiry(zk_client, zk_client_factory) -> None:
    """A blocked take() keeps waiting through a session expiry (kazoo drops watches) and gets the item."""
    q = make(zk_client)
    other = make(zk_client_factory())
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(q.take, 60)
        wait_for(lambda: waiting_take(zk_client))
        expire_session(zk_client)
        assert not fut.done()
        other.offer(b"after-expiry")
        assert fut.result(60) == b"after-expiry"


def test_bad_arguments(zk_client) -> None:
    q = make(zk_client)
    with pytest.raises(TypeError):
        q.offer("text")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        q.poll(-1)
    with pytest.raises(ConfigurationError):
        SimpleDistributedQueue(zk_client, "/")


@pytest.mark.faults
def test_take_survives_server_restart(zk_private_server) -> None:
    """A blocked take() keeps waiting through a connection loss (server restarted, session kept) and gets an
    item offered after the reconnect."""
    from zkqueue.server.testing import make_client

    client = make_client(zk_private_server.connect_string, timeout=30.0)
    other_client = make_client(zk_private_server.connect_string, timeout=30.0)
    try:
        q, other = SimpleDistributedQueue(client, QPATH), SimpleDistributedQueue(other_client, QPATH)
        with ThreadPoolExecutor(1) as pool:
            fut = pool.submit(q.take, 90)
            wait_for(lambda: client._child_watchers.get(QPATH))
            zk_private_server.restart(0)
            wait_for(lambda: client.connected and other_client.connected, timeout=60)
            assert not fut.done()
            other.offer(b"after-restart")
            assert fut.result(90) == b"after-restart"
    finally:
        for c in (client, other_client):
            c.stop()
            c.close()
