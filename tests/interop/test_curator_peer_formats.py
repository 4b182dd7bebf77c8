"""What Curator 5.9.0 writes to ZooKeeper, read back with kazoo: frames and node names, checked against the
documented bytes and against zkqueue.formats.framing / zkqueue.formats.naming."""

from __future__ import annotations

import struct
import time

import pytest

from zkqueue.formats import naming
from zkqueue.formats.framing import decode_items, encode_items
from zkqueue.interop import CuratorPeer

pytestmark = pytest.mark.interop

QUEUE = "/queues/jobs"

INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def _frame(*payloads: bytes) -> bytes:
    """Curator's ItemSerializer layout, written out by hand (independent of zkqueue.formats.framing)."""
    body = b"".join(b"\x01" + struct.pack(">i", len(p)) + p for p in payloads)
    return b"\x00\x01\x00\x01" + body + b"\x02"


def _nodes(zk_client, path: str) -> list[tuple[str, bytes]]:
    return [(name, zk_client.get(f"{path}/{name}")[0]) for name in sorted(zk_client.get_children(path))]


def test_put_writes_the_documented_frame(curator_peer: CuratorPeer, zk_client) -> None:
    curator_peer.put(QUEUE, [b"abc", b""])
    nodes = _nodes(zk_client, QUEUE)
    assert [name for name, _ in nodes] == ["queue-0000000000", "queue-0000000001"]
    abc, empty = nodes[0][1], nodes[1][1]
    assert abc == bytes.fromhex("00 01 00 01 01 00 00 00 03 61 62 63 02")
    assert empty == bytes.fromhex("00 01 00 01 01 00 00 00 00 02")
    assert abc == encode_items([b"abc"])
    assert empty == encode_items([b""])
    assert decode_items(abc) == [b"abc"]
    assert decode_items(empty) == [b""]


def test_put_multi_writes_one_node_with_every_frame(curator_peer: CuratorPeer, zk_client) -> None:
    items = [b"first", b"", b"\xff\x00\xff"]
    curator_peer.put_multi(QUEUE, items)
    curator_peer.put_multi(QUEUE, [])  # an empty MultiItem: a node with no items
    curator_peer.put(QUEUE, [b"last"])

    nodes = _nodes(zk_client, QUEUE)
    assert [name for name, _ in nodes] == ["queue-0000000000", "queue-0000000001", "queue-0000000002"]
    multi, empty, last = (data for _, data in nodes)
    assert multi == _frame(*items)
    assert multi == encode_items(items)
    assert decode_items(multi) == items
    assert empty == bytes.fromhex("00 01 00 01 02")
    assert decode_items(empty) == []
    assert last == _frame(b"last")

    # Curator's own consumer: the multi node arrives whole and in order, the empty node is deleted unseen.
    assert curator_peer.consume(QUEUE, count=4, timeout=30) == [*items, b"last"]
    assert zk_client.get_children(QUEUE) == []


def test_priority_names(curator_peer: CuratorPeer, zk_client) -> None:
    priorities = [10, 0, INT_MAX, -1, INT_MIN, 5, 5]
    items = [f"p{i}:{p}".encode() for i, p in enumerate(priorities)]
    curator_peer.put(QUEUE, items, kind="priority", values=priorities)

    nodes = _nodes(zk_client, QUEUE)
    by_seq = sorted(nodes, key=lambda node: naming.sequence_of(node[0]))
    names = [name for name, _ in by_seq]
    assert names[:5] == [  # the documented encodings
        "queue-10000000A0000000000",
        "queue-1000000000000000001",
        "queue-17FFFFFFF0000000002",
        "queue-0FFFFFFFF0000000003",
        "queue-0800000000000000004",
    ]
    for seq, ((name, data), priority) in enumerate(zip(by_seq, priorities, strict=True)):
        assert name == naming.priority_prefix(priority) + f"{seq:010d}"
        assert naming.parse_priority(name) == priority
        assert decode_items(data) == [items[seq]]
    # zkqueue's sort key orders Curator's names exactly as Curator's lexicographic sort does
    assert sorted(names, key=naming.priority_sort_key) == sorted(names)

    expected = [items[i] for i in sorted(range(len(items)), key=lambda i: (priorities[i], i))]
    assert curator_peer.consume(QUEUE, count=len(items), timeout=30, kind="priority") == expected


def test_delay_names_and_due_items(curator_peer: CuratorPeer, zk_client) -> None:
    future = int(time.time() * 1000) + 3_600_000
    epochs = [1_700_000_000_000, 1, 0xFFFFFFFF, 1_700_000_000_001, future]
    items = [f"d{i}".encode() for i in range(len(epochs))]
    curator_peer.put(QUEUE, items, kind="delay", values=epochs)

    nodes = sorted(_nodes(zk_client, QUEUE), key=lambda node: naming.sequence_of(node[0]))
    names = [name for name, _ in nodes]
    assert names[:3] == ["queue-|18BCFE56800|0000000000", "queue-|00000001|0000000001", "queue-|FFFFFFFF|0000000002"]
    for seq, (name, epoch) in enumerate(zip(names, epochs, strict=True)):
        assert name == naming.delay_prefix(epoch) + f"{seq:010d}"
        assert naming.parse_delay_epoch(name) == epoch

    # The four past epochs are due and come out in epoch order; the future one stays queued.
    got = curator_peer.consume(QUEUE, count=len(items), timeout=2, kind="delay")
    assert got == [b"d1", b"d2", b"d0", b"d3"]
    assert zk_client.get_children(QUEUE) == [names[4]]


def test_id_names_and_remove(curator_peer: CuratorPeer, zk_client) -> None:
    ids = ["job-1", "a/b", "x|y", "job-1"]
    items = [f"i{i}".encode() for i in range(len(ids))]
    curator_peer.put(QUEUE, items, kind="id", values=ids)

    names = sorted(zk_client.get_children(QUEUE), key=naming.sequence_of)
    # Curator's fixId turns '/' and '|' into '_' (lossy); zkqueue escapes reversibly but matches plain ids.
    assert names == [
        "queue-|job-1|0000000000",
        "queue-|a_b|0000000001",
        "queue-|x_y|0000000002",
        "queue-|job-1|0000000003",
    ]
    assert names[0] == naming.id_prefix("job-1") + "0000000000"
    assert naming.parse_id(names[0]) == ("job-1", "queue-0000000000")
    assert naming.parse_id(names[1]) == ("a_b", "queue-0000000001")
    assert sorted(names, key=naming.id_sort_key) == names

    assert curator_peer.id_remove(QUEUE, "job-1") == 2
    assert curator_peer.id_remove(QUEUE, "a/b") == 0  # Curator compares the raw id, not fixId(id)
    assert sorted(zk_client.get_children(QUEUE), key=naming.sequence_of) == names[1:3]

    assert curator_peer.consume(QUEUE, count=2, timeout=30, kind="id") == [b"i1", b"i2"]
    assert zk_client.get_children(QUEUE) == []
