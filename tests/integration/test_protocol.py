"""zkqueue.transport.protocol against a real ZooKeeper: multiRead, checked multi, pipelining, packet limits, lost links.

Some tests route the client through a small TCP proxy (below) that reads the request frames on the wire, so
they can assert how many requests of which opcode were sent, hold replies back, or cut the connection.
"""

from __future__ import annotations

import socket
import struct
import threading
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoAuthError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.security import ACL, Permissions, make_digest_acl

from zkqueue.errors import ConfigurationError, ItemTooLargeError
from zkqueue.transport.protocol import (
    DEFAULT_JUTE_MAXBUFFER,
    JUTE_MAXBUFFER_ENV,
    MAX_MULTI_OPS,
    MULTI_READ_OPCODE,
    CheckOp,
    CreateOp,
    DeleteOp,
    MultiResult,
    SetDataOp,
    call,
    create,
    create_many,
    delete_many,
    get_many,
    jute_max_buffer,
    max_create_data,
    multi_read,
    multi_read_async,
    multi_request_size,
    pipeline,
    run_multi,
    run_multi_async,
    send_multi,
    send_multi_read,
    split_ops,
)

GET_DATA_OPCODE = 4
MULTI_OPCODE = 14
WAIT = 30.0  # upper bound for a call that must finish; a hang fails the test instead of stalling the suite


# ---------------------------------------------------------------------------------------------------------------
# A TCP proxy that parses ZooKeeper request frames
# ---------------------------------------------------------------------------------------------------------------


