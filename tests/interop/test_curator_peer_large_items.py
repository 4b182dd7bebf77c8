"""Curator 5.9.0 meets a zkqueue large-item reference: it must fail loudly, never misread it as an item.

The reference frame starts with version word 0x00020001; Curator's ItemSerializer throws
``IOException("Incorrect version...")``, logs "Corrupted queue item" and deletes the node without delivering
anything. The blob is then unreferenced, and a running zkqueue queue's reaper reclaims it after the grace period.
Small items of a queue with large items on stay plain Curator frames, which Curator reads.
"""

from __future__ import annotations

import os

import pytest

from zkqueue import BytesSerializer, QueueBuilder
from zkqueue.interop import CuratorPeer
from zkqueue.server.testing import wait_for

pytestmark = pytest.mark.interop

QUEUE = "/queues/large"


@pytest.mark.parametrize("lock_path", [None, "/queues/large-locks"], ids=["no-lock", "lock"])
def test_curator_consumer_fails_loudly_on_a_reference(curator_peer: CuratorPeer, zk_client, lock_path) -> None:
    big = os.urandom(3 * 2**20)
    with (QueueBuilder.builder(zk_client, None, BytesSerializer(), QUEUE)
          .large_items(orphan_grace=0.5).build_queue()) as producer:
        producer.put(b"small before")
        producer.put(big)
        producer.put(b"small after")
        assert producer.flush_puts(30)
        assert len(zk_client.get_children(QUEUE + "-blobs")) == 1
        handle = curator_peer.start_consumer(QUEUE, count=3, timeout=8, lock_path=lock_path, wait_ready=False)
        with handle:
            items = handle.wait()
        # Curator delivered the two plain items and nothing made of the reference
        assert items == [b"small before", b"small after"]
        stderr = handle.stderr()
        assert "Corrupted queue item" in stderr and "Incorrect version" in stderr, stderr[-2000:]
        assert zk_client.get_children(QUEUE) == []
        # the blob whose reference Curator dropped is reclaimed by the running zkqueue queue
        wait_for(lambda: zk_client.get_children(QUEUE + "-blobs") == [], timeout=20, interval=0.1,
                 message="the orphaned blob was not reclaimed")
        assert producer.stats().blobs_reclaimed == 1
