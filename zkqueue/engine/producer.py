"""The producer: every way an item gets into the queue.

Every put is exactly once: its multi also advances a marker of the producer (:mod:`zkqueue.engine.put_markers`), so
a put whose reply was lost learns whether it committed and is sent again only if it did not.

- **Background puts** (the default, Curator's ``putInBackground``): ``put`` returns once the item is queued; the
  put thread ``zkqueue-put-<path>`` sends queued puts as multis, up to three in flight, so ZooKeeper's in-order
  processing of one session keeps sequence numbers in put order; a batch whose reply was lost and did not commit
  is sent again before any new one goes out. Failures reach the put listeners.
- **Foreground puts** of unbounded queues go through :class:`~zkqueue.engine.group_commit.GroupCommit`.
- **Bounded puts** (``max_items``): one at a time per instance, each waiting for room in the children listing
  (Curator's semantics: the timeout restarts whenever the children change).
- **Large items** (``large_items`` set, a frame too big for one znode): written by
  :class:`~zkqueue.engine.blobs.BlobWriter` in the caller's thread, after this instance's earlier background puts
  have completed, so the queue keeps put order.

Recipes store a node through :meth:`Producer.put_framed` with a prefix of their own (e.g. a priority prefix).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from kazoo.exceptions import NoNodeError

from zkqueue.engine.blobs import BlobWriter
from zkqueue.engine.children import ChildrenCache, Snapshot
from zkqueue.engine.commit import (
    MAX_OPS_PER_MULTI,
    MULTI_SLACK,
    GroupOutcome,
    create_op,
    map_error,
    next_chunk,
    node_cost,
)
from zkqueue.engine.context import QueueContext
from zkqueue.engine.group_commit import GroupCommit
from zkqueue.engine.put_markers import (
    MarkedBatch,
    MarkerLane,
    check_producer_id,
    new_producer_id,
    read_retrying,
)
from zkqueue.errors import (
    ConfigurationError,
    ItemTooLargeError,
    QueueClosedError,
    QueueStateError,
    SerializationError,
)
from zkqueue.formats import framing, naming
from zkqueue.listeners import ListenerContainer
from zkqueue.transport import protocol

log = logging.getLogger("zkqueue.engine.producer")

#: Per-request overhead we budget for beyond path and data (headers, ACL, multi op header).
_REQUEST_OVERHEAD = 512
#: Background put multis in flight at once.
_PUTS_PIPELINED = 3
#: Parent nodes (time buckets) a producer remembers as existing: enough for every minute bucket of 45 days (a
#: 30-day schedule has 43,920 buckets), about 12 MB at most; a bucket it forgot costs one more create request.
_KNOWN_PARENTS = 65_536


@dataclass
class PutRequest:
    prefix: str
    data: bytes
    item: Any
    multi: bool
    #: Nodes that must exist before the node (e.g. the time buckets of a parked item), outermost first: created in
    #: the same round trip as the put, unless this producer already knows them.
    parents: tuple[str, ...] = ()


class Producer:
    """Puts of one queue instance. ``check_started`` raises unless the queue is started."""

    def __init__(
        self,
        ctx: QueueContext,
        serializer: Any,
        listeners: ListenerContainer[Any],
        *,
        background: bool,
        max_items: int | None,
        check_started: Callable[[], None],
        blobs: BlobWriter | None = None,
        producer_id: str | None = None,
        settle_wait: float = 60.0,
    ) -> None:
        self._ctx = ctx
        #: Exactly-once puts: the put thread and the foreground puts each advance a marker lane of their own.
        self.producer_id = check_producer_id(producer_id) if producer_id is not None else new_producer_id()
        self._lanes = {lane: MarkerLane(ctx.client, ctx.queue_path, self.producer_id, lane, ctx.acl)
                       for lane in ("bg", "fg", "groups", "seq")}
        self._settle_wait = settle_wait
        self._blobs = blobs
        self._serializer = serializer
        self._listeners = listeners
        self._background = background
        self._max_items = max_items
        self._check_started = check_started
        self._cache: ChildrenCache | None = None
        # background puts
        self._cond = threading.Condition()
        self._queue: deque[PutRequest] = deque()
        self._in_flight = 0
        self._thread: threading.Thread | None = None
        # bounded puts: one at a time, and our own creates the listing does not show yet
        self._bound_lock = threading.Lock()
        self._own_lock = threading.Lock()
        self._own_unlisted: list[int] = []
        # parents of puts (time buckets) known to exist: LRU
        self._parents_lock = threading.Lock()
        self._parents_known: OrderedDict[str, None] = OrderedDict()
        self._group = GroupCommit(lambda reqs: self._send_nodes(reqs, "fg"), lambda req: self._create_node(req, "fg"),
                                  self._take, ctx.queue_path)

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self, cache: ChildrenCache | None) -> None:
        """Start the put thread (background mode); ``cache`` is the listing bounded puts wait on."""
        self._cache = cache
        if self._background:
            self._thread = threading.Thread(
                target=self._put_loop, name=f"zkqueue-put-{self._ctx.queue_path}", daemon=True
            )
            self._thread.start()

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    @property
    def blob_writer(self) -> BlobWriter | None:
        """The large-item writer (None unless ``large_items`` is set)."""
        return self._blobs

    @property
    def in_flight(self) -> int:
        """Background puts queued or sent and not yet completed."""
        return self._in_flight

    @property
    def group_waiting(self) -> int:
        """Foreground callers waiting behind the group commit in flight."""
        return self._group.waiting

    def wake(self) -> None:
        """Let the put thread see that the queue is closing."""
        with self._cond:
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every background put has completed (or failed); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._in_flight > 0:
                if deadline is None:
                    self._cond.wait(0.5)
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def fail_pending(self) -> None:
        """Fail every put still queued (the queue closed before they were sent)."""
        with self._cond:
            pending = list(self._queue)
            self._queue.clear()
            self._in_flight -= len(pending)
            self._cond.notify_all()
        for req in pending:
            self._notify_failed(req, QueueClosedError(f"queue {self._ctx.queue_path} closed before the put was sent"))

    # ------------------------------------------------------------------------------------------ framing
    def frame(self, items: Iterable[Any]) -> bytes:
        """Serialize and frame ``items`` for one znode (Curator's ItemSerializer)."""
        return framing.encode_items([self._serialize(i) for i in items])

    def _serialize(self, item: Any) -> bytes:
        try:
            data = self._serializer.serialize(item)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(f"serializer {self._serializer!r} failed on {item!r:.80}: {exc}") from exc
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SerializationError(f"serializer {self._serializer!r} returned {type(data).__name__}, not bytes")
        return bytes(data)

    def check_size(self, prefix: str, data: bytes) -> bool:
        """Whether ``data`` goes in as a large item (it does not fit one znode and large items are on); raises
        :class:`ItemTooLargeError` before any I/O for what cannot be stored at all."""
        overhead = len(prefix.encode("utf-8")) + self._ctx.chroot_len + 10 + _REQUEST_OVERHEAD
        if len(data) + overhead <= self._ctx.jute_max_buffer:
            return False
        if self._blobs is None:
            raise ItemTooLargeError(len(data), self._ctx.jute_max_buffer - overhead)
        self._blobs.check(data)
        return True

    # ------------------------------------------------------------------------------------------ puts
    def put_framed(
        self, data: bytes, prefix: str, item: Any, *, multi: bool = False, timeout: float | None = None,
        sequence: int | None = None, parents: tuple[str, ...] = (),
    ) -> bool:
        """Wait for room (bounded queues), then store ``data`` (a frame from :meth:`frame`) as a sequential node
        at ``prefix``. ``item`` is what put listeners receive (the list of items when ``multi``). False only
        when a bounded queue stayed full for ``timeout`` seconds. With ``sequence`` see :meth:`put_sequenced`.
        ``parents``: nodes to create first if missing (see :attr:`PutRequest.parents`)."""
        self._check_started()
        if sequence is not None:
            return self.put_sequenced(data, prefix, item, sequence, multi=multi, parents=parents)
        if self._max_items is None:
            return self._send_framed(data, prefix, item, multi=multi, parents=parents)
        if timeout is not None:
            timeout = max(0.0, float(timeout))
        self.check_size(prefix, data)
        # One bounded put at a time per instance, so this instance never overshoots its own bound.
        if not self._bound_lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            if not self._wait_for_room(timeout):
                return False
            return self._send_framed(data, prefix, item, multi=multi, parents=parents)
        finally:
            self._bound_lock.release()

    def _send_framed(self, data: bytes, prefix: str, item: Any, *, multi: bool, parents: tuple[str, ...] = ()
                     ) -> bool:
        """Send one framed znode at ``prefix`` (sequential): queued for the put thread, or created now."""
        self._check_started()
        large = self.check_size(prefix, data)
        req = PutRequest(prefix, data, item, multi, parents)
        if large:
            return self._put_large(req)
        if self._background:
            with self._cond:
                if self._ctx.closing.is_set():
                    raise QueueClosedError(f"queue {self._ctx.queue_path} is closed")
                self._in_flight += 1
                self._queue.append(req)
                self._cond.notify_all()
            return True
        return self._put_now(
            req, lambda: self._group.put(req) if self._max_items is None else self._create_node(req, "fg"))

    def put_sequenced(self, data: bytes, prefix: str, item: Any, sequence: int, *, multi: bool = False,
                      parents: tuple[str, ...] = ()) -> bool:
        """Store ``data`` as the producer's batch number ``sequence`` (increasing, > 0), in the caller's thread
        after this instance's earlier background puts: a sequence the producer's ``seq`` marker shows committed
        is not stored again. So a producer restarted with the same ``producer_id`` can replay its last batch
        (Kafka's idempotent producer across restarts). Bounded queues do not wait for room here."""
        if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence <= 0:
            raise ConfigurationError(f"sequence must be a positive int, got {sequence!r}")
        if self.check_size(prefix, data):
            raise ConfigurationError("a put with a sequence number cannot hold a large item")
        if self._background:
            self.flush()
        req = PutRequest(prefix, data, item, multi, parents)
        return self._put_now(req, lambda: self._create_node(req, "seq", number=sequence))

    def _put_large(self, req: PutRequest) -> bool:
        """Store a large item now, in the caller's thread, behind this instance's earlier background puts."""
        assert self._blobs is not None
        if self._background:
            self.flush()
        blobs = self._blobs
        return self._put_now(req, lambda: blobs.put(req.data, req.prefix))

    def _put_now(self, req: PutRequest, store: Callable[[], str | None]) -> bool:
        """Run ``store`` (which returns the created path, or None when unknown) and account for the put: errors
        are counted and mapped to typed ones; a bounded queue remembers its own create until listed."""
        try:
            created = store()
        except Exception as exc:
            self._ctx.counters.add("put_failed")
            mapped = map_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        # bounded queues count their own creates in the queue node (not parked ones) until the listing shows them
        seq = (None if created is None or self._max_items is None
               or created.rsplit("/", 1)[0] != self._ctx.queue_path else naming.sequence_of(created))
        if seq is not None:
            with self._own_lock:
                self._own_unlisted.append(seq)
        self._ctx.counters.add("put_ok")
        self._notify(req)
        return True

    def _create_node(self, req: PutRequest, lane: str, number: int | None = None) -> str | None:
        """Create ``req``'s sequential node now and return its path (None when a lost reply was settled as
        committed, or ``number`` had committed before); every single-node put goes here. Raises the error of its
        create."""
        result = self._send_nodes([req], lane, number=number).result()
        if not result.ok and req.parents and isinstance(result.failure, NoNodeError):
            # A parent this producer knew was deleted meanwhile (a purge; or the mover removed the emptied time
            # bucket, which it does only once the bucket is due): the put did not commit. Create the parents
            # again and send it once more; if that fails too, the bucket's time has come: put the node straight
            # into the queue under the same name (its name carries its due time, so it is never early).
            self._forget_parents(req.parents)
            result = self._send_nodes([req], lane, number=number).result()
            if not result.ok and isinstance(result.failure, NoNodeError):
                req = PutRequest(naming.join(self._ctx.queue_path, req.prefix.rsplit("/", 1)[-1]), req.data,
                                 req.item, req.multi)
                result = self._send_nodes([req], lane, number=number).result()
        if not result.ok:
            raise result.failure or QueueStateError(f"put to {req.prefix} failed")
        return result.results[0]

    def _send_nodes(self, reqs: Sequence[PutRequest], lane: str, number: int | None = None) -> MarkedBatch:
        """Send the sequential nodes of ``reqs`` as ONE multi, in order, led by the lane's marker update, without
        waiting (every put). Its ``result()`` settles a lost reply: exactly once."""
        items = [(r.prefix, r.data) for r in reqs]
        parents = [p for r in reqs for p in r.parents]

        def send(head: list[Any]) -> protocol.PendingMulti:
            if parents:
                self.create_parents(parents)
            return protocol.send_creates(self._ctx.client, items, acl=self._ctx.acl, sequence=True,
                                         limit=self._ctx.jute_max_buffer, head=head)

        what = f"put of {len(reqs)} to {self._ctx.queue_path}" if len(reqs) > 1 else f"put to {self._ctx.queue_path}"
        return MarkedBatch(self._lanes[lane], send, len(reqs), self._ctx.connection, self._settle_wait, what,
                           number=number)

    def create_parents(self, parents: Sequence[str], *, fresh: bool = False) -> None:
        """Send creates of the ``parents`` this producer does not know to exist (all of them with ``fresh``),
        without waiting: they reach the server before any request sent next on this session, and one that exists
        already fails harmlessly."""
        with self._parents_lock:
            unknown = [p for p in dict.fromkeys(parents) if fresh or p not in self._parents_known]
            for path in unknown:
                self._parents_known[path] = None
            while len(self._parents_known) > _KNOWN_PARENTS:
                self._parents_known.popitem(last=False)
        for path in unknown:
            protocol.send_create(self._ctx.client, create_op(path, b"", acl=self._ctx.acl))
        if unknown:
            self._ctx.counters.add("bucket_writes", len(unknown))

    def _forget_parents(self, parents: Sequence[str]) -> None:
        with self._parents_lock:
            for path in parents:
                self._parents_known.pop(path, None)

    def read_retrying(self, call: Callable[[], Any], what: str) -> Any:
        """``call()`` (a read: before a put, or a look at the queue), waiting out a lost connection for up to the put
        outcome wait; then :class:`~zkqueue.errors.ConnectionLostError` (see :func:`put_markers.read_retrying
        <zkqueue.engine.put_markers.read_retrying>`)."""
        return read_retrying(call, self._ctx.connection, self._settle_wait, what)

    def commit_groups(self, groups: Sequence[Sequence[Any]]) -> list[GroupOutcome]:
        """Commit each group of ops atomically, many per multi, exactly once: each multi leads with the
        ``groups`` lane's marker, so a lost reply is settled instead of sent twice (a group whose multi was
        settled as committed has ``None`` results). The seam for layers that put with their own ops (jobs)."""
        outcome: list[GroupOutcome | None] = [None] * len(groups)
        pending = list(range(len(groups)))
        lane = self._lanes["groups"]
        budget = self._ctx.jute_max_buffer - MULTI_SLACK - node_cost(lane.path, b"0" * 20, self._ctx.chroot_len)
        while pending:
            chunk, ops, owner = next_chunk(self._ctx, groups, pending, budget, [])

            def send(head: list[Any], ops: list[Any] = ops) -> protocol.PendingMulti:
                return protocol.send_multi(self._ctx.client, head + ops, limit=self._ctx.jute_max_buffer)

            result = MarkedBatch(lane, send, len(ops), self._ctx.connection, self._settle_wait,
                                 f"commit of {len(chunk)} group(s) to {self._ctx.queue_path}").result()
            if result.ok:
                offset = 0
                for g in chunk:
                    outcome[g] = GroupOutcome(True, result.results[offset : offset + len(groups[g])])
                    offset += len(groups[g])
                pending = pending[len(chunk):]
                continue
            if result.failed_index is None:
                raise result.failure or QueueStateError(f"a multi on {self._ctx.queue_path} failed")
            g, i = owner[result.failed_index]
            outcome[g] = GroupOutcome(False, error=result.failure, op=i)
            pending.remove(g)
        return [o if o is not None else GroupOutcome(False) for o in outcome]

    def _take(self, waiting: deque[Any], batch: list[Any], req_of: Callable[[Any], PutRequest]) -> None:
        """Move puts from the head of ``waiting`` to ``batch`` while they fit one multi (op count and bytes, the
        first always); ``req_of`` gives an entry's PutRequest. The caller holds the lock guarding ``waiting``."""
        budget = self._ctx.jute_max_buffer - MULTI_SLACK
        chroot = self._ctx.chroot_len
        size = sum(node_cost(req_of(x).prefix, req_of(x).data, chroot) for x in batch)
        while waiting and len(batch) < MAX_OPS_PER_MULTI:
            req = req_of(waiting[0])
            req_size = node_cost(req.prefix, req.data, chroot)
            if batch and size + req_size > budget:
                break
            batch.append(waiting.popleft())
            size += req_size

    def _notify(self, req: PutRequest) -> None:
        if req.multi:
            self._listeners.notify("put_multi_completed", req.item)
        else:
            self._listeners.notify("put_completed", req.item)

    def _notify_failed(self, req: PutRequest, exc: BaseException) -> None:
        self._ctx.counters.add("put_failed")
        log.warning("background put to %s failed: %r", req.prefix, exc)
        self._listeners.notify("put_failed", req.item, exc)

    # ------------------------------------------------------------------------------------------ bounded
    def _wait_for_room(self, timeout: float | None) -> bool:
        cache = self._cache
        assert cache is not None and self._max_items is not None
        limit = self._max_items

        def has_room(snap: Snapshot) -> bool:
            # Our own creates the listing does not reflect yet count too (their sequence >= its cversion).
            with self._own_lock:
                self._own_unlisted = [s for s in self._own_unlisted if s >= snap.cversion]
                unlisted = len(self._own_unlisted)
            return sum(1 for n in snap.children if naming.is_item_name(n)) + unlisted < limit

        # Curator semantics: the timeout restarts whenever the children change.
        while True:
            snap = cache.snapshot
            if has_room(snap):
                return True
            if not self._ctx.is_running():
                self._check_started()
                raise QueueClosedError(f"queue {self._ctx.queue_path} is closed")
            newer = cache.wait_for_change(snap.version, timeout)
            if newer.version == snap.version:
                if cache.closed:
                    raise QueueClosedError(f"queue {self._ctx.queue_path} is closed")
                return has_room(newer)

    # ------------------------------------------------------------------------------------------ put thread
    def _put_loop(self) -> None:
        """Send queued puts as multi transactions, up to _PUTS_PIPELINED multis in flight at once.

        ZooKeeper runs one session's requests in order, so sequence numbers follow put order. Completions are
        handled in send order; the in-flight counter is decremented for every request whatever happens.
        """
        inflight: deque[tuple[list[PutRequest], Any]] = deque()
        closing = self._ctx.closing
        while True:
            batch: list[PutRequest] = []
            with self._cond:
                while not self._queue and not inflight and not closing.is_set():
                    self._cond.wait()
                is_closing = closing.is_set()  # close() flushed for final_flush_time: send nothing new
                if not inflight and (is_closing or not self._queue):
                    return
                # Another multi goes out while some are in flight only if it is full; otherwise waiting for
                # the oldest reply lets the next batch grow (fewer, bigger requests). None goes out while one in
                # flight is doomed (a lost reply settled as not committed, or a batch before it failed): that one
                # is sent again first, or the new one would take its place in the sequence.
                if not is_closing and self._queue and (
                    not inflight
                    or (len(inflight) < _PUTS_PIPELINED and len(self._queue) >= MAX_OPS_PER_MULTI
                        and not any(sent.doomed for _batch, sent in inflight))
                ):
                    self._take(self._queue, batch, lambda r: r)
            if batch:
                pending = None
                if len(batch) > 1 and self._ctx.connection.connected.is_set():
                    try:
                        pending = self._send_nodes(batch, "bg")
                    except Exception:
                        log.debug("could not send a put batch asynchronously; sending it in order", exc_info=True)
                        pending = None
                if pending is not None:
                    inflight.append((batch, pending))
                    continue
                # Single puts and the disconnected case go the synchronous way, after what is in flight.
                while inflight:
                    self._finish_batch(*inflight.popleft())
                self._finish_batch(batch, None)
                continue
            self._finish_batch(*inflight.popleft())

    def _finish_batch(self, batch: list[PutRequest], pending: Any) -> None:
        try:
            if pending is None:
                self._send_now(batch)
                return
            self._handle_result(batch, pending.result())  # a lost reply is settled by the marker: exactly once
        except Exception as exc:  # never let the put thread die
            log.exception("background put thread error on %s", self._ctx.queue_path)
            for req in batch:
                self._notify_failed(req, exc)
        finally:
            with self._cond:
                self._in_flight -= len(batch)
                self._cond.notify_all()

    def _handle_result(self, batch: list[PutRequest], result: Any) -> None:
        if result.ok:
            self._ctx.counters.add("put_ok", len(batch))
            for req in batch:
                self._notify(req)
            return
        # A multi is all-or-nothing; find out which item is at fault by sending them one by one.
        log.debug("background put multi failed at %s: %r; retrying one by one", result.failed_index, result.failure)
        for req in batch:
            self._send_single(req)

    def _send_now(self, batch: list[PutRequest]) -> None:
        if len(batch) == 1:
            self._send_single(batch[0])
            return
        try:
            result = self._send_nodes(batch, "bg").result()
        except Exception as exc:
            for req in batch:
                self._notify_failed(req, map_error(exc))
            return
        self._handle_result(batch, result)

    def _send_single(self, req: PutRequest) -> None:
        try:
            self._create_node(req, "bg")
        except Exception as exc:
            self._notify_failed(req, map_error(exc))
            return
        self._ctx.counters.add("put_ok")
        self._notify(req)
