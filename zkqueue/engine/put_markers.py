"""Exactly-once puts: a marker node per producer lane that every put multi advances, so that a put whose reply
was lost learns whether it committed, and is never written twice.

Layout, beside the queue node (consumers and Curator never list it)::

    <queue>-producers/<producer id>.<lane>     data: the lane's last committed batch number, in ASCII

Every put multi of a lane starts with ``setData(marker, b"<n>", version=v)``: the items and the new number commit
together or not at all, and batches sent back to back carry versions ``v``, ``v + 1``, ... so the batches of a lane
that committed are always a prefix of those sent. After a connection loss, :meth:`MarkerLane.committed` syncs and
reads the marker: batch ``n`` committed exactly when the stored number is ``n`` or more. (ZooKeeper applies a
session's requests in order, and requests sent on a connection the session has left are refused, so nothing sent
before the read can commit after it.) A batch that did not commit is sent again with a new ticket.

A lane's batches are sent in the order of their tickets (:attr:`MarkerLane.sending` is held from the ticket to the
send), so several threads may share a lane (the ``groups`` lane of ``commit_groups``: job adds, Celery bodies); a
batch that carries the caller's own sequence number is one lane's only user at a time. Markers of
producers gone for ``grace`` seconds are deleted by :func:`reclaim`, which lists the (small) markers folder.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, NodeExistsError, NoNodeError
from kazoo.protocol.states import KeeperState

from zkqueue.engine.commit import CONNECTION_ERRORS
from zkqueue.errors import ConfigurationError, ConnectionLostError, PutOutcomeUnknown
from zkqueue.formats import naming
from zkqueue.transport import protocol
from zkqueue.transport.multi import MultiResult
from zkqueue.transport.ops import SetDataOp

log = logging.getLogger("zkqueue.engine.put_markers")

MARKERS_SUFFIX = "-producers"
#: Markers untouched this long (seconds) belong to producers that are gone (a restarted producer can answer a
#: PutOutcomeUnknown within this time).
DEFAULT_GRACE = 24 * 3600.0
#: How often one process lists a queue's markers folder to reclaim old markers (seconds).
RECLAIM_INTERVAL = 600.0
_last_reclaim: dict[str, float] = {}
_reclaim_lock = threading.Lock()


def markers_path(queue_path: str) -> str:
    return queue_path + MARKERS_SUFFIX


def new_producer_id() -> str:
    return uuid.uuid4().hex[:16]


def check_producer_id(producer_id: str) -> str:
    if not producer_id or "/" in producer_id or "." in producer_id or len(producer_id) > 200:
        raise ConfigurationError(
            f"producer_id {producer_id!r}: expected a non-empty name without '/' or '.' (at most 200 characters)")
    return producer_id


@dataclass(frozen=True)
class Ticket:
    """One batch's place in its lane: the op that advances the marker, and the batch's number."""

    op: SetDataOp
    number: int
    chain: int = 0  # which read of the marker its version follows (tickets of one chain commit as a prefix)

    @property
    def marker(self) -> str:
        return self.op.path


class MarkerLane:
    """The marker of one producer lane of one queue, and the lane's tickets still outstanding.

    A ticket's fate is judged once: by its reply, or, when the reply was lost, by :meth:`settle`, which judges every
    outstanding ticket from one read. When a batch fails (or did not commit), the tickets sent after it cannot
    commit either (their versions no longer match): :meth:`broken` records that before anything is sent again, so
    a later, higher number on the marker is never mistaken for one of theirs."""

    def __init__(self, client: Any, queue_path: str, producer_id: str, lane: str, acl: Any = None) -> None:
        self._client = client
        self._acl = acl
        self._queue_path = queue_path
        self.path = naming.join(markers_path(queue_path), f"{check_producer_id(producer_id)}.{lane}")
        self._lock = threading.Lock()
        #: Held from taking a ticket until its batch is sent, so that the batches of threads sharing the lane reach
        #: the server in ticket order (versions v, v + 1, ...: a later ticket sent first could only fail).
        self.sending = threading.Lock()
        self._number = 0  # the last number handed out (numbers never repeat within this lane object)
        self._committed = 0  # the highest number known to have committed
        self._version: int | None = None  # the version the next ticket expects (None: read the marker first)
        self._outstanding: dict[int, bool | None] = {}  # ticket number -> fate (None: not known yet)
        self._chain = 0  # bumped at every read of the marker: a new chain of versions
        self._chain_of: dict[int, int] = {}  # ticket number -> its chain

    def ticket(self, number: int | None = None) -> Ticket | None:
        """The next batch's ticket (reads the marker first after a reset, creating it if needed).

        ``number``: the caller's own sequence number for the batch (a lane used one batch at a time); None when
        the marker shows that number committed already."""
        with self._lock:
            if self._version is None:
                self._load()
            assert self._version is not None
            if number is None:
                self._number += 1
            elif number <= self._committed:
                return None
            else:
                self._number = max(self._number, number)
            chosen = self._number if number is None else number
            op = SetDataOp(self.path, str(chosen).encode(), self._version)
            self._version += 1
            self._outstanding[chosen] = None
            self._chain_of[chosen] = self._chain
            return Ticket(op, chosen, self._chain)

    def _load(self) -> None:
        while True:
            try:
                data, stat = self._client.get(self.path)
            except NoNodeError:
                try:
                    self._client.create(self.path, b"0", acl=self._acl, makepath=True)
                except NodeExistsError:
                    pass
                continue
            self._committed = max(self._committed, _number_of(data))
            self._number = max(self._number, self._committed)
            self._version = stat.version
            self._chain += 1
            break
        try:
            _reclaim_now_and_then(self._client, self._queue_path, frozenset({self.path}))
        except Exception:  # noqa: BLE001 - garbage collection only
            log.debug("could not reclaim old put markers of %s", self._queue_path, exc_info=True)

    def finished(self, ticket: Ticket) -> None:
        """``ticket``'s batch committed (its reply said so, or :meth:`settle` found it)."""
        with self._lock:
            self._forget(ticket)
            self._committed = max(self._committed, ticket.number)

    def _forget(self, ticket: Ticket) -> None:
        self._outstanding.pop(ticket.number, None)
        self._chain_of.pop(ticket.number, None)

    def broken(self, ticket: Ticket) -> None:
        """``ticket``'s batch did not commit: neither can any ticket sent after it in its chain of versions (one
        sent after a later read of the marker is judged by its own reply); read the marker again."""
        with self._lock:
            self._forget(ticket)
            for number, fate in self._outstanding.items():
                if number > ticket.number and fate is None and self._chain_of.get(number) == ticket.chain:
                    self._outstanding[number] = False
            self._version = None

    def drop(self, ticket: Ticket) -> None:
        """Forget ``ticket`` once its batch is known not to have committed (it is sent again with a new ticket).
        Unlike :meth:`broken` this judges no other ticket: those sent after a settle may still commit."""
        with self._lock:
            self._forget(ticket)

    def fate(self, ticket: Ticket) -> bool | None:
        with self._lock:
            return self._outstanding.get(ticket.number)

    def settle(self) -> None:
        """Judge every outstanding ticket from one read of the marker (call once connected again): sent before the
        read, each has committed or never will. Raises the connection error when ZooKeeper cannot be read."""
        reached = reached_number(self._client, self.path)
        with self._lock:
            for number, fate in self._outstanding.items():
                if fate is None:
                    self._outstanding[number] = number <= reached
            self._version = None


