"""DistributedQueue: Curator's queue engine on kazoo, wire-compatible, with Curator's bugs fixed.

This module is the Curator-shaped facade; the work is done by the parts it wires together, one module each:

- :mod:`~zkqueue.engine.config`: the queue's options (:class:`~zkqueue.engine.config.QueueConfig`, frozen and
  validated once);
- :mod:`~zkqueue.engine.consumption`: the one factory of push (run loop + consumer) and pull (claim_nodes)
  consumption;
- :mod:`~zkqueue.engine.producer` (and :mod:`~zkqueue.engine.group_commit`): every put path;
- :mod:`~zkqueue.engine.children`: the versioned children listing the loop and bounded puts wait on;
- :mod:`~zkqueue.engine.run_loop` and :mod:`~zkqueue.engine.steps`: ordering, due times, step sizes;
- :mod:`~zkqueue.engine.nolock`: the no-lock taker (delete with a receipt, then deliver);
- :mod:`~zkqueue.engine.locksafe`, :mod:`~zkqueue.engine.leases`, :mod:`~zkqueue.engine.completion`: lock-safe
  consumption (lease, read, deliver, complete in fenced multis);
- :mod:`~zkqueue.engine.delivery` and :mod:`~zkqueue.engine.quarantine`: handing nodes to the consumer, and
  moving undecodable ones aside;
- :mod:`~zkqueue.engine.seams`: what the layers above hook into (node consumers, completions with extra ops,
  moves to other queues, claim hooks).

Recipes (priority, delay, id) override only the naming/sort hooks: ``get_delay``, ``sort_children``,
``make_item_path``, ``make_requeue_item_path``, and store nodes through :meth:`DistributedQueue._put_framed`.

Threads of one started queue (all daemons, all joined by ``close()``; a user executor is never shut down):
``zkqueue-loop-<path>`` (run loop, which also claims, delivers and completes), ``zkqueue-put-<path>`` (background
puts), ``zkqueue-blobs-<path>`` (with ``large_items``: the reaper of orphaned blobs, see
:mod:`~zkqueue.engine.blob_reaper`) and ``zkqueue-cache-<path>`` (listing upkeep off kazoo's threads). Every queue on
one client shares two more (:mod:`~zkqueue.engine.shared`): ``zkqueue-chores`` (lock-safe lease upkeep, among other
periodic chores) and ``zkqueue-events`` (connection states to the consumers).

Delivery: without a lock path items are deleted before delivery (at-most-once, as Curator); with one they are
deleted after the consumer returned (at-least-once: a crash before the ack means redelivery).
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import threading
import uuid
from concurrent.futures import Executor
from typing import Any, Callable, Generic, Iterable, Sequence, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, NoAuthError, NotEmptyError

from zkqueue.consumer import ConnectionState, ErrorMode, QueueConsumer, as_consumer
from zkqueue.engine.blob_reaper import BlobReaper
from zkqueue.engine.blobs import BlobWriter, LargeItems
from zkqueue.engine.children import ChildrenCache
from zkqueue.engine.commit import GroupOutcome, commit_groups, create_op, map_error
from zkqueue.engine import held as held_nodes
from zkqueue.engine.held import HeldNode
from zkqueue.engine.config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_FINAL_FLUSH_TIME,
    DEFAULT_LOCK_NAMES,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_PUT_OUTCOME_WAIT,
    QueueConfig,
    check_parts,
)
from zkqueue.engine.consumption import PULL_NEEDS, Consumption, Hooks, build_consumption
from zkqueue.engine.context import ConnectionWatch, QueueContext
from zkqueue.engine.leases import removal_ops
from zkqueue.engine.mover import Mover
from zkqueue.engine.parking import Parking, Placement
from zkqueue.engine.producer import Producer
from zkqueue.engine.pull import Puller
from zkqueue.engine.put_markers import ClientConnection, read_retrying
from zkqueue.engine.seams import ClaimHook
from zkqueue.engine.shared import ClientServices
from zkqueue.engine.stats import Counters, QueueStats
from zkqueue.errors import (
    ConfigurationError,
    ItemTooLargeError,
    LockPathConflictError,
    QueueClosedError,
    QueueNotStartedError,
    QueueStateError,
)
from zkqueue.formats import buckets, naming
from zkqueue.formats.buckets import Layout
from zkqueue.listeners import Dispatcher, ListenerContainer, QueuePutListener
from zkqueue.transport import protocol

log = logging.getLogger("zkqueue.engine.queue")

T = TypeVar("T")

__all__ = ["DEFAULT_BATCH_SIZE", "DistributedQueue", "QueueConfig", "QueueStats"]

#: The keyword options of DistributedQueue: the fields of QueueConfig.
_OPTION_NAMES = frozenset(QueueConfig.__dataclass_fields__)


class _State(enum.Enum):
    LATENT = "LATENT"
    STARTED = "STARTED"
    STOPPED = "STOPPED"


class DistributedQueue(Generic[T]):
    """A Curator-compatible distributed queue. Build it with :class:`zkqueue.QueueBuilder`.

    ``claim_hook`` (a :class:`~zkqueue.engine.seams.ClaimHook`) is a seam for the layers above the engine; a
    consumer with ``consume_node`` gets whole nodes and returns :class:`~zkqueue.engine.seams.Completion` s.
    """

    def __init__(
        self,
        client: KazooClient,
        consumer: Any,
        serializer: Any,
        queue_path: str,
        *,
        lock_path: str | None = None,
        max_items: int | None = None,
        put_in_background: bool = True,
        executor: Executor | None = None,
        final_flush_time: float = DEFAULT_FINAL_FLUSH_TIME,
        quarantine_path: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        jute_max_buffer: int | None = None,
        lock_names: str = DEFAULT_LOCK_NAMES,
        min_items_before_refresh: int | None = None,
        refresh_on_watch: bool = False,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        acl: Sequence[Any] | None = None,
        auth: Sequence[tuple[str, str]] = (),
        claim_hook: ClaimHook | None = None,
        large_items: LargeItems | None = None,
        producer_id: str | None = None,
        put_outcome_wait: float = DEFAULT_PUT_OUTCOME_WAIT,
        park_after: float | None = None,
        run_mover: bool = True,
        schedule_layout: Layout | None = None,
        config: QueueConfig | None = None,
    ) -> None:
        """The keyword options are those of :class:`~zkqueue.engine.config.QueueConfig` (validated there). With
        ``config`` (what :class:`~zkqueue.QueueBuilder` passes), the keywords set to other than their defaults
        override its fields (a recipe's own settings)."""
        given = dict(locals())  # the arguments, before any other name is bound
        options = {name: given[name] for name in _OPTION_NAMES}
        check_parts(client, serializer)
        self._config = cfg = QueueConfig.of(config, **options)
        paths = cfg.paths(queue_path)
        self._client = client
        self._consumer: QueueConsumer[T] | None = as_consumer(consumer)
        self._serializer = serializer
        self._queue_path, self._lock_path = paths.queue, paths.lock
        self._quarantine_path, self._receipt_path = paths.quarantine, paths.receipt
        #: ACL of every node this queue creates (queue, items, locks, fences, quarantine, receipts); None uses
        #: the client's default_acl.
        self._acl = list(cfg.acl) if cfg.acl is not None else None
        self._error_mode = ErrorMode.REQUEUE

        self.put_listeners: ListenerContainer[QueuePutListener[T]] = ListenerContainer()
        self._state = _State.LATENT
        self._state_lock = threading.Lock()
        self._closing = threading.Event()
        self._events: Dispatcher | None = None
        self._counters = Counters()
        self._ctx = QueueContext(
            client=client,
            queue_path=self._queue_path,
            lock_path=self._lock_path,
            quarantine_path=self._quarantine_path,
            receipt_path=self._receipt_path,
            acl=self._acl,
            jute_max_buffer=cfg.jute_max_buffer or protocol.jute_max_buffer(),
            lock_names=cfg.lock_names,
            counters=self._counters,
            connection=ConnectionWatch(client, self._closing, self._deliver_state, f"queue {queue_path}"),
            closing=self._closing,
            is_running=self._running,
            # who holds a lock: host, process, and this queue instance (how a lease is recognised as ours)
            lock_data=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}".encode(),
            chroot_len=len((getattr(client, "chroot", None) or "").encode("utf-8")),
        )
        large = cfg.large_items
        #: The producer: every put path (an internal part; its ``group_waiting`` is handy in tests).
        self.producer = Producer(
            self._ctx, serializer, self.put_listeners, background=cfg.put_in_background, max_items=cfg.max_items,
            check_started=self._check_started, blobs=BlobWriter(self._ctx, large) if large is not None else None,
            producer_id=cfg.producer_id, settle_wait=cfg.put_outcome_wait,
        )
        self._blob_reaper = BlobReaper(self._ctx, large) if large is not None else None
        #: Parking (see zkqueue.engine.parking): None keeps every item in the queue node (Curator's layout).
        self._parking = (Parking(self._queue_path, cfg.park_after, cfg.schedule_layout)
                         if cfg.park_after is not None else None)
        self._mover = Mover(self._ctx, self._parking) if self._parking is not None and cfg.run_mover else None
        self._cache: ChildrenCache | None = None
        #: Push or pull consumption, once built (see zkqueue.engine.consumption).
        self._consumption: Consumption | None = None
        self._consumption_lock = threading.Lock()

    # ------------------------------------------------------------------------------------------ properties
    @property
    def config(self) -> QueueConfig:
        """This queue's options (frozen; see :mod:`zkqueue.engine.config`)."""
        return self._config

    @property
    def queue_path(self) -> str:
        return self._queue_path

    @property
    def lock_path(self) -> str | None:
        return self._lock_path

    @property
    def quarantine_path(self) -> str:
        return self._quarantine_path

    @property
    def client(self) -> KazooClient:
        return self._client

    @property
    def last_message_count(self) -> int:
        """Number of item children (foreign nodes excluded) in the latest listing this queue saw.

        Asking also requests a fresh listing if changes are known to be pending (the consumer's cache lists
        lazily), so repeated reads converge on the real count."""
        if self._cache is not None:
            if self._cache.stale:
                self._cache.request_sync()
            snap = self._cache.snapshot
            return sum(1 for n in snap.children if naming.is_item_name(n))
        loop = self._consumption.loop if self._consumption is not None else None
        return loop.last_message_count if loop is not None else 0

    @property
    def is_started(self) -> bool:
        """True between start() and close()."""
        return self._state is _State.STARTED

    @property
    def is_closed(self) -> bool:
        """True once close() has begun."""
        return self._state is _State.STOPPED

    @property
    def error_mode(self) -> ErrorMode:
        return self._error_mode

    def stats(self) -> QueueStats:
        stats = self._counters.snapshot()
        if self._cache is not None:
            stats.queue_recreated = self._cache.recreated
            stats.listings = self._cache.listings
        return stats

    def set_error_mode(self, mode: ErrorMode) -> None:
        """REQUEUE (default) or DELETE; only meaningful with a lock path (as in Curator)."""
        if self._lock_path is None:
            raise ConfigurationError("set_error_mode needs a lock path (Curator: lockPath cannot be null)")
        if not isinstance(mode, ErrorMode):
            raise ConfigurationError(f"mode must be an ErrorMode, got {mode!r}")
        self._error_mode = mode

    # ------------------------------------------------------------------------------------------ hooks
    def get_delay(self, item_node: str) -> float:
        """Seconds until ``item_node`` may be consumed; <= 0 means now."""
        return 0.0

    def sort_children(self, names: list[str]) -> list[str]:
        """Order in which children are consumed."""
        return sorted(names)

    #: Optional hook: a sort key of one child name such that ``sort_children(names) == sorted(names,
    #: key=order_key)``, for a queue whose ``get_delay`` is a due instant in the name minus now. Pull-mode claims
    #: then keep the order across listings instead of sorting each one (see :mod:`zkqueue.engine.ordering`).
    order_key: Callable[[str], Any] | None = None

    def make_item_path(self) -> str:
        """Prefix of a new item node (ZooKeeper appends the sequence)."""
        return self._queue_path + "/" + naming.ITEM_PREFIX

    def make_requeue_item_path(self, item_path: str) -> str:
        """Prefix used when an item is requeued after a consumer error."""
        return self.make_item_path()

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Create the queue's nodes where missing and start its threads. A lost connection (a leader election) is
        waited out for up to ``put_outcome_wait`` seconds; past it :class:`~zkqueue.errors.ConnectionLostError`
        (the queue is then closed: build a new one)."""
        with self._state_lock:
            if self._state is _State.STARTED:
                raise QueueStateError(f"queue {self._queue_path} is already started")
            if self._state is _State.STOPPED:
                raise QueueClosedError(f"queue {self._queue_path} was closed; build a new one")
            self._state = _State.STARTED
        try:
            self._check_lock_path_is_not_an_item()
            for scheme, credential in self._config.auth:
                self._client.add_auth(scheme, credential)
            # a failover under way is waited out (each step may run again: all are idempotent), for up to the put
            # outcome wait; then ConnectionLostError
            read_retrying(self._create_nodes, ClientConnection(self._client), self._config.put_outcome_wait,
                          f"starting queue {self._queue_path}")
        except NoAuthError as exc:
            self._state = _State.STOPPED
            raise map_error(exc) from exc
        except Exception:
            self._state = _State.STOPPED
            raise
        self._events = ClientServices.of(self._client).take_events()
        self._ctx.connection.start()
        if self._consumer is not None or self._config.max_items is not None:
            self._cache = ChildrenCache(
                self._client,
                self._queue_path,
                name=f"zkqueue-cache-{self._queue_path}",
                lazy=self._config.max_items is None,  # bounded puts need every change promptly
                acl=self._acl,
            )
            self._cache.start()
        self.producer.start(self._cache)
        if self._blob_reaper is not None:
            self._blob_reaper.start()
        if self._mover is not None:
            self._mover.start()
        if self._consumer is not None:
            self._consumption = self._build_consumption()
        log.debug("queue %s started", self._queue_path)

    def _create_nodes(self) -> None:
        """The queue's nodes, created where missing (and the schedule's layout recorded or adopted)."""
        self._client.ensure_path(self._queue_path, acl=self._acl)
        if self._lock_path is not None:
            self._client.ensure_path(self._lock_path, acl=self._acl)
        if self._consumer is not None:
            self._client.ensure_path(self._quarantine_path, acl=self._acl)
            if self._lock_path is None:
                self._client.ensure_path(self._receipt_path, acl=self._acl)
        if self._parking is not None:
            self._parking.open(self._client, self._acl)

    def _build_consumption(self) -> Consumption:
        """This queue's push loop (with a consumer, at start()) or pull pipeline (without, at the first claim): the
        one place either is built (see :func:`~zkqueue.engine.consumption.build_consumption`)."""
        hooks = Hooks(sort_children=self.sort_children, get_delay=self.get_delay, order_key=self.order_key,
                      requeue_prefix=self.make_requeue_item_path, error_mode=lambda: self._error_mode)
        consumption = build_consumption(self._ctx, self._config, self._serializer, hooks, self._consumer, self._cache)
        self._cache = consumption.cache
        return consumption

    def _check_lock_path_is_not_an_item(self) -> None:
        """Refuse a lock path that is (or lies under) some queue's item node: its lock children would make that
        item undeletable for its own consumers."""
        if self._lock_path is None:
            return
        for segment in self._lock_path.strip("/").split("/"):
            if naming.is_item_name(segment) and naming.sequence_of(segment) is not None:
                raise LockPathConflictError(
                    f"lock path {self._lock_path!r} names a queue item node ({segment!r}); use a path of its own"
                )

    def close(self) -> None:
        """Flush background puts (up to final_flush_time), stop consuming, clear listeners. Idempotent."""
        with self._state_lock:
            if self._state is not _State.STARTED:
                self._state = _State.STOPPED
                return
            self._state = _State.STOPPED
        flush_time = self._config.final_flush_time
        if flush_time > 0 and self._config.put_in_background:
            if not self.producer.flush(flush_time):
                log.warning(
                    "queue %s closed with %d background put(s) not flushed after %.1fs",
                    self._queue_path,
                    self.producer.in_flight,
                    flush_time,
                )
        self._closing.set()
        self.producer.wake()
        if self._cache is not None:
            self._cache.close()
        current = threading.current_thread()
        consumption = self._consumption
        for thread in (consumption.thread if consumption is not None else None, self.producer.thread):
            if thread is not None and thread is not current:
                thread.join(30.0)
                if thread.is_alive():
                    log.warning("thread %s did not stop within 30s (a consumer still running?)", thread.name)
        self.producer.fail_pending()
        if self._mover is not None:
            self._mover.stop()
        if self._blob_reaper is not None:
            self._blob_reaper.stop()
        if consumption is not None and consumption.puller is not None:
            consumption.puller.close()
        if consumption is not None and consumption.lease_taker is not None:
            consumption.lease_taker.close()
        self._ctx.connection.stop()
        if self._events is not None:
            self._events = None
            ClientServices.of(self._client).release_events()
        self.put_listeners.clear()
        log.debug("queue %s closed", self._queue_path)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={self._queue_path!r}, lock_path={self._lock_path!r}, "
            f"state={self._state.value}, consumer={self._consumer!r})"
        )

    def __enter__(self) -> "DistributedQueue[T]":
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _check_started(self) -> None:
        state = self._state
        if state is _State.LATENT:
            raise QueueNotStartedError(f"queue {self._queue_path} is not started; call start() first")
        if state is _State.STOPPED:
            raise QueueClosedError(f"queue {self._queue_path} is closed")

    def _running(self) -> bool:
        return self._state is _State.STARTED and not self._closing.is_set()

    def _deliver_state(self, state: ConnectionState) -> None:  # kazoo's connection thread: never block
        consumer = self._consumer
        events = self._events
        if consumer is None or events is None:
            return
        fn = getattr(consumer, "state_changed", None)
        if callable(fn):
            events.submit(fn, state)

    # ------------------------------------------------------------------------------------------ puts
    def put(self, item: T, timeout: float | None = None, *, sequence: int | None = None) -> bool:
        """Add one item. Blocks while a bounded queue is full; with ``timeout`` returns False when still full.

        Background puts (the default) return once the item is queued for sending; failures reach
        ``put_listeners`` (``put_failed``) and ``stats().put_failed``. ``sequence``: see :meth:`put_multi`.
        """
        self._check_started()
        if sequence is not None:
            return self.producer.put_sequenced(self._frame([item]), self.make_item_path(), item, sequence)
        return self._put_one(self.make_item_path(), item, timeout)

    def put_multi(self, items: Iterable[T], timeout: float | None = None, *, sequence: int | None = None) -> bool:
        """Add several items in ONE znode (Curator's MultiItem format); consumers get them in order.

        ``sequence``: this batch's number in the producer's own increasing sequence. It is stored in the caller's
        thread, and a sequence the producer's marker shows committed is not stored again, so a producer restarted
        with the same ``producer_id`` replays its last batch without a duplicate (see README, exactly-once
        puts)."""
        self._check_started()
        if sequence is not None:
            items = list(items)
            return self.producer.put_sequenced(self._frame(items), self.make_item_path(), items, sequence,
                                               multi=True)
        return self._put_many(self.make_item_path(), items, timeout)

    def _frame(self, items: Iterable[Any]) -> bytes:
        """Serialize and frame ``items`` for one znode (Curator's ItemSerializer)."""
        return self.producer.frame(items)

    def put_ops(self, item: T) -> list[Any]:
        """The op that adds ``item`` (its sequential create), for a multi of the caller's with ops of its own:
        commit it with :meth:`commit_puts` (exactly once through a lost reply), so the item is stored exactly when
        the caller's ops commit. Raises :class:`~zkqueue.errors.ItemTooLargeError` for an item that does not fit
        one znode (a large item takes multis of its own: put it with :meth:`put`)."""
        self._check_started()
        return self._put_ops(self.make_item_path(), item)

    def _put_ops(self, prefix: str, item: Any) -> list[Any]:
        data = self._frame([item])
        if self.producer.check_size(prefix, data):
            raise ItemTooLargeError(len(data), self._ctx.jute_max_buffer, "an item for a multi with other ops")
        return [create_op(prefix, data, sequence=True, acl=self._ctx.acl)]

    def _put_one(self, prefix: str, item: Any, timeout: float | None) -> bool:
        """Frame one item and store it at ``prefix`` (the put of every queue kind; recipes choose the prefix)."""
        return self._put_framed(self._frame([item]), prefix, item, multi=False, timeout=timeout)

    def _put_many(self, prefix: str, items: Iterable[Any], timeout: float | None) -> bool:
        """Frame ``items`` into ONE znode at ``prefix`` (the put_multi of every queue kind)."""
        items = list(items)
        return self._put_framed(self._frame(items), prefix, items, multi=True, timeout=timeout)

    def _put_framed(
        self, data: bytes, prefix: str, item: Any, *, multi: bool = False, timeout: float | None = None
    ) -> bool:
        """THE put seam for recipes: wait for room (bounded queues), then store ``data`` (a frame from
        :meth:`_frame`) as a sequential node at ``prefix`` (e.g. ``<queue>/queue-<priority>``). ``item`` is what
        put listeners receive (the list of items when ``multi``). False only when a bounded queue stayed full
        for ``timeout`` seconds."""
        return self.producer.put_framed(data, prefix, item, multi=multi, timeout=timeout)

    # ------------------------------------------------------------------------------------------ parking
    @property
    def park_after(self) -> float | None:
        """Items due more than this many seconds ahead are parked (see :mod:`zkqueue.engine.parking`); None: never."""
        return self._parking.park_after if self._parking is not None else None

    @property
    def mover_active(self) -> bool:
        """Whether this instance is the queue's active mover of parked items."""
        return self._mover is not None and self._mover.active

    def placement(self, name_prefix: str, due_ms: int) -> Placement:
        """Where a node named ``name_prefix`` + sequence, due at ``due_ms`` (epoch ms), goes: the queue node, or a
        time bucket when parking is on and it is due more than ``park_after`` seconds ahead. No I/O."""
        if self._parking is None:
            return Placement(naming.join(self._queue_path, name_prefix), ())
        return self._parking.place(name_prefix, due_ms)

    def item_parents(self, due_ms: int) -> list[str]:
        """Where an item due at ``due_ms`` may be, in the order to look: its time bucket (when parking is on and
        the due time is ahead; the mover may have moved it on) and the queue node. No I/O. The seam for layers that
        find one item of theirs (a job's cancel)."""
        if self._parking is None or due_ms <= 0:
            return [self._queue_path]
        bucket = buckets.bucket_of(self._parking.root, due_ms, self._parking.layout)
        return [bucket.minute_path, self._queue_path]

    def place_due(self, name_prefix: str, due_ms: int, *, fresh: bool = False) -> str:
        """:meth:`placement`'s prefix, with the bucket's nodes created first when parked (sent without waiting:
        a multi sent after this on the same client sees them; ``fresh`` sends them even if known). The seam for
        layers that put with their own ops (job adds and retries)."""
        where = self.placement(name_prefix, due_ms)
        if where.parked:
            self.producer.create_parents(where.parents, fresh=fresh)
            self._counters.add("parked")
        return where.prefix

    def _put_due(self, name_prefix: str, due_ms: int, items: list[Any], *, multi: bool,
                 timeout: float | None) -> bool:
        """Frame ``items`` into one node named ``name_prefix`` + sequence, due at ``due_ms``, parked or not: the put
        of queues whose items have due times (delay queues)."""
        data = self._frame(items)
        where = self.placement(name_prefix, due_ms)
        if where.parked and self.producer.check_size(where.prefix, data):
            where = Placement(naming.join(self._queue_path, name_prefix), ())  # large items are never parked
        if where.parked:
            self._counters.add("parked")
        return self.producer.put_framed(data, where.prefix, items if multi else items[0], multi=multi,
                                        timeout=timeout, parents=where.parents)

    def change_version(self) -> int | None:
        """The version of the queue's listing as this process has it (it grows with every new listing), or None
        when nothing here watches the queue's children (a producer-only queue, or a pull queue before its first
        claim). Read it BEFORE looking at the queue, then :meth:`wait_for_change` from it: a change that lands in
        between is never missed. A seam for layers that wait for work on several queues at once."""
        cache = self._cache
        return None if cache is None else cache.version

    def wait_for_change(self, version: int, timeout: float | None = None) -> int | None:
        """Block until the queue's listing is newer than ``version`` (a change already seen but not listed yet is
        listed first), ``timeout`` seconds pass or the queue closes; the version then (None as in
        :meth:`change_version`). Local: no request is sent per wait, the children watch feeds it."""
        cache = self._cache
        if cache is None:
            return None
        return cache.wait_for_change(version, timeout).version

    def flush_puts(self, timeout: float | None = None) -> bool:
        """Wait until every background put has completed (or failed); False on timeout."""
        return self.producer.flush(timeout)

    def flush_acks(self, timeout: float | None = None) -> bool:
        """Wait until every item the consumer has returned from is acked (lock-safe queues ack on their own
        thread while the next batch is taken); False on timeout. Items still inside ``consume_message`` are
        not waited for. Call it before stopping the client yourself if the acks must land."""
        consumption = self._consumption
        if consumption is None or consumption.lease_taker is None:
            return True
        return consumption.lease_taker.flush(timeout)

    # ------------------------------------------------------------------------------------------ pull mode
    def claim_nodes(self, max_nodes: int, timeout: float | None = None, *, block_leases: bool = False
                    ) -> list[HeldNode]:
        """Claim up to ``max_nodes`` due nodes now (pull mode: a lock-safe queue built without a consumer).

        Blocks until at least one node is due and claimed, or returns [] after ``timeout`` seconds. Each returned
        :class:`~zkqueue.engine.held.HeldNode` (``name``, ``path``, ``version``, ``data``, ``items``) is held
        under an item lease with the claim hook's ops already committed; end it with :meth:`HeldNode.finish
        <zkqueue.engine.held.HeldNode.finish>` or :meth:`~zkqueue.engine.held.HeldNode.release`, or many at
        once with :meth:`complete_nodes` and :meth:`release_nodes`.

        ``block_leases`` is for a caller that finishes its nodes soon (an async worker of short jobs): the nodes
        are held under block leases, one lock per block of 64 sequence numbers instead of a lock and a fence per
        node, so a claim of hundreds of nodes writes a handful of nodes. The other names of a held block wait
        until every claimed node of it is finished. Not with Curator's lock names. Acks of one's own
        (:meth:`HeldNode.ack_ops <zkqueue.engine.held.HeldNode.ack_ops>`) give the block back with the last
        member's forget, or in their own multi (:func:`~zkqueue.engine.held.block_tail`).
        """
        self._check_started()
        if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes <= 0:
            raise ConfigurationError(f"max_nodes must be a positive int, got {max_nodes!r}")
        puller = self._pull()
        return held_nodes.wrap(puller.claim(max_nodes, timeout, block_leases=block_leases), puller)

    def complete_nodes(self, nodes: Iterable[HeldNode]) -> None:
        """Finish nodes from :meth:`claim_nodes`, each by its ``completion`` (or its ``error`` and the error mode),
        in as few fenced multis as possible. Then each node's ``settled`` says how it ended (``"done"``,
        ``"released"``, ``"quarantined"``, ``"lost"``), or is None when its reply was lost and the completion is
        retried later (at the latest by close())."""
        self._check_started()
        held_nodes.finish_nodes(nodes)

    def release_nodes(self, nodes: Iterable[HeldNode]) -> None:
        """Give nodes from :meth:`claim_nodes` back untouched."""
        held_nodes.release_nodes(nodes)

    def _pull(self) -> Puller:
        with self._consumption_lock:
            if self._consumption is None and self._consumer is None:
                self._consumption = self._build_consumption()
            if self._consumption is None or self._consumption.puller is None:
                raise ConfigurationError(PULL_NEEDS)
            return self._consumption.puller

    def commit_groups(self, groups: Sequence[Sequence[Any]]) -> list[GroupOutcome]:
        """Commit each group of ops atomically, many groups per multi (a failing group costs only itself): the
        seam the layers above use for their own writes (e.g. adding jobs with their records)."""
        self._check_started()
        return commit_groups(self._ctx, groups)

    def read_retrying(self, call: Callable[[], Any], what: str = "a read") -> Any:
        """``call()``, a read that prepares a put (e.g. of the records a job add replaces) or looks at the queue
        (``JobQueue.get``/``counts``), run again once connected after a lost connection, for up to
        ``put_outcome_wait`` seconds: the seam that lets layers above ride out a failover. Past the wait it raises
        :class:`~zkqueue.errors.ConnectionLostError` (chained from kazoo's last error; not a kazoo error)."""
        self._check_started()
        return self.producer.read_retrying(call, what)

    def commit_puts(self, groups: Sequence[Sequence[Any]]) -> list[GroupOutcome]:
        """:meth:`commit_groups` for groups that put (e.g. a job's record and item): exactly once through a lost
        reply, by this queue's producer marker (see :mod:`zkqueue.engine.put_markers`)."""
        self._check_started()
        return self.producer.commit_groups(groups)

    # ------------------------------------------------------------------------------------------ removal
    def _remove_items(self, names: Sequence[str]) -> int:
        """Delete the item nodes ``names`` unless a consumer holds them; return how many were removed (the seam
        ``DistributedIdQueue.remove`` uses, Curator's ``tryRemove``). An item under any consumer's lease, or
        already gone, counts 0."""
        self._check_started()
        groups = [
            removal_ops(self._queue_path, self._lock_path, name, curator_names=self._ctx.lock_names == "curator",
                        lock_data=self._ctx.lock_data, acl=self._acl)
            for name in names
        ]
        if not groups:
            return 0
        removed = 0
        for res in commit_groups(self._ctx, groups):
            if res.ok:
                removed += 1
            elif not isinstance(res.error, (NoNodeError, NodeExistsError, NotEmptyError)):
                log.warning("removing an item from %s failed: %r", self._queue_path, res.error)
        return removed
