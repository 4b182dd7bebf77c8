"""QueueSharder: Curator's TestQueueSharder, plus leader election and the fixed gaps (foreign children,
as many shards as needed, no duplicate initial shards)."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import pytest

from zkqueue.builder import QueueBuilder
from zkqueue.errors import ConfigurationError, QueueNotStartedError
from zkqueue.formats.serializers import JsonSerializer
from zkqueue.recipes.sharder import LeaderLatch, QueueSharder, QueueSharderPolicies, initial_shard_name, is_shard_name
from zkqueue.server.testing import wait_for

QPATH = "/family/sharded"
LEADER = "/family/sharded-leader"


def producer_allocator(client, path):
    return QueueBuilder.builder(client, None, JsonSerializer(), path).put_in_background(False).build_queue()


def policies(threshold: int, check: float = 0.02, max_queues: int = 10) -> QueueSharderPolicies:
    return QueueSharderPolicies.builder().new_queue_threshold(threshold).threshold_check(check).max_queues(
        max_queues).build()


def shard_children(client) -> list[str]:
    return [c for c in client.get_children(QPATH) if is_shard_name(c)]


def test_policies_defaults_and_validation() -> None:
    p = QueueSharderPolicies()
    assert (p.new_queue_threshold, p.threshold_check, p.max_queues) == (10_000, 30.0, 10)
    for bad in ({"new_queue_threshold": 0}, {"threshold_check": 0}, {"max_queues": -1}, {"max_queues": True}):
        with pytest.raises(ConfigurationError):
            QueueSharderPolicies(**bad)


def test_distribution(zk_client) -> None:
    """Curator testDistribution: threshold 100, frequent checks, 1000 puts through get_queue(): the load is
    spread over several shards and nothing was lost."""
    with QueueSharder(zk_client, producer_allocator, QPATH, LEADER, policies(100)) as sharder:
        wait_for(sharder.has_leadership, timeout=30)
        for i in range(1000):
            sharder.get_queue().put(i)
        counts = {p: zk_client.exists(p).numChildren for p in sharder.get_queue_paths()}
    assert sum(counts.values()) == 1000
    assert 1 < len(counts) <= 10
    assert sum(1 for c in counts.values() if c > 0) > 1, counts  # a shard added at the very end may be empty
    assert sum(counts.values()) / len(counts) >= 90


def test_sharder_watch_sync(zk_client, zk_client_factory) -> None:
    """Curator testSharderWatchSync: two sharders, threshold 2, 20 puts: shards are added and both
    instances end up knowing the same shards."""
    a = QueueSharder(zk_client, producer_allocator, QPATH, LEADER, policies(2))
    b = QueueSharder(zk_client_factory(), producer_allocator, QPATH, LEADER, policies(2))
    with a, b:
        for i in range(20):
            (a if i % 2 else b).get_queue().put(i)
        wait_for(lambda: max(a.get_shard_qty(), b.get_shard_qty()) > 1, timeout=30)
        wait_for(lambda: a.get_queue_paths() == b.get_queue_paths(), timeout=30)
        assert [a.has_leadership(), b.has_leadership()].count(True) == 1


def test_sharded_consumers_get_everything_and_reopen_finds_shards(zk_client, zk_client_factory) -> None:
    """Curator testSimpleDistributedQueue: threshold 2, 8 puts, consumers on every shard get all 8; a
    reopened sharder finds the same shards."""
    got: list = []
    lock = threading.Lock()

    def record(item) -> None:
        with lock:
            got.append(item)

    def consumer_allocator(client, path):
        return (QueueBuilder.builder(client, record, JsonSerializer(), path)
                .put_in_background(False).quarantine_path(path.replace("/sharded/", "/sharded-quarantine/"))
                .build_queue())

    producer = QueueSharder(zk_client, producer_allocator, QPATH, LEADER, policies(2, max_queues=4))
    with producer:
        wait_for(producer.has_leadership, timeout=30)
        for i in range(8):
            producer.get_queue().put(i)
            if i == 3:  # let the leader see the first shard fill up
                wait_for(lambda: producer.get_shard_qty() > 1, timeout=30)
        with QueueSharder(zk_client_factory(), consumer_allocator, QPATH, LEADER, policies(2)) as consumer:
            wait_for(lambda: len(got) == 8, timeout=30)
            assert sorted(got) == list(range(8))
            wait_for(lambda: consumer.get_shard_qty() == producer.get_shard_qty(), timeout=30)
        qty = producer.get_shard_qty()
        assert qty > 1
    with QueueSharder(zk_client_factory(), producer_allocator, QPATH, LEADER, policies(2)) as reopened:
        assert reopened.get_shard_qty() == qty


def test_foreign_children_ignored(zk_client) -> None:
    """Curator treats every child of the queue path as a shard; ours only ``queue-<uuid>``."""
    zk_client.ensure_path(QPATH + "/foreign")
    zk_client.ensure_path(QPATH + "/queue-notauuid")
    zk_client.ensure_path(f"{QPATH}/queue-{uuid.uuid4()}-quarantine")
    with QueueSharder(zk_client, producer_allocator, QPATH, LEADER, policies(10)) as sharder:
        paths = sharder.get_queue_paths()
        assert len(paths) == 1 and is_shard_name(paths[0].rsplit("/", 1)[-1])
        sharder.check_threshold()
        assert sharder.get_queue_paths() == paths


def test_no_duplicate_initial_shards(zk_client_factory) -> None:
    """Curator can create two initial shards when instances start together; the deterministic initial name
    makes every instance create the same one."""
    clients = [zk_client_factory() for _ in range(5)]
    sharders = [QueueSharder(c, producer_allocator, QPATH, LEADER, policies(10, check=30)) for c in clients]
    barrier = threading.Barrier(len(sharders))

    def start(s) -> None:
        barrier.wait(30)
        s.start()

    threads = [threading.Thread(target=start, args=(s,)) for s in sharders]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        children = shard_children(clients[0])
        assert len(children) == 1
        czxid = clients[0].exists(QPATH).czxid
        assert children == [initial_shard_name(QPATH, czxid)]
        assert str(uuid.UUID(children[0][len("queue-"):])) == children[0][len("queue-"):]  # Curator-readable
        assert all(s.get_queue_paths() == [f"{QPATH}/{children[0]}"] for s in sharders)
    finally:
        for s in sharders:
            s.close()


def test_adds_as_many_shards_as_needed(zk_client) -> None:
    """Curator adds one shard per check; when every shard is over the threshold the leader adds enough for
    the items present to fit (55 items, threshold 10 -> 6 shards), then no more while some have room."""
    with QueueSharder(zk_client, producer_allocator, QPATH, LEADER, policies(10, check=3600)) as sharder:
        wait_for(sharder.has_leadership, timeout=30)
        q = sharder.get_queue()
        for i in range(55):
            q.put(i)
        sharder.check_threshold()
        assert sharder.get_shard_qty() == 6
        assert len(shard_children(zk_client)) == 6
        sharder.check_threshold()
        assert sharder.get_shard_qty() == 6


def test_max_queues_respected(zk_client) -> None:
    with QueueSharder(zk_client, producer_allocator, QPATH, LEADER, policies(5, check=3600, max_queues=3)) as s:
        wait_for(s.has_leadership, timeout=30)
        q = s.get_queue()
        for i in range(100):
            q.put(i)
        s.check_threshold()
        assert s.get_shard_qty() == 3
        s.check_threshold()
        assert s.get_shard_qty() == 3


def test_only_the_leader_adds_shards(zk_client, zk_client_factory) -> None:
    leader = QueueSharder(zk_client, producer_allocator, QPATH, LEADER, policies(5, check=3600))
    follower = QueueSharder(zk_client_factory(), producer_allocator, QPATH, LEADER, policies(5, check=3600))
    with leader:
        wait_for(leader.has_leadership, timeout=30)
        with follower:
            q = follower.get_queue()
            for i in range(10):
                q.put(i)
            follower.check_threshold()
            assert follower.get_shard_qty() == 1 and not follower.has_leadership()
            leader.check_threshold()
            assert leader.get_shard_qty() > 1
            follower.check_threshold()  # discovers the new shards
            assert follower.get_queue_paths() == leader.get_queue_paths()


def test_leader_latch_failover_and_expiry(zk_client_factory) -> None:
    from zkqueue.server.testing import expire_session

    c1, c2 = zk_client_factory(), zk_client_factory()
    first, second = LeaderLatch(c1, LEADER, "one"), LeaderLatch(c2, LEADER, "two")
    first.start()
    assert first.await_leadership(30)
    second.start()
    names = wait_for(lambda: (lambda n: n if len(n) == 2 else None)(c2.get_children(LEADER)), timeout=30)
    assert len(names) == 2 and all(n.startswith("_c_") and "-latch-" in n for n in names)  # Curator's names
    assert not second.has_leadership()
    expire_session(c1)  # the leader's session ends: the follower takes over, the old leader rejoins
    assert second.await_leadership(30)
    wait_for(lambda: len(c2.get_children(LEADER)) == 2, timeout=30)
    assert not first.has_leadership()
    second.close()
    assert first.await_leadership(30)
    first.close()
    assert c1.get_children(LEADER) == []


def test_get_queue_before_start_and_bad_args(zk_client) -> None:
    s = QueueSharder(zk_client, producer_allocator, QPATH, LEADER, policies(10))
    with pytest.raises(QueueNotStartedError):
        s.get_queue()
    with pytest.raises(ConfigurationError):
        QueueSharder(zk_client, producer_allocator, QPATH, QPATH)
    with pytest.raises(ConfigurationError):
        QueueSharder(zk_client, object(), QPATH, LEADER)


def test_put_spread_uses_preferred_shards(zk_client) -> None:
    """A shard over the threshold is not preferred; puts go to shards with room."""
    with QueueSharder(zk_client, producer_allocator, QPATH, LEADER, policies(10, check=3600)) as s:
        wait_for(s.has_leadership, timeout=30)
        first = s.get_queue()
        for i in range(10):
            first.put(i)
        s.check_threshold()
        assert s.get_shard_qty() == 2
        targets = Counter(s.get_queue().queue_path for _ in range(50))
        assert first.queue_path not in targets


def test_started_once(zk_client) -> None:
    from zkqueue.errors import QueueStateError

    s = QueueSharder(zk_client, producer_allocator, QPATH, LEADER, policies(10, check=3600))
    with s:
        with pytest.raises(QueueStateError):
            s.start()
    with pytest.raises(QueueStateError):
        s.start()  # closed: build a new one