def _number_of(data: bytes | None) -> int:
    try:
        return int(data or b"0")
    except ValueError:
        log.error("put marker holds %r, not a batch number; counting from 0", data[:40] if data else data)
        return 0


def retry_unsent(call: Callable[[], Any], connection: Any, wait: float, what: str) -> Any:
    """``call()`` (a read, or a write that was surely not sent) once connected, again after a connection error,
    for up to ``wait`` seconds; then a connection error is raised (nothing was written). It waits for the
    connection first: a request made while disconnected would sit in kazoo's queue with no bound."""
    deadline = time.monotonic() + wait
    while True:
        if not connection.connected.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not connection.wait(remaining):
                raise ConnectionLoss(f"{what}: ZooKeeper was not reachable within {wait:.0f} s")
        try:
            return call()
        except CONNECTION_ERRORS as exc:
            if time.monotonic() >= deadline:
                raise
            log.info("%s: %r; again once ZooKeeper is back", what, exc)
            time.sleep(0.05)  # the connection may drop again at once while the ensemble settles


#: Seconds a read waits out a lost connection where no queue sets it (a queue's ``put_outcome_wait`` default).
DEFAULT_READ_WAIT = 60.0


def read_retrying(call: Callable[[], Any], connection: Any, wait: float, what: str) -> Any:
    """``call()``, a read, once connected, and again after a connection error (a leader election, a reconnect, a
    new session), for up to ``wait`` seconds in all: the one way zkqueue's reads wait out a failover. Then raises
    :class:`~zkqueue.errors.ConnectionLostError` naming ``what``, chained from the last kazoo error; a closed client
    raises kazoo's ConnectionClosedError at once. ``connection`` is a queue's
    :class:`~zkqueue.engine.context.ConnectionWatch`, or :class:`ClientConnection` for a bare client."""
    started = time.monotonic()
    deadline = started + wait
    last: BaseException | None = None
    while True:
        if not connection.connected.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not connection.wait(remaining):
                raise ConnectionLostError(what, time.monotonic() - started, last) from last
        try:
            return call()
        except ConnectionClosedError:
            raise  # the client was stopped: nothing to wait for
        except CONNECTION_ERRORS as exc:
            last = exc
            if time.monotonic() >= deadline:
                raise ConnectionLostError(what, time.monotonic() - started, exc) from exc
            log.info("%s: %r; again once ZooKeeper is back", what, exc)
            time.sleep(0.05)  # the connection may drop again at once while the ensemble settles


