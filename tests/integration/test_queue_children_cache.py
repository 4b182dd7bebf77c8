"""ChildrenCache on a real ZooKeeper: versions, eager and lazy listing, recreation, resync after expiry."""

from __future__ import annotations

from zkqueue.engine.children import ChildrenCache
from zkqueue.server.testing import expire_session, wait_for

PATH = "/cache/node"


def test_eager_cache_follows_changes_with_increasing_versions(zk_client) -> None:
    zk_client.ensure_path(PATH)
    cache = ChildrenCache(zk_client, PATH)
    cache.start()
    try:
        wait_for(lambda: cache.version >= 1)
        assert cache.snapshot.children == ()
        v = cache.version
        zk_client.create(f"{PATH}/a")
        snap = cache.wait_for_change(v, timeout=10)
        assert snap.version > v
        wait_for(lambda: cache.snapshot.children == ("a",))
        zk_client.create(f"{PATH}/b")
        wait_for(lambda: sorted(cache.snapshot.children) == ["a", "b"])
        assert cache.snapshot.cversion == 2
    finally:
        cache.close()


def test_wait_for_change_times_out_and_returns_current(zk_client) -> None:
    zk_client.ensure_path(PATH)
    cache = ChildrenCache(zk_client, PATH)
    cache.start()
    try:
        wait_for(lambda: cache.version >= 1)
        v = cache.version
        snap = cache.wait_for_change(v, timeout=0.2)
        assert snap.version == v
    finally:
        cache.close()


def test_lazy_cache_relists_only_when_asked(zk_client) -> None:
    zk_client.ensure_path(PATH)
    cache = ChildrenCache(zk_client, PATH, lazy=True)
    cache.start()
    try:
        wait_for(lambda: cache.version >= 1)
        v = cache.version
        listings = cache.listings
        for name in ("a", "b", "c"):
            zk_client.create(f"{PATH}/{name}")
        wait_for(lambda: cache.stale)
        assert cache.listings == listings and cache.version == v  # no relisting by itself
        assert cache.changed_since(v)
        snap = cache.wait_for_change(v, timeout=10)
        assert sorted(snap.children) == ["a", "b", "c"]
        assert not cache.stale
    finally:
        cache.close()


def test_deleted_node_is_recreated(zk_client) -> None:
    zk_client.ensure_path(PATH)
    cache = ChildrenCache(zk_client, PATH)
    cache.start()
    try:
        wait_for(lambda: cache.version >= 1)
        zk_client.delete(PATH)
        wait_for(lambda: cache.recreated == 1)
        wait_for(lambda: zk_client.exists(PATH) is not None)
        zk_client.create(f"{PATH}/after")
        wait_for(lambda: cache.snapshot.children == ("after",))
    finally:
        cache.close()


def test_resync_after_session_expiry(zk_client_factory) -> None:
    client = zk_client_factory()
    other = zk_client_factory()
    client.ensure_path(PATH)
    cache = ChildrenCache(client, PATH)
    cache.start()
    try:
        wait_for(lambda: cache.version >= 1)
        expire_session(client)
        wait_for(lambda: cache.resyncs >= 1)
        other.create(f"{PATH}/x")  # only a re-armed watch can see this
        wait_for(lambda: cache.snapshot.children == ("x",))
    finally:
        cache.close()


def test_closed_cache_wakes_waiters(zk_client) -> None:
    import threading

    zk_client.ensure_path(PATH)
    cache = ChildrenCache(zk_client, PATH)
    cache.start()
    wait_for(lambda: cache.version >= 1)
    result = []
    t = threading.Thread(target=lambda: result.append(cache.wait_for_change(cache.version)))
    t.start()
    cache.close()
    t.join(5)
    assert not t.is_alive() and result


def test_a_listing_is_applied_before_the_replies_that_came_after_it(zk_client_factory) -> None:
    """A listing's reply is applied as it is read, not later on kazoo's completion thread: with that thread held,
    the cache still follows a new child, so a request sent after the listing never sees the older snapshot."""
    import threading

    client = zk_client_factory()
    other = zk_client_factory()
    client.ensure_path(PATH)
    cache = ChildrenCache(client, PATH)
    cache.start()
    gate = threading.Event()
    try:
        wait_for(lambda: cache.version >= 1)
        client.handler.completion_queue.put(lambda: gate.wait(30))  # kazoo's completion thread is held
        other.create(f"{PATH}/x")
        wait_for(lambda: cache.snapshot.children == ("x",), timeout=10)
        other.create(f"{PATH}/y")
        wait_for(lambda: sorted(cache.snapshot.children) == ["x", "y"], timeout=10)
    finally:
        gate.set()
        cache.close()