class WireProxy:
    """Forwards one client's connections to a ZooKeeper server and records each request's opcode.

    ``hold_replies()`` holds server bytes back from the client until ``heal()`` (requests still go through; what
    was held is delivered then, in order), ``cut()`` closes every open connection, ``blackhole()`` silently drops
    traffic both ways while keeping sockets open.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.opcodes: list[int] = []
        self.lock = threading.Lock()
        self.seen: dict[int, threading.Event] = {}
        self.passing_replies = threading.Event()
        self.passing_replies.set()
        self.passing_requests = threading.Event()
        self.passing_requests.set()
        self.sockets: list[socket.socket] = []
        self.closed = False
        self.dropping = False  # blackhole(): replies are dropped, not held
        threading.Thread(target=self._accept, name="wire-proxy-accept", daemon=True).start()

    # control -----------------------------------------------------------------------------------------------
    def event_for(self, opcode: int) -> threading.Event:
        with self.lock:
            return self.seen.setdefault(opcode, threading.Event())

    def count(self, opcode: int) -> int:
        with self.lock:
            return Counter(self.opcodes)[opcode]

    def hold_replies(self) -> None:
        self.dropping = False
        self.passing_replies.clear()

    def blackhole(self) -> None:
        self.dropping = True
        self.passing_replies.clear()
        self.passing_requests.clear()

    def heal(self) -> None:
        self.dropping = False
        self.passing_replies.set()
        self.passing_requests.set()

    def cut(self) -> None:
        with self.lock:
            socks, self.sockets = self.sockets, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        self.cut()

    # plumbing ----------------------------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            self.heal()  # a fresh connection starts clean
            with self.lock:
                self.sockets += [client, server]
            threading.Thread(target=self._pump_requests, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump_replies, args=(server, client), daemon=True).start()

    def _pump_requests(self, src: socket.socket, dst: socket.socket) -> None:
        pending = b""
        first = True  # the first frame of a connection is the ConnectRequest, which has no xid/opcode
        while True:
            try:
                chunk = src.recv(65536)
            except OSError:
                return
            if not chunk:
                self._close_pair(src, dst)
                return
            if not self.passing_requests.is_set():
                continue
            pending += chunk
            while len(pending) >= 4:
                (length,) = struct.unpack_from("!i", pending)
                if len(pending) < 4 + length:
                    break
                frame, pending = pending[4 : 4 + length], pending[4 + length :]
                if first:
                    first = False
                else:
                    (opcode,) = struct.unpack_from("!i", frame, 4)
                    with self.lock:
                        self.opcodes.append(opcode)
                        event = self.seen.setdefault(opcode, threading.Event())
                    event.set()
            try:
                dst.sendall(chunk)
            except OSError:
                return

    def _pump_replies(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                chunk = src.recv(65536)
            except OSError:
                return
            if not chunk:
                self._close_pair(src, dst)
                return
            if not self.passing_replies.is_set():
                if self.dropping:
                    continue
                # held: wait for heal() (the rest stays in the socket buffers), so replies keep their order; a
                # reply dropped here made the client read the next one as an xid mismatch
                while not self.passing_replies.wait(0.1):
                    if self.closed or self.dropping:
                        break
                if self.dropping or self.closed:
                    continue
            try:
                dst.sendall(chunk)
            except OSError:
                return

    @staticmethod
    def _close_pair(a: socket.socket, b: socket.socket) -> None:
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass


def _first_host(connect_string: str) -> tuple[str, int]:
    host, _, port = connect_string.split(",")[0].rpartition(":")
    return host, int(port.split("/")[0])


@pytest.fixture
def proxy(zk_server) -> Iterator[WireProxy]:
    p = WireProxy(_first_host(zk_server.connect_string))
    yield p
    p.close()


@pytest.fixture
def proxied_client_factory(proxy, zk_chroot) -> Iterator:
    made: list[KazooClient] = []

    def make(**kwargs) -> KazooClient:
        client = KazooClient(hosts=f"127.0.0.1:{proxy.port}{zk_chroot}", **kwargs)
        made.append(client)
        client.start(timeout=15)
        return client

    yield make
    for client in made:
        client.stop()
        client.close()


def _make_nodes(client: KazooClient, parent: str, count: int, size: int = 100) -> list[str]:
    client.ensure_path(parent)
    ops = [CreateOp(f"{parent}/n{i:05d}", bytes([i % 251]) * size) for i in range(count)]
    for group in split_ops(ops, client):
        run_multi(client, group).raise_for_failure()
    return [op.path for op in ops]


# ---------------------------------------------------------------------------------------------------------------
# multi_read
# ---------------------------------------------------------------------------------------------------------------


def test_multi_read_returns_data_and_stat_or_error_per_path(zk_client) -> None:
    zk_client.create("/r/a", b"alpha", makepath=True)
    zk_client.create("/r/empty", b"")
    zk_client.set("/r/a", b"alpha2")
    paths = ["/r/a", "/r/missing", "/r/empty", "/r/a", "/nowhere/at/all"]

    results = multi_read(zk_client, paths, timeout=WAIT)

    assert len(results) == len(paths)
    data, stat = results[0]
    assert data == b"alpha2"
    assert isinstance(stat, ZnodeStat) and stat.version == 1
    assert results[0] == zk_client.get("/r/a")
    assert isinstance(results[1], NoNodeError)
    assert results[2] == (b"", zk_client.get("/r/empty")[1])
    assert results[3] == results[0]
    assert isinstance(results[4], NoNodeError)


def test_a_read_sent_behind_a_write_sees_it(zk_client) -> None:
    """send_multi_read right after send_multi, neither awaited: the read is answered after the write (one
    session's requests are answered in order), so it sees the node the multi created and not the one it deleted.
    The lock-safe taker relies on this to read the items of a block right after claiming it."""
    zk_client.create("/order/gone", b"old", makepath=True)
    for i in range(20):
        write = send_multi(zk_client, [CreateOp(f"/order/n{i}", b"new"), DeleteOp("/order/gone" if i == 0 else
                                                                                  f"/order/n{i - 1}")])
        read = send_multi_read(zk_client, [f"/order/n{i}", "/order/gone" if i == 0 else f"/order/n{i - 1}"])
        got = read.result(WAIT)
        assert write.result(WAIT).ok
        assert got[0][0] == b"new" and isinstance(got[1], NoNodeError)


def test_multi_read_of_1000_paths_is_one_request(proxied_client_factory, proxy) -> None:
    client = proxied_client_factory()
    paths = _make_nodes(client, "/many", 1000)
    paths[500] = "/many/gone"  # one miss in the middle
    before_multi_read = proxy.count(MULTI_READ_OPCODE)
    before_get = proxy.count(GET_DATA_OPCODE)

    results = multi_read(client, paths, timeout=WAIT)

    assert proxy.count(MULTI_READ_OPCODE) - before_multi_read == 1
    assert proxy.count(GET_DATA_OPCODE) == before_get
    assert len(results) == 1000
    assert isinstance(results[500], NoNodeError)
    for i, result in enumerate(results):
        if i != 500:
            assert result[0] == bytes([i % 251]) * 100, i
            assert result[1].dataLength == 100


def test_multi_read_splits_long_lists_into_ordered_requests(proxied_client_factory, proxy) -> None:
    client = proxied_client_factory()
    paths = _make_nodes(client, "/split", 7, size=3)
    before = proxy.count(MULTI_READ_OPCODE)

    results = multi_read(client, paths + ["/split/none"], max_ops=3, timeout=WAIT)

    assert proxy.count(MULTI_READ_OPCODE) - before == 3
    assert [r[0] for r in results[:7]] == [bytes([i]) * 3 for i in range(7)]
    assert isinstance(results[7], NoNodeError)


def test_multi_read_of_no_paths_sends_nothing(proxied_client_factory, proxy) -> None:
    client = proxied_client_factory()
    assert multi_read(client, [], timeout=WAIT) == []
    assert proxy.count(MULTI_READ_OPCODE) == 0


def test_multi_read_children(zk_client) -> None:
    zk_client.create("/c/x/one", makepath=True)
    zk_client.create("/c/x/two")
    zk_client.create("/c/leaf")

    results = multi_read(zk_client, ["/c/x", "/c/leaf", "/c/none"], children=True, timeout=WAIT)

    assert sorted(results[0]) == ["one", "two"]
    assert results[1] == []
    assert isinstance(results[2], NoNodeError)


def test_multi_read_reports_no_auth_per_path(zk_client, zk_client_factory) -> None:
    owner = zk_client_factory(auth_data=[("digest", "owner:secret")])
    owner.create("/acl/open", b"visible", makepath=True)
    owner.create("/acl/secret", b"hidden", acl=[make_digest_acl("owner", "secret", all=True)])

    results = multi_read(zk_client, ["/acl/open", "/acl/secret", "/acl/open"], timeout=WAIT)

    assert results[0][0] == b"visible"
    assert isinstance(results[1], NoAuthError)
    assert results[2][0] == b"visible"
    assert multi_read(owner, ["/acl/secret"], timeout=WAIT)[0][0] == b"hidden"


def test_multi_read_sets_no_watch(zk_client) -> None:
    zk_client.create("/w/node", b"v", makepath=True)

    multi_read(zk_client, ["/w/node"], timeout=WAIT)
    multi_read(zk_client, ["/w"], children=True, timeout=WAIT)

    # kazoo keeps no public watch registry; a watch set through it would be listed here
    assert not zk_client._data_watchers and not zk_client._child_watchers  # noqa: SLF001


def test_multi_read_async_result_is_usable_with_rawlink(zk_client) -> None:
    zk_client.create("/ar/a", b"1", makepath=True)
    got: list = []
    done = threading.Event()

    def callback(result) -> None:
        got.append(result.get())
        done.set()

    multi_read_async(zk_client, ["/ar/a", "/ar/b"]).rawlink(callback)

    assert done.wait(WAIT)
    assert got[0][0][0] == b"1"
    assert isinstance(got[0][1], NoNodeError)


def test_sync_calls_work_inside_a_kazoo_completion_callback(zk_client) -> None:
    """kazoo runs rawlink callbacks on one completion thread; a sync call made there must not wait on it."""
    zk_client.create("/cb/a", b"1", makepath=True)
    out: list = []
    done = threading.Event()

    def callback(_) -> None:
        try:
            out.append(run_multi(zk_client, [CheckOp("/cb/a", 0)], timeout=WAIT))
            out.append(multi_read(zk_client, ["/cb/a"] * 5, max_ops=2, timeout=WAIT))
        except Exception as exc:  # noqa: BLE001 - reported through the assertion below
            out.append(exc)
        finally:
            done.set()

    zk_client.get_async("/cb/a").rawlink(callback)

    assert done.wait(2 * WAIT)
    assert out[0].ok
    assert [r[0] for r in out[1]] == [b"1"] * 5


def test_chunked_multi_read_and_run_multi_async_support_rawlink(zk_client) -> None:
    zk_client.create("/rl/a", b"1", makepath=True)
    got: dict = {}
    done = {"read": threading.Event(), "multi": threading.Event()}

    def keep(name):
        def callback(result) -> None:
            got[name] = result.get()
            done[name].set()

        return callback

    multi_read_async(zk_client, ["/rl/a", "/rl/none", "/rl/a"], max_ops=1).rawlink(keep("read"))
    run_multi_async(zk_client, [CreateOp("/rl/b")]).rawlink(keep("multi"))
    assert done["read"].wait(WAIT) and done["multi"].wait(WAIT)

    assert got["read"][0][0] == b"1" and isinstance(got["read"][1], NoNodeError) and got["read"][2][0] == b"1"
    assert got["multi"].ok and got["multi"].results == ["/rl/b"]


def test_multi_read_rejects_non_string_paths(zk_client) -> None:
    with pytest.raises(TypeError):
        multi_read(zk_client, ["/ok", b"/bytes"])
    with pytest.raises(ConfigurationError):
        multi_read(zk_client, ["/ok"], max_ops=0)


# ---------------------------------------------------------------------------------------------------------------
# run_multi
# ---------------------------------------------------------------------------------------------------------------


def test_run_multi_success_returns_real_sequential_names_and_owns_ephemerals(zk_client, zk_client_factory) -> None:
    zk_client.create("/q/items", makepath=True)
    zk_client.create("/q/meta", b"v0")
    ops = [
        CreateOp("/q/items/queue-", b"first", sequence=True),
        CreateOp("/q/items/queue-", b"second", sequence=True),
        CreateOp("/q/items/lock-", b"mine", ephemeral=True, sequence=True),
        SetDataOp("/q/meta", b"v1", version=0),
        CheckOp("/q/items", -1),
    ]

    result = run_multi(zk_client, ops, timeout=WAIT)

    assert result.ok and result.failed_index is None and result.failure is None
    first, second, lock, stat, checked = result.results
    assert first.startswith("/q/items/queue-") and second.startswith("/q/items/queue-")
    assert int(second[-10:]) > int(first[-10:])
    assert zk_client.get(first)[0] == b"first"
    assert zk_client.get(second)[0] == b"second"
    assert isinstance(stat, ZnodeStat) and stat.version == 1
    assert zk_client.get("/q/meta")[0] == b"v1"
    assert checked is True
    session_id = zk_client.client_id[0]
    assert zk_client.exists(lock).ephemeralOwner == session_id
    assert zk_client.exists(first).ephemeralOwner == 0

    other = zk_client_factory()
    zk_client.stop()  # closing the session removes its ephemeral nodes
    assert other.exists(lock) is None
    assert other.exists(first) is not None


@pytest.mark.parametrize(
    ("bad_op", "bad_index", "error"),
    [
        (DeleteOp("/t/absent"), 2, NoNodeError),
        (CheckOp("/t", 7), 2, BadVersionError),
        (CreateOp("/t/exists"), 2, NodeExistsError),
        (CreateOp("/t/exists"), 0, NodeExistsError),
        (CheckOp("/t/a", 5), 4, BadVersionError),  # /t/a exists inside the multi, at version 0
    ],
)
def test_run_multi_failure_is_reported_and_nothing_is_applied(zk_client, bad_op, bad_index, error) -> None:
    zk_client.create("/t/exists", b"orig", makepath=True)
    good = [
        CreateOp("/t/a", b"a"),
        CreateOp("/t/seq-", b"s", sequence=True),
        SetDataOp("/t/exists", b"changed"),
        DeleteOp("/t/exists"),
    ]
    ops = good[:bad_index] + [bad_op] + good[bad_index:]
    children_before = sorted(zk_client.get_children("/t"))

    result = run_multi(zk_client, ops, timeout=WAIT)

    assert not result.ok
    assert result.failed_index == bad_index
    assert isinstance(result.failure, error)
    assert result.results[bad_index] is result.failure
    assert len(result.results) == len(ops)
    assert all(isinstance(r, RolledBackError) for r in result.results[:bad_index])
    assert all(isinstance(r, RuntimeInconsistency) for r in result.results[bad_index + 1 :])
    assert sorted(zk_client.get_children("/t")) == children_before
    assert zk_client.get("/t/exists")[0] == b"orig"
    with pytest.raises(error):
        result.raise_for_failure()


def test_run_multi_reports_no_auth(zk_client, zk_client_factory) -> None:
    owner = zk_client_factory(auth_data=[("digest", "owner:secret")])
    owner.create("/locked", acl=[make_digest_acl("owner", "secret", all=True)])

    result = run_multi(zk_client, [CreateOp("/free"), CreateOp("/locked/child")], timeout=WAIT)

    assert not result.ok and result.failed_index == 1
    assert isinstance(result.failure, NoAuthError)
    assert zk_client.exists("/free") is None
    assert run_multi(owner, [CreateOp("/locked/child")], timeout=WAIT).ok


def test_run_multi_uses_default_and_explicit_acls(zk_client_factory) -> None:
    read_only = [ACL(Permissions.READ | Permissions.DELETE | Permissions.CREATE, make_digest_acl("u", "p").id)]
    full = [make_digest_acl("u", "p", all=True)]
    client = zk_client_factory(auth_data=[("digest", "u:p")], default_acl=full)

    result = run_multi(client, [CreateOp("/d"), CreateOp("/e", acl=read_only)], timeout=WAIT)

    assert result.ok
    assert client.get_acls("/d")[0] == full
    # without ADMIN on /e the server masks the digest, so compare permissions and scheme
    assert [(a.perms, a.id.scheme) for a in client.get_acls("/e")[0]] == [(read_only[0].perms, "digest")]


def test_run_multi_of_no_ops_sends_nothing(proxied_client_factory, proxy) -> None:
    client = proxied_client_factory()
    assert run_multi(client, [], timeout=WAIT) == MultiResult(True, [], None, None)
    assert proxy.count(MULTI_OPCODE) == 0


def test_run_multi_rejects_bad_ops(zk_client) -> None:
    with pytest.raises(TypeError):
        run_multi(zk_client, [CreateOp("/ok"), ("create", "/tuple")])
    with pytest.raises(TypeError):
        CreateOp("/p", "text is not bytes")
    with pytest.raises(TypeError):
        DeleteOp("/p", version="1")
    with pytest.raises(TypeError):
        CreateOp("/p", acl=ACL(31, make_digest_acl("u", "p").id))
    assert zk_client.exists("/ok") is None


def test_run_multi_async_delivers_multi_result(zk_client) -> None:
    outcome = run_multi_async(zk_client, [CreateOp("/async-a"), DeleteOp("/async-missing")]).get(timeout=WAIT)
    assert isinstance(outcome, MultiResult)
    assert outcome.failed_index == 1 and isinstance(outcome.failure, NoNodeError)


# ---------------------------------------------------------------------------------------------------------------
# Direct requests: call, create, send_multi
# ---------------------------------------------------------------------------------------------------------------


def test_create_returns_the_sequential_name_without_the_chroot(proxied_client_factory, proxy, zk_chroot) -> None:
    client = proxied_client_factory()
    client.create("/direct")
    first = create(client, CreateOp("/direct/queue-", b"a", sequence=True))
    second = create(client, CreateOp("/direct/queue-", b"b", sequence=True))
    assert first == "/direct/queue-0000000000" and second == "/direct/queue-0000000001"
    assert client.get(second)[0] == b"b"
    # the reply path of a raw call keeps the chroot, as the server sent it
    assert call(client, client_request_for_create(client, "/direct/raw")) == f"{zk_chroot}/direct/raw"


def client_request_for_create(client: KazooClient, path: str):
    from zkqueue.transport.protocol import to_request  # noqa: PLC0415 - the request record kazoo would send

    return to_request(client, CreateOp(path))


def test_create_raises_kazoo_errors(zk_client) -> None:
    zk_client.create("/exists")
    with pytest.raises(NodeExistsError):
        create(zk_client, CreateOp("/exists"))
    with pytest.raises(NoNodeError):
        create(zk_client, CreateOp("/no/parent/here"))


def test_create_on_a_closed_client_raises(zk_client_factory) -> None:
    from kazoo.exceptions import ConnectionClosedError  # noqa: PLC0415

    client = zk_client_factory()
    client.stop()
    with pytest.raises(ConnectionClosedError):
        create(client, CreateOp("/closed"), timeout=WAIT)


def test_call_timeout_and_connection_loss_while_the_reply_is_held(proxied_client_factory, proxy) -> None:
    from kazoo.handlers.threading import KazooTimeoutError  # noqa: PLC0415

    client = proxied_client_factory()
    client.create("/held")
    proxy.hold_replies()
    with pytest.raises(KazooTimeoutError):
        create(client, CreateOp("/held/a"), timeout=0.3)
    pending = send_multi(client, [CreateOp("/held/b")])
    proxy.cut()
    with pytest.raises(ConnectionLoss):
        pending.result(timeout=WAIT)
    client.retry(client.exists, "/held")  # reconnected, same session
    assert create(client, CreateOp("/held/c"), timeout=WAIT) == "/held/c"


def test_send_multi_pipelines_and_reports_per_op(proxied_client_factory, proxy) -> None:
    client = proxied_client_factory()
    client.create("/pipe")
    proxy.hold_replies()
    pending = [send_multi(client, [CreateOp(f"/pipe/{i}")]) for i in range(5)]
    pending.append(send_multi(client, [CreateOp("/pipe/x"), DeleteOp("/pipe/missing")]))
    sent = proxy.event_for(MULTI_OPCODE)
    assert sent.wait(WAIT)
    proxy.heal()
    assert [p.result(timeout=WAIT).ok for p in pending[:5]] == [True] * 5
    last = pending[5].result(timeout=WAIT)
    assert not last.ok and last.failed_index == 1 and isinstance(last.failure, NoNodeError)
    assert sorted(client.get_children("/pipe")) == ["0", "1", "2", "3", "4"]
    assert send_multi(client, []).result().ok


def test_direct_calls_work_inside_a_kazoo_completion_callback(zk_client) -> None:
    """The reply is delivered by the connection thread, so a callback on kazoo's completion thread may wait."""
    done: list[object] = []
    finished = threading.Event()

    def callback(_result) -> None:
        try:
            done.append(create(zk_client, CreateOp("/in-callback/child")))
            done.append(run_multi(zk_client, [DeleteOp("/in-callback/child")], timeout=WAIT).ok)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            done.append(exc)
        finished.set()

    zk_client.create_async("/in-callback").rawlink(callback)
    assert finished.wait(WAIT)
    assert done == ["/in-callback/child", True]


# ---------------------------------------------------------------------------------------------------------------
# Packet limits
# ---------------------------------------------------------------------------------------------------------------


def test_jute_max_buffer_default_env_and_argument(monkeypatch) -> None:
    monkeypatch.delenv(JUTE_MAXBUFFER_ENV, raising=False)
    assert jute_max_buffer() == DEFAULT_JUTE_MAXBUFFER == 1048575
    monkeypatch.setenv(JUTE_MAXBUFFER_ENV, "0x1000")
    assert jute_max_buffer() == 4096
    assert jute_max_buffer(5000) == 5000
    for bad in ("lots", "0", "-5"):
        monkeypatch.setenv(JUTE_MAXBUFFER_ENV, bad)
        with pytest.raises(ConfigurationError):
            jute_max_buffer()
    with pytest.raises(ConfigurationError):
        jute_max_buffer(0)


def test_create_at_the_limit_fits_and_one_byte_more_is_refused_before_sending(zk_client, monkeypatch) -> None:
    monkeypatch.delenv(JUTE_MAXBUFFER_ENV, raising=False)
    zk_client.create("/big")
    session = zk_client.client_id
    room = max_create_data("/big/queue-", zk_client, sequence=True)
    fits = CreateOp("/big/queue-", b"x" * room, sequence=True)
    assert multi_request_size([fits], zk_client) == DEFAULT_JUTE_MAXBUFFER

    assert run_multi(zk_client, [fits], timeout=WAIT).ok

    too_big = CreateOp("/big/queue-", b"x" * (room + 1), sequence=True)
    with pytest.raises(ItemTooLargeError) as info:
        run_multi(zk_client, [too_big])
    assert info.value.size == DEFAULT_JUTE_MAXBUFFER + 1 and info.value.limit == DEFAULT_JUTE_MAXBUFFER
    assert zk_client.state == KazooState.CONNECTED and zk_client.client_id == session
    assert len(zk_client.get_children("/big")) == 1


def test_size_guard_matches_the_server_limit(zk_client_factory, monkeypatch) -> None:
    """Bypassing the guard by one byte makes the server drop the connection: the guard's edge is the server's."""
    monkeypatch.delenv(JUTE_MAXBUFFER_ENV, raising=False)
    client = zk_client_factory()
    client.create("/edge")
    room = max_create_data("/edge/n", client)
    with pytest.raises(ConnectionLoss):
        run_multi(client, [CreateOp("/edge/n", b"y" * (room + 1))], limit=2 * DEFAULT_JUTE_MAXBUFFER, timeout=WAIT)
    assert client.retry(client.exists, "/edge/n") is None


def test_split_ops_respects_bytes_count_and_order(zk_client, monkeypatch) -> None:
    monkeypatch.setenv(JUTE_MAXBUFFER_ENV, "4096")
    zk_client.create("/s")
    ops = [CreateOp(f"/s/n{i:03d}", bytes([i]) * 1000) for i in range(10)]

    groups = split_ops(ops, zk_client)

    assert [op for group in groups for op in group] == ops
    assert len(groups) == 4  # three 1 KB creates fit in 4096 bytes, four do not
    assert all(multi_request_size(group, zk_client) <= 4096 for group in groups)
    for group in groups:
        assert run_multi(zk_client, group, timeout=WAIT).ok
    assert sorted(zk_client.get_children("/s")) == [f"n{i:03d}" for i in range(10)]

    monkeypatch.delenv(JUTE_MAXBUFFER_ENV)
    small = [DeleteOp(f"/s/n{i:03d}") for i in range(10)]
    assert [len(g) for g in split_ops(small, zk_client, max_ops=4)] == [4, 4, 2]
    assert len(split_ops([DeleteOp("/x")] * (MAX_MULTI_OPS + 1))) == 2
    with pytest.raises(ItemTooLargeError):
        split_ops([CreateOp("/s/huge", b"z" * 5000)], zk_client, limit=4096)
    with pytest.raises(ConfigurationError):
        split_ops(small, zk_client, max_ops=0)


# ---------------------------------------------------------------------------------------------------------------
# Pipelined helpers
# ---------------------------------------------------------------------------------------------------------------


def test_get_many_preserves_order_with_errors_in_place(zk_client) -> None:
    paths = _make_nodes(zk_client, "/g", 50, size=4)
    asked = list(reversed(paths)) + ["/g/missing"]

    results = get_many(zk_client, asked, timeout=WAIT)

    assert [r[0] for r in results[:50]] == [bytes([i % 251]) * 4 for i in reversed(range(50))]
    assert isinstance(results[50], NoNodeError)


def test_create_many_preserves_order_and_reports_each_failure(zk_client) -> None:
    zk_client.create("/cm")
    items = [
        ("/cm/a", b"1"),
        CreateOp("/cm/seq-", b"2", sequence=True),
        ("/cm/a", b"dup"),
        ("/cm/eph", b"3", {"ephemeral": True}),
        ("/cm/deep/er", b"4", {"makepath": True}),
        ("/cm/no/parent", b"5"),
        "not an item",
    ]

    results = create_many(zk_client, items, timeout=WAIT)

    assert results[0] == "/cm/a"
    assert results[1].startswith("/cm/seq-") and len(results[1]) == len("/cm/seq-") + 10
    assert isinstance(results[2], NodeExistsError)
    assert results[3] == "/cm/eph"
    assert zk_client.exists("/cm/eph").ephemeralOwner == zk_client.client_id[0]
    assert results[4] == "/cm/deep/er"
    assert isinstance(results[5], NoNodeError)
    assert isinstance(results[6], TypeError)
    assert zk_client.get("/cm/a")[0] == b"1"


def test_delete_many_and_pipeline(zk_client) -> None:
    zk_client.create("/dm/a", makepath=True)
    zk_client.create("/dm/b")

    assert [type(r) for r in delete_many(zk_client, [("/dm/b", 4), "/dm/a", "/dm/a"], timeout=WAIT)] == [
        BadVersionError,
        bool,
        NoNodeError,
    ]
    results = pipeline(
        zk_client,
        [("exists_async", "/dm/b"), (zk_client.get_async, "/dm/a"), lambda: zk_client.delete_async("/dm/b"),
         ("get", "/dm/b"), (42,)],
        timeout=WAIT,
    )
    assert isinstance(results[0], ZnodeStat)
    assert isinstance(results[1], NoNodeError)
    assert results[2] is True
    assert isinstance(results[3], ValueError)  # only *_async methods may be named
    assert isinstance(results[4], TypeError)


# ---------------------------------------------------------------------------------------------------------------
# Connection loss
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["multi_read", "run_multi"])
def test_request_in_flight_when_the_connection_breaks_raises_connection_loss(
    proxied_client_factory, proxy, call
) -> None:
    client = proxied_client_factory()
    client.create("/cut")
    opcode = MULTI_READ_OPCODE if call == "multi_read" else MULTI_OPCODE
    sent = proxy.event_for(opcode)
    proxy.hold_replies()
    if call == "multi_read":
        pending = multi_read_async(client, ["/cut", "/cut/none"])
    else:
        pending = run_multi_async(client, [CreateOp("/cut/x")])
    assert sent.wait(WAIT), "the request never reached the wire"

    proxy.cut()

    with pytest.raises(ConnectionLoss):
        pending.get(timeout=WAIT)
    # kazoo reconnects with the same session; the next multi_read works
    assert isinstance(client.retry(multi_read, client, ["/cut/none"], timeout=WAIT)[0], NoNodeError)