class _ClientConnected:
    def __init__(self, client: Any) -> None:
        self._client = client

    def is_set(self) -> bool:
        # a closed client counts: a request on it fails at once (ConnectionClosedError), it never sits in a queue
        return bool(self._client.connected) or self._client.client_state == KeeperState.CLOSED


def wait_connected(client: Any, timeout: float, stop: Any = None) -> bool:
    """Wait up to ``timeout`` seconds for ``client`` to be connected (or for ``stop``, an Event, to be set);
    whether it is. The one such wait of the layers above (flows, ordered consumers)."""
    deadline = time.monotonic() + timeout
    while not client.connected:
        if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
            return False
        time.sleep(0.05)
    return True


class ClientConnection:
    """A bare kazoo client's connection as :func:`read_retrying` waits on it (polled; no listener to remove), for
    readers without a queue's :class:`~zkqueue.engine.context.ConnectionWatch` (flows, queues not started)."""

    def __init__(self, client: Any) -> None:
        self.connected = _ClientConnected(client)

    def wait(self, timeout: float) -> bool:
        """Wait until connected (True) or ``timeout`` seconds passed (False)."""
        deadline = time.monotonic() + timeout
        while not self.connected.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(0.05, left))
        return True


class _Raised:
    """A pending reply that is an error already (the send itself failed)."""

    def __init__(self, exc: BaseException) -> None:
        self._exc = exc

    def result(self, timeout: float | None = None) -> Any:
        raise self._exc


#: Sends of one batch before giving up on a marker that keeps refusing (another process with the same producer id).
_ATTEMPTS = 8


