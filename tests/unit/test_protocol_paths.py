"""The chroot fast path builds exactly the wire paths kazoo would."""

from __future__ import annotations

import pytest
from kazoo.protocol.paths import _prefix_root

from zkqueue.transport.protocol import full_path

PATHS = ["/a", "/a/b", "/q/queue-", "/a/b/", "/a//b", "/a/./b", "/a/../b", "a/b", "/", "/a.b/c.d", "/.hidden"]


def _outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - comparing which error each side raises
        return type(exc)


@pytest.mark.parametrize("root", ["", "/", "/t-1", "/x/y"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("trailing", [False, True])
def test_full_path_matches_kazoo(root: str, path: str, trailing: bool) -> None:
    assert _outcome(full_path, root, path, trailing) == _outcome(_prefix_root, root, path, trailing=trailing)


# ---------------------------------------------------------------------------------------------------------------
# send_creates builds exactly the bytes kazoo's Transaction would send for the same CreateOps
# ---------------------------------------------------------------------------------------------------------------


class _RecordingClient:
    """Stands in for a KazooClient only to capture the request handed to ``_call`` (no I/O, no queue logic)."""

    def __init__(self, chroot: str = "", default_acl=None) -> None:
        self.chroot = chroot
        self.default_acl = default_acl
        self.sent: list = []

    def _call(self, request, reply) -> None:
        self.sent.append(request)


@pytest.mark.parametrize("chroot", ["", "/root/sub"])
@pytest.mark.parametrize("seed", range(20))
def test_send_creates_bytes_equal_kazoo_transaction(chroot: str, seed: int) -> None:
    import random

    from kazoo.protocol.serialization import Transaction
    from kazoo.security import make_acl, make_digest_acl

    from zkqueue.transport.protocol import CreateOp, to_request, send_creates

    rng = random.Random(seed)
    acls = [None, [make_acl("world", "anyone", all=True)],
            [make_digest_acl("u", "p", all=True), make_acl("world", "anyone", read=True)]]
    acl = rng.choice(acls)
    ephemeral, sequence = rng.random() < 0.3, rng.random() < 0.7
    prefixes = ["/q/queue-", "/q/queue-05", "/q/ü-", "/q/queue-" + "x" * rng.randint(0, 50)]
    items = []
    for _ in range(rng.randint(1, 40)):
        data = None if rng.random() < 0.05 else rng.randbytes(rng.randint(0, 300))
        items.append((rng.choice(prefixes), data))
    client = _RecordingClient(chroot, default_acl=rng.choice(acls))
    send_creates(client, items, acl=acl, ephemeral=ephemeral, sequence=sequence)
    (ours,) = client.sent
    expected = Transaction([to_request(client, CreateOp(p, d, acl, ephemeral, sequence)) for p, d in items])
    assert ours.type == Transaction.type
    assert bytes(ours.serialize()) == bytes(expected.serialize())


def test_send_creates_checks_before_sending() -> None:
    from zkqueue.errors import ItemTooLargeError
    from zkqueue.transport.protocol import send_creates

    client = _RecordingClient()
    with pytest.raises(TypeError):
        send_creates(client, [("/q/a", "not bytes")])
    with pytest.raises(TypeError):
        send_creates(client, [(b"/q/a", b"")])
    with pytest.raises(ItemTooLargeError):
        send_creates(client, [("/q/a", b"x" * 600_000), ("/q/b", b"y" * 600_000)])
    assert client.sent == []
    assert send_creates(client, []).result().ok and client.sent == []


@pytest.mark.parametrize("chroot", ["", "/c"])
@pytest.mark.parametrize("seed", range(20))
def test_multi_body_equals_kazoo_transaction(chroot: str, seed: int) -> None:
    import random

    from kazoo.protocol.serialization import Transaction
    from kazoo.security import make_acl, make_digest_acl

    from zkqueue.transport.protocol import CheckOp, CreateOp, DeleteOp, SetDataOp, to_request, multi_body

    rng = random.Random(1000 + seed)
    acls = [None, [make_acl("world", "anyone", all=True)], [make_digest_acl("u", "p", all=True)]]
    paths = ["/q/queue-0000000001", "/q/a/b", "/q/ü", "/locks/x@abc", "/q/queue-"]

    def data():
        return None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 64))

    ops = []
    for _ in range(rng.randint(1, 30)):
        kind = rng.randrange(4)
        path = rng.choice(paths)
        if kind == 0:
            ops.append(CreateOp(path, data(), rng.choice(acls), rng.random() < 0.5, rng.random() < 0.5))
        elif kind == 1:
            ops.append(DeleteOp(path, rng.choice([-1, 0, 7])))
        elif kind == 2:
            ops.append(SetDataOp(path, data(), rng.choice([-1, 3])))
        else:
            ops.append(CheckOp(path, rng.choice([0, 5])))
    client = _RecordingClient(chroot, default_acl=rng.choice(acls))
    expected = Transaction([to_request(client, op) for op in ops]).serialize()
    assert multi_body(client, ops) == bytes(expected)


@pytest.mark.parametrize("seed", range(20))
def test_prebuilt_multi_reply_parses_like_kazoo(seed: int) -> None:
    import random

    from kazoo.protocol.serialization import Transaction, int_struct, multiheader_struct, stat_struct, write_string

    from zkqueue.transport.protocol import PrebuiltTransaction

    rng = random.Random(seed)
    body = bytearray(b"\x00" * 3)  # the reply starts at an offset, as in kazoo's connection
    for _ in range(rng.randint(0, 25)):
        kind = rng.choice([1, 2, 5, 13, -1])
        body += multiheader_struct.pack(kind, False, -1 if kind != -1 else 0)
        if kind == 1:
            body += write_string(rng.choice(["/q/queue-0000000001", "/ü/x", "/a"]))
        elif kind == 5:
            body += stat_struct.pack(*[rng.randint(0, 1000) for _ in range(11)])
        elif kind == -1:
            body += int_struct.pack(rng.choice([0, -2, -101, -110, -103, -102]))
    body += multiheader_struct.pack(-1, True, -1)
    buf = bytes(body)
    ours = PrebuiltTransaction.deserialize(buf, 3)
    theirs = Transaction.deserialize(buf, 3)
    assert [type(x) for x in ours] == [type(x) for x in theirs]
    assert [x if not isinstance(x, Exception) else type(x) for x in ours] == [
        x if not isinstance(x, Exception) else type(x) for x in theirs
    ]
