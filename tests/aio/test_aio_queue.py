"""AsyncQueue on a real ZooKeeper: puts, multi puts and async iteration, against the sync engine queue; nodes
acked only once their items were handed out, and given back on close."""

from __future__ import annotations

import asyncio

import pytest

from zkqueue.aio import NOTHING, AsyncQueue
from zkqueue.engine.queue import DistributedQueue
from zkqueue.errors import QueueClosedError
from zkqueue.formats.serializers import JsonSerializer

PATH = "/queues/raw"


def items_in(client) -> int:
    return len([n for n in client.get_children(PATH) if n.startswith("queue-")])


@pytest.mark.asyncio
async def test_put_put_multi_and_async_for(zk_client) -> None:
    async with AsyncQueue(zk_client, PATH, JsonSerializer()) as q:
        assert await q.put({"n": 0})
        assert await q.put_multi([{"n": 1}, {"n": 2}])
        await asyncio.gather(*(q.put({"n": i}) for i in range(3, 30)))
        assert items_in(zk_client) == 29  # the multi is one node
        got = []
        async for item in q:
            got.append(item["n"])
            if len(got) == 30:
                break
        assert sorted(got) == list(range(30))
        assert await q.get(timeout=0.2) is NOTHING
        assert items_in(zk_client) == 0  # every node acked once handed out
    with pytest.raises(QueueClosedError):
        await q.put({})


@pytest.mark.asyncio
async def test_a_node_not_fully_handed_out_is_given_back_on_close(zk_client) -> None:
    async with AsyncQueue(zk_client, PATH, JsonSerializer()) as q:
        await q.put_multi(["a", "b", "c"])
        await q.put("d")
        assert await q.get(timeout=5) == "a"  # the rest of that node is still held
        assert items_in(zk_client) == 2
    async with AsyncQueue(zk_client, PATH, JsonSerializer()) as q2:
        got = [await q2.get(timeout=5) for _ in range(4)]
        assert sorted(got) == ["a", "b", "c", "d"]  # redelivered: at least once


@pytest.mark.asyncio
async def test_round_trip_with_the_sync_engine_queue(zk_client) -> None:
    received: list[str] = []

    class Consumer:
        def consume_message(self, item: str) -> None:
            received.append(item)

    sync = DistributedQueue(zk_client, None, JsonSerializer(), PATH, lock_path=PATH + "-locks",
                            put_in_background=False)
    with sync:
        for i in range(5):
            sync.put(f"sync-{i}")
        async with AsyncQueue(zk_client, PATH, JsonSerializer()) as q:
            assert sorted([await q.get(timeout=5) for _ in range(5)]) == [f"sync-{i}" for i in range(5)]
            await q.put_multi(["async-0", "async-1"])
    consumer = DistributedQueue(zk_client, Consumer(), JsonSerializer(), PATH, lock_path=PATH + "-locks")
    with consumer:
        for _ in range(100):
            if len(received) == 2:
                break
            await asyncio.sleep(0.05)
    assert received == ["async-0", "async-1"]


@pytest.mark.asyncio
async def test_an_exception_in_the_block_gives_the_current_node_back(zk_client) -> None:
    with pytest.raises(RuntimeError):
        async with AsyncQueue(zk_client, PATH, JsonSerializer()) as q:
            await q.put("x")
            async for item in q:
                raise RuntimeError(f"processing {item} failed")
    async with AsyncQueue(zk_client, PATH, JsonSerializer()) as q:
        assert await q.get(timeout=5) == "x"
    assert items_in(zk_client) == 0  # a clean exit acks the node of the last item handed out


@pytest.mark.asyncio
async def test_a_cancelled_iteration_loses_nothing(zk_client) -> None:
    async with AsyncQueue(zk_client, PATH, JsonSerializer()) as q:
        waiter = asyncio.ensure_future(q.get())
        await asyncio.sleep(0.3)  # waiting in a claim
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await q.put("late")
        assert await q.get(timeout=5) == "late"