class MarkedBatch:
    """One batch of puts sent with its lane's ticket. :meth:`result` is the batch's definitive outcome: a lost
    reply is settled through the marker, and the batch is sent again only when it surely did not commit.

    ``send(head)`` sends the batch as one multi led by the ``head`` ops and returns its pending reply; ``count`` is
    the batch's op count without the head. ``wait`` bounds how long a lost reply waits for ZooKeeper before
    :class:`PutOutcomeUnknown`."""

    def __init__(self, lane: MarkerLane, send: Callable[[list[Any]], Any], count: int, connection: Any,
                 wait: float, what: str, number: int | None = None) -> None:
        self._lane = lane
        self._number = number
        self._send = send
        self._count = count
        self._connection = connection
        self._wait = wait
        self._what = what
        self._dispatch()

    def _dispatch(self) -> None:
        with self._lane.sending:  # batches of the lane go out in ticket order, whichever thread sends them
            # reading the marker (after a reset) may meet a lost connection: nothing is sent yet, so it waits and
            # reads again
            ticket = retry_unsent(lambda: self._lane.ticket(self._number), self._connection, self._wait,
                                  f"{self._what}: reading marker {self._lane.path}")
            if ticket is None:  # the caller's sequence number committed before (a replay after a restart)
                self._ticket, self._pending = None, None
                return
            self._ticket = ticket
            try:
                self._pending = self._send([ticket.op])
            except CONNECTION_ERRORS as exc:
                self._pending = _Raised(exc)  # maybe sent, maybe not: settled like a lost reply
            except BaseException:
                self._lane.broken(ticket)
                raise

    @property
    def doomed(self) -> bool:
        """Known not to commit as sent (a batch before it in the lane failed, or a settle after a lost reply found it
        missing): :meth:`result` sends it again. A sender that keeps put order sends nothing new before that, or
        the new batch takes the marker's next version and commits ahead of it."""
        ticket = self._ticket
        return ticket is not None and self._lane.fate(ticket) is False

    def result(self) -> MultiResult:
        """The batch's outcome without the marker op: ok (created paths; None for each when a lost reply was
        settled as committed), or the failure of one of its own ops. Raises :class:`PutOutcomeUnknown`."""
        for _attempt in range(_ATTEMPTS):
            ticket = self._ticket
            if ticket is None:
                log.info("%s: marker %s shows batch %s committed already; not sent again", self._what,
                         self._lane.path, self._number)
                return MultiResult(True, [None] * self._count)
            try:
                res = self._pending.result()
            except CONNECTION_ERRORS as exc:
                if self._committed_after_loss(ticket, exc):
                    self._lane.finished(ticket)
                    return MultiResult(True, [None] * self._count)
                self._lane.drop(ticket)
                self._dispatch()
                continue
            if res.ok:
                self._lane.finished(ticket)
                return MultiResult(True, res.results[1:])
            self._lane.broken(ticket)
            if res.failed_index == 0:  # the marker moved (a batch before this one failed) or was reclaimed
                self._dispatch()
                continue
            index = None if res.failed_index is None else res.failed_index - 1
            return MultiResult(False, res.results[1:], index, res.failure)
        raise PutOutcomeUnknown(f"{self._what}: marker {self._lane.path} kept refusing {_ATTEMPTS} sends (is "
                                "another producer running with the same producer_id?); nothing was stored",
                                self._lane.path, self._ticket.number if self._ticket else -1)

    def _committed_after_loss(self, ticket: Ticket, exc: BaseException) -> bool:
        if self._lane.fate(ticket) is None:
            try:
                retry_unsent(self._lane.settle, self._connection, self._wait,
                             f"{self._what}: reading marker {self._lane.path} after a lost reply")
            except CONNECTION_ERRORS:
                raise PutOutcomeUnknown(
                    f"{self._what}: the reply was lost ({exc!r}) and ZooKeeper was not reachable within "
                    f"{self._wait:.0f} s; it committed if marker {self._lane.path} reaches {ticket.number}",
                    self._lane.path, ticket.number) from exc
            # INFO: settled, nothing for anyone to do (the connection's loss is the queue's one WARNING line)
            log.info("%s: reply lost (%r); marker %s says it %s", self._what, exc, self._lane.path,
                     "committed" if self._lane.fate(ticket) else "did not commit: sending it again")
        return bool(self._lane.fate(ticket))


def reached_number(client: Any, marker: str) -> int:
    """The last committed batch number a marker holds, read after a ``sync`` (0 when there is no marker: one is
    reclaimed only after ``grace`` seconds without a put, so none was in flight)."""
    client.sync(marker)
    try:
        data, _stat = client.get(marker)
    except NoNodeError:
        return 0
    return _number_of(data)


def put_committed(client: Any, marker: str, batch: int) -> bool:
    """Whether the put that raised :class:`PutOutcomeUnknown` (``marker``, ``batch``) committed."""
    return reached_number(client, marker) >= batch


def reclaim(client: Any, queue_path: str, grace: float = DEFAULT_GRACE, *, own: frozenset[str] = frozenset()) -> int:
    """Delete markers of ``queue_path`` untouched for ``grace`` seconds (except ``own``), with one listing and
    pipelined reads and deletes. Returns how many were deleted. A producer whose marker was reclaimed while idle
    creates it again at its next put."""
    folder = markers_path(queue_path)
    try:
        paths = [naming.join(folder, n) for n in client.get_children(folder)]
    except NoNodeError:
        return 0
    paths = [p for p in paths if p not in own]
    cutoff_ms = (time.time() - grace) * 1000
    old = [(path, res[1].version) for path, res in zip(paths, protocol.multi_read(client, paths) if paths else [])
           if not isinstance(res, BaseException) and res[1].mtime <= cutoff_ms]
    # version-checked: a marker used again since the read stays
    deleted = sum(1 for res in protocol.delete_many(client, old) if res is True) if old else 0
    if deleted:
        log.info("reclaimed %d put marker(s) of producers gone for %.0f s under %s", deleted, grace, folder)
    return deleted


def _reclaim_now_and_then(client: Any, queue_path: str, own: frozenset[str]) -> None:
    """:func:`reclaim`, at most once per :data:`RECLAIM_INTERVAL` per queue and process (when a lane loads)."""
    now = time.monotonic()
    with _reclaim_lock:
        if now - _last_reclaim.get(queue_path, -RECLAIM_INTERVAL) < RECLAIM_INTERVAL:
            return
        _last_reclaim[queue_path] = now
    reclaim(client, queue_path, own=own)
