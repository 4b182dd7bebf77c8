"""Exactly-once puts on a real ZooKeeper: the producer markers every put multi advances, a restarted producer
with the same id, reclaiming the markers of producers that are gone, and a marker reclaimed under an idle
producer."""

from __future__ import annotations

import pytest

from zkqueue import QueueBuilder, StrSerializer
from zkqueue.engine.put_markers import put_committed, reclaim
from zkqueue.errors import ConfigurationError
from zkqueue.formats import framing


def queue(client, path: str, *, background: bool = False, producer_id: str | None = None):
    builder = QueueBuilder.builder(client, None, StrSerializer(), path).put_in_background(background)
    if producer_id is not None:
        builder = builder.producer_id(producer_id)
    return builder.build_queue()


def items(client, path: str) -> list[str]:
    return sorted(p.decode() for n in client.get_children(path)
                  for p in framing.decode_items(client.get(f"{path}/{n}")[0]))


def test_every_put_advances_its_lane_marker_and_the_queue_holds_only_items(zk_client) -> None:
    with queue(zk_client, "/pm/a", producer_id="svc-1") as fg:
        for i in range(5):
            assert fg.put(f"f{i}") is True
        fg.put_multi(["m1", "m2"])
    with queue(zk_client, "/pm/a", background=True, producer_id="svc-1") as bg:
        for i in range(50):
            bg.put(f"b{i}")
        assert bg.flush_puts(30)
    assert sorted(zk_client.get_children("/pm/a-producers")) == ["svc-1.bg", "svc-1.fg"]
    assert zk_client.get("/pm/a-producers/svc-1.fg")[0] == b"6"  # 5 puts and 1 put_multi
    assert 1 <= int(zk_client.get("/pm/a-producers/svc-1.bg")[0]) <= 50  # background puts go in batches
    assert all(n.startswith("queue-") for n in zk_client.get_children("/pm/a"))  # Curator sees only items
    assert items(zk_client, "/pm/a") == sorted([f"f{i}" for i in range(5)] + ["m1", "m2"] +
                                               [f"b{i}" for i in range(50)])
    assert put_committed(zk_client, "/pm/a-producers/svc-1.fg", 6)
    assert not put_committed(zk_client, "/pm/a-producers/svc-1.fg", 7)
    assert not put_committed(zk_client, "/pm/a-producers/nobody.fg", 1)


def test_a_restarted_producer_continues_its_numbers(zk_client) -> None:
    for run in range(3):
        with queue(zk_client, "/pm/restart", producer_id="etl") as q:
            q.put(f"run-{run}")
        assert zk_client.get("/pm/restart-producers/etl.fg")[0] == str(run + 1).encode()
    assert items(zk_client, "/pm/restart") == ["run-0", "run-1", "run-2"]


def test_a_marker_reclaimed_under_an_idle_producer_is_created_again(zk_client) -> None:
    with queue(zk_client, "/pm/idle", producer_id="idle") as q:
        q.put("one")
        zk_client.delete("/pm/idle-producers/idle.fg")  # as reclaim does after the grace period
        assert q.put("two") is True
        assert zk_client.exists("/pm/idle-producers/idle.fg") is not None
    assert items(zk_client, "/pm/idle") == ["one", "two"]


def test_reclaim_deletes_markers_untouched_for_the_grace_period_except_its_own(zk_client) -> None:
    for pid in ("gone-1", "gone-2", "me"):
        with queue(zk_client, "/pm/gc", producer_id=pid) as q:
            q.put(pid)
    own = frozenset({"/pm/gc-producers/me.fg"})
    assert reclaim(zk_client, "/pm/gc", grace=3600.0, own=own) == 0  # all touched within the hour
    assert sorted(zk_client.get_children("/pm/gc-producers")) == ["gone-1.fg", "gone-2.fg", "me.fg"]
    assert reclaim(zk_client, "/pm/gc", grace=0.0, own=own) == 2
    assert zk_client.get_children("/pm/gc-producers") == ["me.fg"]
    assert reclaim(zk_client, "/pm/gc-other", grace=0.0) == 0  # no markers folder: nothing to do