def test_multi_read_against_a_silent_server_raises_connection_loss(proxied_client_factory, proxy) -> None:
    client = proxied_client_factory(timeout=2.0)  # kazoo notices a lost ping within about 2/3 of the session
    client.create("/silent", b"s")
    proxy.blackhole()

    with pytest.raises(ConnectionLoss):
        multi_read(client, ["/silent"], timeout=WAIT)


# ---------------------------------------------------------------------------------------------------------------
# Ensemble
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.ensemble
def test_multi_read_and_run_multi_on_every_ensemble_member(zk_ensemble) -> None:
    """Leader and followers all answer multiRead, and report multi failures per op."""
    base = f"/proto-{uuid.uuid4().hex}"
    clients = [KazooClient(hosts=h) for h in zk_ensemble.connect_string.split(",")]
    try:
        for client in clients:
            client.start(timeout=30)
        writer = clients[0]
        writer.create(base)
        created = run_multi(writer, [CreateOp(f"{base}/q-", b"d", sequence=True) for _ in range(5)], timeout=WAIT)
        assert created.ok
        for client in clients:
            client.sync(base)  # a follower may lag the write until synced
            reads = multi_read(client, created.results + [f"{base}/none"], timeout=WAIT)
            assert [r[0] for r in reads[:5]] == [b"d"] * 5
            assert isinstance(reads[5], NoNodeError)
            failed = run_multi(client, [CreateOp(f"{base}/e-", ephemeral=True, sequence=True),
                                        DeleteOp(f"{base}/none")], timeout=WAIT)
            assert failed.failed_index == 1 and isinstance(failed.failure, NoNodeError)
        assert sorted(writer.get_children(base)) == sorted(p.rsplit("/", 1)[1] for p in created.results)
        writer.delete(base, recursive=True)
    finally:
        for client in clients:
            client.stop()
            client.close()