@pytest.mark.parametrize("bad", ["", "a/b", "a.b", "x" * 201])
def test_bad_producer_ids_are_refused(zk_client, bad: str) -> None:
    with pytest.raises(ConfigurationError, match="producer_id"):
        QueueBuilder.builder(zk_client, None, StrSerializer(), "/pm/bad").producer_id(bad)


def test_a_put_whose_reply_is_lost_while_zookeeper_stays_away_raises_put_outcome_unknown(zk_server, zk_chroot,
                                                                                       zk_client) -> None:
    """The put goes out through a proxy that then stalls: its reply never comes and no connection can be made
    within put_outcome_wait, so the put raises PutOutcomeUnknown with its marker; once ZooKeeper is back,
    put_committed answers it from any session."""
    from kazoo.client import KazooClient

    from zkqueue import PutOutcomeUnknown
    from zkqueue.server.testing_proxy import TcpProxy

    if "," in zk_server.connect_string:
        pytest.skip("the proxy fronts a single server")
    zk_client.ensure_path("/pm/away")
    with TcpProxy(zk_server.connect_string) as proxy:
        client = KazooClient(hosts=proxy.connect_string + zk_chroot, timeout=4.0)
        client.start(timeout=30)
        try:
            q = (QueueBuilder.builder(client, None, StrSerializer(), "/pm/away").put_in_background(False)
                 .producer_id("away").put_outcome_wait(3.0).build_queue())
            with q:
                assert q.put("before") is True
                proxy.stall()  # the next request is not delivered, and no reply comes
                with pytest.raises(PutOutcomeUnknown) as caught:
                    q.put("lost")
                assert caught.value.marker == "/pm/away-producers/away.fg" and caught.value.batch == 2
                proxy.heal()
        finally:
            client.stop()
            client.close()
    assert put_committed(zk_client, caught.value.marker, caught.value.batch) is ("lost" in items(zk_client, "/pm/away"))
    assert items(zk_client, "/pm/away").count("before") == 1


def test_background_puts_keep_put_order_when_batches_in_flight_lose_their_replies(zk_server, zk_chroot,
                                                                                  zk_client) -> None:
    """Three full batches are in flight when the connection drops, with a fourth waiting: none commits, the first
    is sent again once connected, and the waiting one must not go out before the other two are sent again (it
    would take the marker's next version and commit ahead of them)."""
    import threading

    from kazoo.client import KazooClient

    from zkqueue.server.testing import thread_is_in, wait_for
    from zkqueue.server.testing_proxy import TcpProxy

    if "," in zk_server.connect_string:
        pytest.skip("the proxy fronts a single server")
    count = 4005  # three full multis in flight, a fourth waiting, and a few more
    zk_client.ensure_path("/pm/order")
    gate, held, going_on = threading.Event(), threading.Event(), threading.Event()

    class HoldThePutThread:
        """Holds the put thread after the first put, so that the next ones are all queued when it goes on."""

        def put_completed(self, item: str) -> None:
            if item == "first":
                held.set()
                gate.wait(30)
                going_on.set()

    with TcpProxy(zk_server.connect_string) as proxy:
        client = KazooClient(hosts=proxy.connect_string + zk_chroot, timeout=10.0)
        client.start(timeout=30)
        try:
            with queue(client, "/pm/order", background=True, producer_id="order") as q:
                q.put_listeners.add(HoldThePutThread())
                q.put("first")
                assert held.wait(30)
                put_thread = next(t for t in threading.enumerate() if t.name == "zkqueue-put-/pm/order")
                proxy.stall()  # what goes out now gets no reply
                for i in range(count):
                    q.put(str(i))
                gate.set()
                assert going_on.wait(30)
                # blocked on the first batch's reply: the two after it are sent too (the put thread sends full
                # batches while fewer than three are in flight, then waits for the oldest)
                wait_for(lambda: thread_is_in(put_thread, "transport/requests.py", "get"), timeout=30, interval=0.01)
                proxy.drop()  # the three batches sent are lost with the connection
                proxy.heal()
                assert q.flush_puts(60)
        finally:
            client.stop()
            client.close()
    stored = [p.decode() for n in sorted(zk_client.get_children("/pm/order"))
              for p in framing.decode_items(zk_client.get(f"/pm/order/{n}")[0])]
    assert stored == ["first"] + [str(i) for i in range(count)]
