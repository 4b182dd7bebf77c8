"""DistributedQueue: Curator's queue engine on kazoo, wire-compatible, with Curator's bugs fixed.

One engine serves every queue kind; recipes (priority, delay, id) override only the naming/sort hooks:
``get_delay``, ``sort_children``, ``make_item_path``, ``make_requeue_item_path``.

Speed comes from batching: a consumer takes up to ``batch_size`` items per step -- lock creates in one multi,
data in one multiRead, acks in one multi -- instead of Curator's 2-4 synchronous round trips per item.

Fenced acks (CURATOR-605): a lock-safe consumer creates, in the same multi as its lock, an EPHEMERAL child
``<queue>/<item>/lock-<token>`` owned by its session. Every ack/requeue/quarantine multi starts by deleting
that child. If the session expired, the server already removed the child, so the multi fails as a whole and
the item (now possibly held by another consumer) is untouched. While the fence exists the item cannot be
deleted by anybody (ZooKeeper refuses to delete a node with children), and a new acquisition always creates a
fresh token, so an old owner can never delete a new owner's fence: the check is airtight.

Threads of one started queue (all daemons, all joined by ``close()``; a user executor is never shut down):
``zkqueue-loop-<path>`` (run loop: list, sort, take, deliver), ``zkqueue-put-<path>`` (background puts, batched
into pipelined multis), ``zkqueue-ack-<path>`` (lock-safe acks, so the loop takes the next batch meanwhile),
``zkqueue-events-<path>`` (connection states to the consumer) and ``zkqueue-cache-<path>`` (cache upkeep off
kazoo's threads).

Delivery: without a lock path items are deleted before delivery (at-most-once, as Curator); with one they are
deleted after the consumer returned (at-least-once: a crash before the ack means redelivery).
"""

from __future__ import annotations

import copy
import enum
import hashlib
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Executor, Future
from concurrent.futures import wait as futures_wait
from dataclasses import asdict, dataclass
from typing import Any, Callable, Generic, Iterable, Sequence, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.protocol.states import KazooState

from zkqueue.formats import framing, naming
from zkqueue.transport import protocol
from zkqueue.engine.children import ChildrenCache, Snapshot
from zkqueue.consumer import ConnectionState, ErrorMode, QueueConsumer, as_consumer
from zkqueue.errors import (
    ConfigurationError,
    CorruptItemError,
    ItemTooLargeError,
    LockLostError,
    LockPathConflictError,
    QueueClosedError,
    QueueNotStartedError,
    QueuePermissionError,
    QueueStateError,
    SerializationError,
)
from zkqueue.listeners import Dispatcher, ListenerContainer, QueuePutListener

log = logging.getLogger("zkqueue.engine.queue")

T = TypeVar("T")

#: Errors meaning "we lost the connection; the outcome of the request is unknown".
_CONNECTION_ERRORS = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)
#: Per-request overhead we budget for beyond path and data (headers, ACL, multi op header).
_REQUEST_OVERHEAD = 512
#: Most ops we put in one multi (ZooKeeper has no op-count limit; this keeps latency of one request sane).
_MAX_OPS_PER_MULTI = 1000
#: Lock-safe batches at least this big are acked on the ack thread (overlapping the next batch's locking).
_ASYNC_ACK_MIN_ITEMS = 8
#: Background put multis in flight at once.
_PUTS_PIPELINED = 3
#: How long a lock-safe consumer waits before retrying items another consumer held.
_LOCKED_RETRY_SECONDS = 0.5
#: How often an inline consumer acks what it has consumed while a batch is still running.
_ACK_EVERY_SECONDS = 0.5
#: Default most item nodes per engine step.
DEFAULT_BATCH_SIZE = 300
#: A consumer takes (locks, or removes in plain mode) at most about this many seconds of work per step, by its
#: measured pace: a slow consumer then holds a few items, not a whole batch that idle consumers could be doing.
_HOLD_SECONDS = 0.5


class _State(enum.Enum):
    LATENT = "LATENT"
    STARTED = "STARTED"
    STOPPED = "STOPPED"


@dataclass
class QueueStats:
    """Counters of one queue instance. A "skip" the engine logs is always counted here."""

    put_ok: int = 0
    put_failed: int = 0
    consumed: int = 0
    consumer_errors: int = 0
    requeued: int = 0
    deleted_on_error: int = 0
    corrupt_quarantined: int = 0
    foreign_skipped: int = 0
    loop_errors: int = 0
    lock_conflicts: int = 0
    lock_lost: int = 0
    lost_races: int = 0
    queue_recreated: int = 0
    listings: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class _PutRequest:
    prefix: str
    data: bytes
    item: Any
    multi: bool


class _GroupSlot:
    """One foreground put waiting in a group commit (see DistributedQueue._group_put)."""

    __slots__ = ("req", "done", "created", "error", "wake")

    def __init__(self, req: _PutRequest) -> None:
        self.req = req
        self.done = False
        self.wake = threading.Lock()  # held until the slot is done or handed the lead
        self.wake.acquire()
        self.created: str | None = None
        self.error: BaseException | None = None


@dataclass
class _Held:
    """A lock-safe consumer's claim on one item node."""

    name: str
    path: str
    lock: str
    fence: str


@dataclass
class _Outcome:
    """What happened when a node's items were handed to the consumer."""

    held: _Held | None
    name: str
    data: bytes
    version: int
    items: list[Any]
    failed_at: int | None = None  # index of the item whose consumer raised
    error: BaseException | None = None
    ambiguous: bool = False  # an earlier ack attempt may have committed


# ---------------------------------------------------------------------------------------------- op helpers
def _create_op(
    path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False, acl: Any = None
) -> Any:
    return protocol.CreateOp(path, data, acl, ephemeral, sequence)


def _delete_op(path: str, version: int = -1) -> Any:
    return protocol.DeleteOp(path, version)


def _node_cost(path: str, data: bytes | None, chroot_len: int = 0) -> int:
    """Upper estimate of the bytes one op on ``path`` adds to a multi (UTF-8 at most 4 bytes a character)."""
    return len(path) * 4 + len(data or b"") + 64 + chroot_len


def _op_size(op: Any, extra: int = 0) -> int:
    """Upper estimate of the bytes one op adds to a multi (``extra``: the client's chroot length)."""
    return _node_cost(op.path, getattr(op, "data", None), extra)


def _map_error(exc: BaseException) -> BaseException:
    if isinstance(exc, NoAuthError):
        err = QueuePermissionError(f"ZooKeeper refused the operation for lack of credentials: {exc!r}")
        err.__cause__ = exc
        return err
    return exc


def _copy_error(exc: BaseException) -> BaseException:
    """A copy of ``exc`` for one more thread to raise (a shared exception object's traceback would mix)."""
    try:
        dup = copy.copy(exc)
        dup.__traceback__ = None
        return dup
    except Exception:
        return exc


class _Acker:
    """Acks consumed lock-safe items on its own thread, so the run loop can take the next batch meanwhile.

    At most ``max_backlog`` submissions wait (the loop blocks beyond that), which bounds how many consumed
    items a crash could redeliver. Everything waiting is merged into one ack round.
    """

    def __init__(self, ack: Callable[[list[_Outcome]], None], name: str, max_backlog: int = 2) -> None:
        self._ack = ack
        self._cond = threading.Condition()
        self._pending: list[list[_Outcome]] = []
        self._busy = False
        self._stopped = False
        self._max_backlog = max_backlog
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, outcomes: list[_Outcome]) -> None:
        if not outcomes:
            return
        with self._cond:
            while len(self._pending) >= self._max_backlog and not self._stopped:
                self._cond.wait()
            if self._stopped:
                run_now = True
            else:
                run_now = False
                self._pending.append(outcomes)
                self._cond.notify_all()
        if run_now:
            self._ack(outcomes)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every submitted ack ran; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def stop(self, timeout: float = 30.0) -> None:
        self.drain(timeout)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._cond.wait()
                if not self._pending and self._stopped:
                    return
                batch = [o for outcomes in self._pending for o in outcomes]
                self._pending.clear()
                self._busy = True
                self._cond.notify_all()
            try:
                self._ack(batch)
            except Exception:  # _ack handles its own errors; this is a last line of defence
                log.exception("ack thread error (items will be redelivered)")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


class DistributedQueue(Generic[T]):
    """A Curator-compatible distributed queue. Build it with :class:`zkqueue.QueueBuilder`."""

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
        final_flush_time: float = 5.0,
        quarantine_path: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        jute_max_buffer: int | None = None,
        lock_names: str = "qualified",
        min_items_before_refresh: int | None = None,
        refresh_on_watch: bool = False,
        max_batch_bytes: int = 4 * 1024 * 1024,
        acl: Sequence[Any] | None = None,
        auth: Sequence[tuple[str, str]] = (),
    ) -> None:
        if client is None:
            raise ConfigurationError("client is required")
        #: ACL of every node this queue creates (queue, items, locks, fences, quarantine, receipts); None uses
        #: the client's default_acl.
        self._acl = list(acl) if acl is not None else None
        if self._acl is not None and not self._acl:
            raise ConfigurationError("acl must hold at least one entry (or be None for the client's default)")
        #: (scheme, credential) pairs added to the client at start(), e.g. ("digest", "user:password").
        self._auth = [tuple(a) for a in auth]
        if serializer is None or not callable(getattr(serializer, "serialize", None)) or not callable(
            getattr(serializer, "deserialize", None)
        ):
            raise ConfigurationError(f"serializer needs serialize() and deserialize(): {serializer!r}")
        self._client = client
        self._consumer: QueueConsumer[T] | None = as_consumer(consumer)
        self._serializer = serializer
        self._queue_path = naming.validate_queue_path(queue_path)
        if self._queue_path == "/":
            raise ConfigurationError("the queue path cannot be the root '/'")
        self._lock_path = None if lock_path is None else naming.validate_path(lock_path)
        if self._lock_path is not None:
            if self._lock_path == self._queue_path or self._lock_path.startswith(self._queue_path + "/"):
                raise LockPathConflictError(
                    f"lock path {self._lock_path!r} must not be the queue path or inside it ({self._queue_path!r})"
                )
            if self._queue_path.startswith(self._lock_path + "/"):
                raise LockPathConflictError(
                    f"lock path {self._lock_path!r} must not contain the queue path {self._queue_path!r}"
                )
        self._quarantine_path = naming.validate_path(quarantine_path or self._queue_path + "-quarantine")
        #: Receipts of no-lock takes (see _delete_with_receipts); a sibling of the queue, like the quarantine.
        self._receipt_path = self._queue_path + "-receipts"
        if self._quarantine_path == self._queue_path or self._quarantine_path.startswith(self._queue_path + "/"):
            raise ConfigurationError(
                f"quarantine path {self._quarantine_path!r} must not be the queue path or inside it"
            )
        if max_items is not None and (isinstance(max_items, bool) or not isinstance(max_items, int) or max_items <= 0):
            raise ConfigurationError(f"max_items must be a positive int, got {max_items!r}")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ConfigurationError(f"batch_size must be a positive int, got {batch_size!r}")
        if isinstance(max_batch_bytes, bool) or not isinstance(max_batch_bytes, int) or max_batch_bytes <= 0:
            raise ConfigurationError(f"max_batch_bytes must be a positive int, got {max_batch_bytes!r}")
        if final_flush_time is None or final_flush_time < 0:
            raise ConfigurationError(f"final_flush_time must be >= 0 seconds, got {final_flush_time!r}")
        if lock_names not in ("qualified", "curator"):
            raise ConfigurationError(f"lock_names must be 'qualified' or 'curator', got {lock_names!r}")
        self._max_items = max_items
        if max_items is not None and put_in_background:
            log.info("max_items is set: puts on %s run in the foreground (as Curator)", queue_path)
            put_in_background = False
        self._put_in_background = bool(put_in_background)
        self._executor = executor
        self._final_flush_time = float(final_flush_time)
        self._batch_size = batch_size
        self._jute_max_buffer = int(jute_max_buffer) if jute_max_buffer else protocol.jute_max_buffer()
        self._lock_names = lock_names
        self._lock_suffix = "@" + hashlib.sha1(self._queue_path.encode("utf-8")).hexdigest()[:12]
        self._min_items_before_refresh = min_items_before_refresh
        self._refresh_on_watch = refresh_on_watch
        self._error_mode = ErrorMode.REQUEUE

        self.put_listeners: ListenerContainer[QueuePutListener[T]] = ListenerContainer()
        self._state = _State.LATENT
        self._state_lock = threading.Lock()
        self._stats = QueueStats()
        self._stats_lock = threading.Lock()
        self._closing = threading.Event()
        self._connected = threading.Event()
        self._last_kazoo_state: str | None = None
        self._cache: ChildrenCache | None = None
        self._loop_thread: threading.Thread | None = None
        self._events: Dispatcher | None = None
        self._last_message_count = 0
        self._foreign_seen: set[str] = set()
        self._contended_recently = False
        self._avg_node_bytes: float | None = None
        self._pace: float | None = None  # seconds per node delivered (moving average)
        self._max_batch_bytes = max_batch_bytes
        self._lock_data = f"{socket.gethostname()}:{os.getpid()}".encode()
        self._chroot_len = len((getattr(client, "chroot", None) or "").encode("utf-8"))
        self._token_prefix = uuid.uuid4().hex[:16] + "-"
        self._token_count = 0
        # background puts
        self._put_cond = threading.Condition()
        self._put_queue: deque[_PutRequest] = deque()
        self._puts_in_flight = 0
        self._put_thread: threading.Thread | None = None
        # lock-safe acks: an ack thread, and work to retry once connected again
        self._acker: _Acker | None = None
        self._ack_lock = threading.Lock()
        self._deferred_lock = threading.Lock()
        self._deferred_acks: list[_Outcome] = []
        self._deferred_releases: list[_Held] = []
        # bounded puts
        self._bound_lock = threading.Lock()
        self._own_lock = threading.Lock()
        self._own_unlisted: list[int] = []
        # foreground puts of unbounded queues: group commit (see _group_put)
        self._group_lock = threading.Lock()
        self._group_waiting: deque[_GroupSlot] = deque()
        self._group_leading = False  # a caller is committing a group; the rest wait in _group_waiting

    # ------------------------------------------------------------------------------------------ properties
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
        return self._last_message_count

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
        with self._stats_lock:
            stats = QueueStats(**asdict(self._stats))
        if self._cache is not None:
            stats.queue_recreated = self._cache.recreated
            stats.listings = self._cache.listings
        return stats

    def _count(self, name: str, n: int = 1) -> None:
        with self._stats_lock:
            setattr(self._stats, name, getattr(self._stats, name) + n)

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

    def make_item_path(self) -> str:
        """Prefix of a new item node (ZooKeeper appends the sequence)."""
        return self._queue_path + "/" + naming.ITEM_PREFIX

    def make_requeue_item_path(self, item_path: str) -> str:
        """Prefix used when an item is requeued after a consumer error."""
        return self.make_item_path()

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        with self._state_lock:
            if self._state is _State.STARTED:
                raise QueueStateError(f"queue {self._queue_path} is already started")
            if self._state is _State.STOPPED:
                raise QueueClosedError(f"queue {self._queue_path} was closed; build a new one")
            self._state = _State.STARTED
        try:
            self._check_lock_path_is_not_an_item()
            for scheme, credential in self._auth:
                self._client.add_auth(scheme, credential)
            self._client.ensure_path(self._queue_path, acl=self._acl)
            if self._lock_path is not None:
                self._client.ensure_path(self._lock_path, acl=self._acl)
            if self._consumer is not None:
                self._client.ensure_path(self._quarantine_path, acl=self._acl)
                if self._lock_path is None:
                    self._client.ensure_path(self._receipt_path, acl=self._acl)
        except NoAuthError as exc:
            self._state = _State.STOPPED
            raise _map_error(exc) from exc
        except Exception:
            self._state = _State.STOPPED
            raise
        self._last_kazoo_state = self._client.state
        if self._client.connected:
            self._connected.set()
        self._events = Dispatcher(f"zkqueue-events-{self._queue_path}")
        self._events.start()
        self._client.add_listener(self._kazoo_state_listener)
        if self._consumer is not None or self._max_items is not None:
            self._cache = ChildrenCache(
                self._client,
                self._queue_path,
                name=f"zkqueue-cache-{self._queue_path}",
                lazy=self._max_items is None,  # bounded puts need every change promptly
                acl=self._acl,
            )
            self._cache.start()
        if self._put_in_background:
            self._put_thread = threading.Thread(
                target=self._put_loop, name=f"zkqueue-put-{self._queue_path}", daemon=True
            )
            self._put_thread.start()
        if self._consumer is not None and self._lock_path is not None:
            self._acker = _Acker(self._ack, f"zkqueue-ack-{self._queue_path}")
        if self._consumer is not None:
            self._loop_thread = threading.Thread(
                target=self._run_loop, name=f"zkqueue-loop-{self._queue_path}", daemon=True
            )
            self._loop_thread.start()
        log.debug("queue %s started", self._queue_path)

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
        if self._final_flush_time > 0 and self._put_in_background:
            if not self.flush_puts(self._final_flush_time):
                log.warning(
                    "queue %s closed with %d background put(s) not flushed after %.1fs",
                    self._queue_path,
                    self._puts_in_flight,
                    self._final_flush_time,
                )
        self._closing.set()
        with self._put_cond:
            self._put_cond.notify_all()
        if self._cache is not None:
            self._cache.close()
        current = threading.current_thread()
        for thread in (self._loop_thread, self._put_thread):
            if thread is not None and thread is not current:
                thread.join(30.0)
                if thread.is_alive():
                    log.warning("thread %s did not stop within 30s (a consumer still running?)", thread.name)
        self._fail_pending_puts()
        if self._acker is not None:
            self._acker.stop()
        try:
            if self._retry_deferred():
                log.warning("queue %s closed with unfinished acks; their items will be redelivered", self._queue_path)
        except Exception:
            log.exception("final ack retry on %s failed", self._queue_path)
        try:
            self._client.remove_listener(self._kazoo_state_listener)
        except Exception:  # pragma: no cover
            log.debug("remove_listener failed", exc_info=True)
        if self._events is not None:
            self._events.stop()
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

    @property
    def _running(self) -> bool:
        return self._state is _State.STARTED and not self._closing.is_set()

    # ------------------------------------------------------------------------------------------ connection
    def _kazoo_state_listener(self, state: str) -> None:  # kazoo's connection thread: never block
        previous = self._last_kazoo_state
        self._last_kazoo_state = state
        if state == KazooState.CONNECTED:
            self._connected.set()
            if previous in (KazooState.SUSPENDED, KazooState.LOST):
                self._deliver_state(ConnectionState.RECONNECTED)
        elif state == KazooState.SUSPENDED:
            self._connected.clear()
            self._deliver_state(ConnectionState.SUSPENDED)
        elif state == KazooState.LOST:
            self._connected.clear()
            self._deliver_state(ConnectionState.LOST)

    def _deliver_state(self, state: ConnectionState) -> None:
        consumer = self._consumer
        events = self._events
        if consumer is None or events is None:
            return
        fn = getattr(consumer, "state_changed", None)
        if callable(fn):
            events.submit(fn, state)

    def _wait_connected(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self._closing.is_set():
            if self._connected.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
                return True
            if time.monotonic() >= deadline:
                return False
        return False

    # ------------------------------------------------------------------------------------------ puts
    def put(self, item: T, timeout: float | None = None) -> bool:
        """Add one item. Blocks while a bounded queue is full; with ``timeout`` returns False when still full.

        Background puts (the default) return once the item is queued for sending; failures reach
        ``put_listeners`` (``put_failed``) and ``stats().put_failed``.
        """
        self._check_started()
        return self._put_one(self.make_item_path(), item, timeout)

    def put_multi(self, items: Iterable[T], timeout: float | None = None) -> bool:
        """Add several items in ONE znode (Curator's MultiItem format); consumers get them in order."""
        self._check_started()
        return self._put_many(self.make_item_path(), items, timeout)

    def _frame(self, items: Iterable[Any]) -> bytes:
        """Serialize and frame ``items`` for one znode (Curator's ItemSerializer)."""
        return framing.encode_items([self._serialize(i) for i in items])

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
        self._check_started()
        if self._max_items is None:
            return self._send_framed(data, prefix, item, multi=multi)
        if timeout is not None:
            timeout = max(0.0, float(timeout))
        self._check_size(prefix, data)
        # One bounded put at a time per instance, so this instance never overshoots its own bound.
        if not self._bound_lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            if not self._wait_for_room(timeout):
                return False
            return self._send_framed(data, prefix, item, multi=multi)
        finally:
            self._bound_lock.release()

    def flush_puts(self, timeout: float | None = None) -> bool:
        """Wait until every background put has completed (or failed); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._put_cond:
            while self._puts_in_flight > 0:
                if deadline is None:
                    self._put_cond.wait(0.5)
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._put_cond.wait(remaining)
            return True

    def flush_acks(self, timeout: float | None = None) -> bool:
        """Wait until every item the consumer has returned from is acked (lock-safe queues ack on their own
        thread while the next batch is taken); False on timeout. Items still inside ``consume_message`` are
        not waited for. Call it before stopping the client yourself if the acks must land."""
        if self._acker is None:
            return True
        return self._acker.drain(timeout)

    def _serialize(self, item: T) -> bytes:
        try:
            data = self._serializer.serialize(item)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(f"serializer {self._serializer!r} failed on {item!r:.80}: {exc}") from exc
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SerializationError(f"serializer {self._serializer!r} returned {type(data).__name__}, not bytes")
        return bytes(data)

    def _check_size(self, prefix: str, data: bytes) -> None:
        overhead = len(prefix.encode("utf-8")) + self._chroot_len + 10 + _REQUEST_OVERHEAD
        if len(data) + overhead > self._jute_max_buffer:
            raise ItemTooLargeError(len(data), self._jute_max_buffer - overhead)

    def _send_framed(self, data: bytes, prefix: str, item: Any, *, multi: bool) -> bool:
        """Send one framed znode at ``prefix`` (sequential): queued for the put thread, or created now."""
        self._check_started()
        self._check_size(prefix, data)
        req = _PutRequest(prefix, data, item, multi)
        if self._put_in_background:
            with self._put_cond:
                if self._closing.is_set():
                    raise QueueClosedError(f"queue {self._queue_path} is closed")
                self._puts_in_flight += 1
                self._put_queue.append(req)
                self._put_cond.notify_all()
            return True
        if self._max_items is None:
            return self._group_put(req)
        try:
            created = self._create_put_node(req)
        except Exception as exc:
            self._count("put_failed")
            raise _map_error(exc) from exc
        seq = naming.sequence_of(created)  # bounded queues only come here
        if seq is not None:
            with self._own_lock:
                self._own_unlisted.append(seq)
        self._count("put_ok")
        self._notify_put(req)
        return True

    def _create_put_node(self, req: _PutRequest) -> str:
        """Create ``req``'s sequential node now and return its path (every single-node put goes here)."""
        return protocol.create(self._client, _create_op(req.prefix, req.data, sequence=True, acl=self._acl))

    def _send_put_nodes(self, reqs: Sequence[_PutRequest]) -> protocol.PendingMulti:
        """Send the sequential nodes of ``reqs`` as ONE multi, in order, without waiting (every batched put)."""
        return protocol.send_creates(
            self._client, [(r.prefix, r.data) for r in reqs], acl=self._acl, sequence=True,
            limit=self._jute_max_buffer,
        )

    def _take_puts(self, waiting: deque[Any], batch: list[Any], req_of: Callable[[Any], _PutRequest]) -> None:
        """Move puts from the head of ``waiting`` to ``batch`` while they fit one multi (op count and bytes, the
        first always); ``req_of`` gives an entry's _PutRequest. The caller holds the lock guarding ``waiting``."""
        budget = self._jute_max_buffer - 4096
        size = sum(_node_cost(req_of(x).prefix, req_of(x).data, self._chroot_len) for x in batch)
        while waiting and len(batch) < _MAX_OPS_PER_MULTI:
            req = req_of(waiting[0])
            req_size = _node_cost(req.prefix, req.data, self._chroot_len)
            if batch and size + req_size > budget:
                break
            batch.append(waiting.popleft())
            size += req_size

    # -- foreground puts of unbounded queues: group commit
    def _group_put(self, req: _PutRequest) -> bool:
        """Create ``req``'s node now, coalescing with concurrent foreground puts (leader/follower group commit).

        A caller finding no group in flight leads at once (a lone thread pays no added latency: a batch of one
        is a plain create). Callers arriving meanwhile queue up, each blocked on its own lock. When the leader's
        request completes it wakes exactly the callers of its batch and hands the lead to the first caller still
        waiting, who sends everything waiting (within one multi's size budget) as ONE multi: no thundering herd
        of waiters. Each caller still blocks until its own node is committed and gets its own result or error;
        listeners and stats run in the caller's thread as for a single create. Bounded queues do not come here
        (their puts run one at a time).
        """
        slot = _GroupSlot(req)
        with self._group_lock:
            follow = self._group_leading
            if follow:
                self._group_waiting.append(slot)
            else:
                self._group_leading = True
        if follow:
            slot.wake.acquire()  # our batch is done, or we were handed the lead
        if not slot.done:
            self._lead_group(slot)
        if slot.error is not None:
            self._count("put_failed")
            exc = _map_error(slot.error)
            if exc is slot.error:
                raise exc
            raise exc from slot.error
        self._count("put_ok")
        self._notify_put(req)
        return True

    def _lead_group(self, slot: _GroupSlot) -> None:
        """Commit ``slot`` and whoever waits behind it, then wake them and hand the lead on."""
        batch = [slot]
        successor: _GroupSlot | None = None
        try:
            with self._group_lock:
                self._take_puts(self._group_waiting, batch, lambda s: s.req)
            self._commit_group(batch)
        finally:
            for s in batch:
                if not s.done:  # only when something escaped _commit_group (e.g. KeyboardInterrupt)
                    s.error = QueueStateError(f"put to {s.req.prefix} was interrupted; outcome unknown")
                    s.done = True
            with self._group_lock:
                if self._group_waiting:
                    successor = self._group_waiting.popleft()
                else:
                    self._group_leading = False
            for s in batch[1:]:
                s.wake.release()
            if successor is not None:
                successor.wake.release()

    def _commit_group(self, batch: list[_GroupSlot]) -> None:
        """Create the nodes of ``batch`` (in order) and record each slot's outcome; never raises for an op."""
        if len(batch) > 1:
            result = None
            try:
                result = self._send_put_nodes([s.req for s in batch]).result()
            except _CONNECTION_ERRORS as exc:
                # Outcome unknown, exactly as for a single create whose reply was lost: every caller of the
                # group gets the connection error (retrying may store the items twice: at-least-once).
                for s in batch:
                    s.error = _copy_error(exc)
                    s.done = True
                return
            except Exception:
                log.debug("group put multi of %d on %s failed to send; creating one by one", len(batch),
                          self._queue_path, exc_info=True)
            if result is not None and result.ok:
                for s, created in zip(batch, result.results):
                    s.created = created
                    s.done = True
                return
            # All-or-nothing: one bad op failed the multi; create one by one so each caller gets its own outcome.
        for s in batch:
            try:
                s.created = self._create_put_node(s.req)
            except Exception as exc:
                s.error = exc
            s.done = True

    def _notify_put(self, req: _PutRequest) -> None:
        if req.multi:
            self.put_listeners.notify("put_multi_completed", req.item)
        else:
            self.put_listeners.notify("put_completed", req.item)

    def _notify_put_failed(self, req: _PutRequest, exc: BaseException) -> None:
        self._count("put_failed")
        log.warning("background put to %s failed: %r", req.prefix, exc)
        self.put_listeners.notify("put_failed", req.item, exc)

    def _wait_for_room(self, timeout: float | None) -> bool:
        if self._max_items is None:
            return True
        cache = self._cache
        assert cache is not None
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
            if not self._running:
                self._check_started()
                raise QueueClosedError(f"queue {self._queue_path} is closed")
            newer = cache.wait_for_change(snap.version, timeout)
            if newer.version == snap.version:
                if cache.closed:
                    raise QueueClosedError(f"queue {self._queue_path} is closed")
                return has_room(newer)

    # -- the background put thread
    def _take_put_batch(self) -> list[_PutRequest]:
        """Pop up to one multi's worth of queued puts (caller holds ``_put_cond``)."""
        batch: list[_PutRequest] = []
        self._take_puts(self._put_queue, batch, lambda r: r)
        return batch

    def _put_loop(self) -> None:
        """Send queued puts as multi transactions, up to _PUTS_PIPELINED multis in flight at once.

        ZooKeeper runs one session's requests in order, so sequence numbers follow put order. Completions are
        handled in send order; the in-flight counter is decremented for every request whatever happens.
        """
        inflight: deque[tuple[list[_PutRequest], Any]] = deque()
        while True:
            batch: list[_PutRequest] = []
            with self._put_cond:
                while not self._put_queue and not inflight and not self._closing.is_set():
                    self._put_cond.wait()
                closing = self._closing.is_set()  # close() flushed for final_flush_time: send nothing new
                if not inflight and (closing or not self._put_queue):
                    return
                # Another multi goes out while some are in flight only if it is full; otherwise waiting for
                # the oldest reply lets the next batch grow (fewer, bigger requests).
                if not closing and self._put_queue and (
                    not inflight
                    or (len(inflight) < _PUTS_PIPELINED and len(self._put_queue) >= _MAX_OPS_PER_MULTI)
                ):
                    batch = self._take_put_batch()
            if batch:
                async_result = None
                if len(batch) > 1 and self._connected.is_set():
                    try:
                        async_result = self._send_put_nodes(batch)
                    except Exception:
                        log.debug("could not send a put batch asynchronously; sending it in order", exc_info=True)
                        async_result = None
                if async_result is not None:
                    inflight.append((batch, async_result))
                    continue
                # Single puts and the disconnected case go the synchronous way, after what is in flight.
                while inflight:
                    self._finish_put_batch(*inflight.popleft())
                self._finish_put_batch(batch, None)
                continue
            self._finish_put_batch(*inflight.popleft())

    def _finish_put_batch(self, batch: list[_PutRequest], async_result: Any) -> None:
        try:
            if async_result is None:
                self._send_puts(batch)
                return
            try:
                result = async_result.result()
            except _CONNECTION_ERRORS:
                self._send_puts(batch)  # unknown outcome: resend (at-least-once, as Curator's retries)
                return
            self._handle_put_result(batch, result)
        except Exception as exc:  # never let the put thread die
            log.exception("background put thread error on %s", self._queue_path)
            for req in batch:
                self._notify_put_failed(req, exc)
        finally:
            with self._put_cond:
                self._puts_in_flight -= len(batch)
                self._put_cond.notify_all()

    def _handle_put_result(self, batch: list[_PutRequest], result: Any) -> None:
        if result.ok:
            self._count("put_ok", len(batch))
            for req in batch:
                self._notify_put(req)
            return
        # A multi is all-or-nothing; find out which item is at fault by sending them one by one.
        log.debug("background put multi failed at %s: %r; retrying one by one", result.failed_index, result.failure)
        for req in batch:
            self._send_single_put(req)

    def _send_puts(self, batch: list[_PutRequest]) -> None:
        if len(batch) == 1:
            self._send_single_put(batch[0])
            return
        try:
            result = self._with_reconnect(
                lambda: self._send_put_nodes(batch).result(), f"put batch of {len(batch)}"
            )
        except Exception as exc:
            for req in batch:
                self._notify_put_failed(req, _map_error(exc))
            return
        self._handle_put_result(batch, result)

    def _send_single_put(self, req: _PutRequest) -> None:
        try:
            self._with_reconnect(
                lambda: self._create_put_node(req), "put"
            )
        except Exception as exc:
            self._notify_put_failed(req, _map_error(exc))
            return
        self._count("put_ok")
        self._notify_put(req)

    def _with_reconnect(self, call: Callable[[], Any], what: str, attempts: int = 3) -> Any:
        """Run ``call``; after a connection error wait for the connection and retry (as Curator's retry policy
        does for background puts). A create whose reply was lost may have committed, so a retried put can be
        stored twice: puts are at-least-once across connection loss, never silently dropped."""
        for attempt in range(attempts):
            try:
                return call()
            except _CONNECTION_ERRORS as exc:
                if attempt == attempts - 1:
                    raise
                log.warning("%s on %s: %r; retrying after reconnect (a duplicate is possible)", what,
                            self._queue_path, exc)
                if not self._wait_connected(30.0):
                    raise
        raise AssertionError("unreachable")

    def _fail_pending_puts(self) -> None:
        with self._put_cond:
            pending = list(self._put_queue)
            self._put_queue.clear()
            self._puts_in_flight -= len(pending)
            self._put_cond.notify_all()
        for req in pending:
            self._notify_put_failed(req, QueueClosedError(f"queue {self._queue_path} closed before the put was sent"))

    # ------------------------------------------------------------------------------------------ run loop
    def _run_loop(self) -> None:
        cache = self._cache
        assert cache is not None
        version = -1
        czxid = None
        done: set[str] = set()
        errors_in_a_row = 0
        wake_at: float | None = None
        while self._running:
            try:
                if self._retry_deferred():
                    retry_at = time.monotonic() + _LOCKED_RETRY_SECONDS
                    wake_at = retry_at if wake_at is None else min(wake_at, retry_at)
                timeout = None if wake_at is None else max(0.0, wake_at - time.monotonic())
                if timeout is None or timeout > 0:
                    snap = cache.wait_for_change(version, timeout)
                elif cache.changed_since(version):
                    snap = cache.wait_for_change(version, 1.0)  # a change is pending: get that listing
                else:
                    snap = cache.snapshot
                if not self._running:
                    break
                version = snap.version
                if snap.version == 0:
                    wake_at = None
                    continue
                if czxid is not None and snap.czxid != czxid:
                    done.clear()  # the queue node was recreated: sequences restart
                czxid = snap.czxid
                wake_at = self._process_snapshot(snap, done)
                errors_in_a_row = 0
            except BaseException:  # never die: log, count, back off, continue
                errors_in_a_row += 1
                self._count("loop_errors")
                log.exception("error in queue loop of %s (the loop continues)", self._queue_path)
                backoff = min(5.0, 0.05 * (2 ** min(errors_in_a_row, 7)))
                if self._closing.wait(backoff):
                    break
                wake_at = time.monotonic()  # retry the current snapshot
        log.debug("queue loop of %s stopped", self._queue_path)

    def _item_names(self, snap: Snapshot) -> list[str]:
        names = []
        for name in snap.children:
            if naming.is_item_name(name):
                names.append(name)
            elif name not in self._foreign_seen:
                self._foreign_seen.add(name)
                self._count("foreign_skipped")
                log.warning("Foreign node in queue path %s: %s (skipped)", self._queue_path, name)
        self._last_message_count = len(names)
        return names

    def _process_snapshot(self, snap: Snapshot, done: set[str]) -> float | None:
        """Consume what is due in ``snap``; return when to look again without a change (or None)."""
        names = self._item_names(snap)
        if done:
            present = set(names)
            done.intersection_update(present)
            names = [n for n in names if n not in done]
        if not names:
            return None
        ordered = self.sort_children(list(names))
        due: list[str] = []
        next_due: float | None = None
        for name in ordered:
            delay = self.get_delay(name)
            if delay > 0:
                at = time.monotonic() + delay
                next_due = at if next_due is None else min(next_due, at)
                if not due:
                    # Curator: if the head is not due, wait for it (or for a change).
                    return next_due
                continue
            due.append(name)
        step = self._batch_size
        if self._refresh_on_watch and self._min_items_before_refresh is not None:
            step = max(1, min(step, self._min_items_before_refresh or 1))
        retry_locked = False
        processed = 0
        remaining = due
        pos = 0  # remaining[pos:] is still to do (an index, not slicing: no O(n^2) on big snapshots)
        spread = not self._refresh_on_watch and len(due) > step
        if spread and self._contended_recently:
            # Other consumers are active: start at a random point instead of racing them for the head.
            cut = random.randrange(len(remaining))
            remaining = remaining[cut:] + remaining[:cut]
        contended = False
        while pos < len(remaining):
            if not self._running:
                break
            if (
                self._refresh_on_watch
                and processed >= (self._min_items_before_refresh or 0)
                and self._cache is not None
                and self._cache.changed_since(snap.version)
            ):
                return time.monotonic()  # abandon: re-read the newest listing
            n = self._bytes_capped(step)
            batch = remaining[pos : pos + n]
            pos += len(batch)
            contention_before = self._contention()
            handled, locked = self._process_batch(batch)
            done.update(handled)
            retry_locked = retry_locked or locked
            processed += len(batch)
            if self._contention() != contention_before:
                # Other consumers work on this queue. A newer listing drops the names they already took;
                # a random starting point keeps us off the items they are taking right now. A lone consumer
                # never gets here, so it stays strictly FIFO.
                contended = self._contended_recently = True
                if pos < len(remaining) and spread:
                    if self._cache is not None and self._cache.changed_since(snap.version):
                        return time.monotonic()
                    rest = remaining[pos:]
                    cut = random.randrange(len(rest))
                    remaining, pos = rest[cut:] + rest[:cut], 0
        if not contended and pos >= len(remaining):
            self._contended_recently = False
        if retry_locked:
            at = time.monotonic() + _LOCKED_RETRY_SECONDS
            next_due = at if next_due is None else min(next_due, at)
        return next_due

    def _bytes_capped(self, step: int) -> int:
        """Items for the next step: ``step``, fewer when nodes are big, so one step reads about
        ``max_batch_bytes`` at most (a small first step while the node size is unknown), and fewer when the
        consumer is slow, so one step holds about ``_HOLD_SECONDS`` of its work."""
        avg = self._avg_node_bytes
        if avg is None:
            return min(step, 16)
        n = max(1, min(step, self._max_batch_bytes // max(1, int(avg))))
        pace = self._pace
        if pace is not None and pace * n > _HOLD_SECONDS:
            n = max(1, int(_HOLD_SECONDS / pace))
        return n

    def _note_pace(self, nodes: int, seconds: float) -> None:
        """Record how long delivering ``nodes`` nodes took (wall time, so an executor's parallelism counts)."""
        if nodes > 0:
            per = seconds / nodes
            self._pace = per if self._pace is None else 0.5 * self._pace + 0.5 * per

    def _note_sizes(self, reads: Sequence[Any]) -> None:
        sizes = [len(r[0] or b"") for r in reads if not isinstance(r, BaseException)]
        if sizes:
            mean = sum(sizes) / len(sizes)
            self._avg_node_bytes = mean if self._avg_node_bytes is None else (self._avg_node_bytes + mean) / 2

    def _contention(self) -> int:
        with self._stats_lock:
            return self._stats.lost_races + self._stats.lock_conflicts

    def _process_batch(self, names: list[str]) -> tuple[list[str], bool]:
        """Process ``names``; return (names that are finished for this queue instance, any held by others)."""
        if self._lock_path is None:
            return self._process_normally(names), False
        return self._process_with_locks(names)

    # -- normal mode: read, delete with version, deliver (at-most-once, as Curator)
    def _process_normally(self, names: list[str]) -> list[str]:
        paths = [naming.join(self._queue_path, n) for n in names]
        reads = protocol.multi_read(self._client, paths, limit=self._jute_max_buffer)
        self._note_sizes(reads)
        handled: list[str] = []
        groups: list[list[Any]] = []
        entries: list[tuple[str, list[bytes], bytes, int]] = []
        for name, path, res in zip(names, paths, reads):
            if isinstance(res, BaseException):
                handled.append(name)  # skipped until the name leaves the listing
                if isinstance(res, NoNodeError):
                    self._count("lost_races")
                else:
                    log.warning("cannot read %s: %r (skipped)", path, res)
                    self._count("loop_errors")
                continue
            data, stat = res
            items, reason = self._decode(data)
            if reason is not None:
                self._quarantine(name, data, stat.version, None, reason)
                handled.append(name)
                continue
            groups.append([_delete_op(path, stat.version)])
            entries.append((name, items, data, stat.version))
        if not groups:
            return handled
        results = self._delete_with_receipts(groups)
        deliver: list[_Outcome] = []
        for (name, items, data, version), (ok, err) in zip(entries, results):
            handled.append(name)
            if ok:
                deliver.append(_Outcome(None, name, data, version, items))
            elif isinstance(err, (NoNodeError, BadVersionError, NotEmptyError)):
                self._count("lost_races")  # another consumer got it
            else:
                log.warning("could not take %s/%s: %r", self._queue_path, name, err)
                self._count("loop_errors")
        self._deliver_all(deliver, ack=None)
        return handled

    def _delete_with_receipts(self, groups: list[list[Any]]) -> list[tuple[bool, Any]]:
        """Commit the delete groups of a no-lock take; every multi also creates a receipt node.

        When a reply is lost, the receipt tells exactly whether *this* consumer's multi committed (the receipt
        exists) or not: "every node is gone" cannot, since a competing consumer may have taken them. So an item
        is delivered only by the consumer whose delete committed: at-most-once, and nothing lost to a lost
        reply. Receipts are deleted right after use; one can only be left behind by a crash at that moment.
        """
        outcome: list[tuple[bool, Any] | None] = [None] * len(groups)
        pending = list(range(len(groups)))
        failures = 0
        while pending:
            # After two contended rounds, one multi per item (pipelined), so one lost race costs one item.
            chunks = [pending[: _MAX_OPS_PER_MULTI - 1]] if failures < 2 else [[g] for g in pending]
            sent = []
            for chunk in chunks:
                receipt = naming.join(self._receipt_path, "r-" + self._next_token())
                ops = [_create_op(receipt, b"", acl=self._acl)] + [op for g in chunk for op in groups[g]]
                sent.append((chunk, receipt, protocol.send_multi(self._client, ops, limit=self._jute_max_buffer)))
            for chunk, receipt, pending_result in sent:
                try:
                    result = pending_result.result()
                except _CONNECTION_ERRORS as exc:
                    if self._receipt_committed(receipt, exc):
                        self._finish_chunk(chunk, receipt, outcome, pending)
                    continue  # not committed: the chunk stays pending and is sent again
                if result.ok:
                    self._finish_chunk(chunk, receipt, outcome, pending)
                    continue
                if result.failed_index == 0:
                    if isinstance(result.failure, NoNodeError):
                        self._client.ensure_path(self._receipt_path, acl=self._acl)
                        continue
                    raise result.failure if result.failure is not None else RuntimeError("receipt create failed")
                if result.failed_index is None:
                    raise result.failure if result.failure is not None else RuntimeError("multi failed")
                g = chunk[result.failed_index - 1]
                outcome[g] = (False, result.failure)
                pending.remove(g)
                failures += 1
        return [o if o is not None else (False, None) for o in outcome]

    def _finish_chunk(self, chunk: list[int], receipt: str, outcome: list[Any], pending: list[int]) -> None:
        for g in chunk:
            outcome[g] = (True, None)
            pending.remove(g)
        self._client.delete_async(receipt)  # best effort; a leftover receipt is a few bytes, harmless

    def _receipt_committed(self, receipt: str, first_error: BaseException) -> bool:
        """After a lost reply: did the multi that creates ``receipt`` commit?"""
        log.warning("take on %s lost its reply (%r); checking its receipt", self._queue_path, first_error)
        for _ in range(5):
            if not self._wait_connected(30.0):
                break
            try:
                return self._client.exists(receipt) is not None
            except _CONNECTION_ERRORS:
                continue
        raise QueueStateError(
            f"could not learn whether a take on {self._queue_path} committed (receipt {receipt}); the items of "
            "that take are not delivered if it did (at-most-once)"
        )

    # -- lock-safe mode
    def _next_token(self) -> str:
        """A fence token unique to this acquisition: random per queue instance, counted within it."""
        with self._stats_lock:
            self._token_count += 1
            return f"{self._token_prefix}{self._token_count:x}"

    def _lock_name(self, name: str) -> str:
        return name if self._lock_names == "curator" else name + self._lock_suffix

    def _acquire(self, names: list[str]) -> tuple[list[_Held], list[str], bool]:
        """Take locks on ``names``; return (held, names gone for good, whether some were held by others)."""
        assert self._lock_path is not None
        held_all: list[_Held] = []
        gone: list[str] = []
        locked = False
        candidates = list(names)
        for attempt in range(3):
            if not candidates:
                break
            token = self._next_token()
            helds = []
            for name in candidates:
                path = naming.join(self._queue_path, name)
                helds.append(
                    _Held(name, path, naming.join(self._lock_path, self._lock_name(name)), path + "/lock-" + token)
                )
            groups = [
                [
                    _create_op(h.lock, self._lock_data, ephemeral=True, acl=self._acl),
                    _create_op(h.fence, b"", ephemeral=True, acl=self._acl),
                ]
                for h in helds
            ]
            try:
                results = self._commit_groups(groups)
            except _CONNECTION_ERRORS as exc:
                log.warning("taking locks on %s: %r; checking what was committed", self._queue_path, exc)
                if not self._wait_connected(30.0):
                    raise
                # All groups that were in one multi share the fate of the first; check each fence cheaply.
                checks = protocol.get_many(self._client, [h.fence for h in helds]) if helds else []
                still: list[str] = []
                for h, res in zip(helds, checks):
                    if isinstance(res, BaseException):
                        still.append(h.name)
                    else:
                        held_all.append(h)
                candidates = still
                continue
            lock_path_missing = []
            unsure: list[_Held] = []
            for h, (ok, err) in zip(helds, results):
                if ok:
                    held_all.append(h)
                elif isinstance(err, _CONNECTION_ERRORS):
                    unsure.append(h)  # the request may have committed: we may hold this lock
                elif isinstance(err, NodeExistsError):
                    locked = True
                    self._count("lock_conflicts")
                elif isinstance(err, NoNodeError) and getattr(err, "_zkq_op", 1) == 0:
                    lock_path_missing.append(h.name)
                elif isinstance(err, NoNodeError):
                    gone.append(h.name)
                    self._count("lost_races")
                else:
                    log.warning("could not lock %s: %r", h.path, err)
                    self._count("lock_conflicts")
                    locked = True
            if unsure:
                # A lock request whose reply was lost: our fence exists exactly when it committed. Without this
                # check a committed lock would be held by nobody who knows it, stalling the item for every
                # consumer until this session ends.
                log.warning("%d lock request(s) on %s lost their reply; checking fences", len(unsure), self._queue_path)
                if not self._wait_connected(30.0):
                    self._release(unsure)  # deferred until connected; fenced, so harmless if not ours
                else:
                    checks = protocol.get_many(self._client, [h.fence for h in unsure])
                    for h, res in zip(unsure, checks):
                        if isinstance(res, BaseException):
                            lock_path_missing.append(h.name)  # not committed: try it again
                        else:
                            held_all.append(h)
            if not lock_path_missing:
                break
            if not unsure:
                log.warning("lock path %s is gone; recreating it", self._lock_path)
                self._client.ensure_path(self._lock_path, acl=self._acl)
            candidates = lock_path_missing
        return held_all, gone, locked

    def _process_with_locks(self, names: list[str]) -> tuple[list[str], bool]:
        held, gone, locked = self._acquire(names)
        handled = list(gone)
        if not held:
            return handled, locked
        try:
            reads = protocol.multi_read(self._client, [h.path for h in held], limit=self._jute_max_buffer)
            self._note_sizes(reads)
        except Exception:
            self._release(held)
            raise
        outcomes: list[_Outcome] = []
        for h, res in zip(held, reads):
            if isinstance(res, BaseException):
                log.warning("reading locked item %s failed: %r; releasing it", h.path, res)
                self._release([h])
                continue
            data, stat = res
            items, reason = self._decode(data)
            if reason is not None:
                self._quarantine(h.name, data, stat.version, h, reason)
                handled.append(h.name)
                continue
            outcomes.append(_Outcome(h, h.name, data, stat.version, items))
        ack = self._ack
        if self._acker is not None:
            # The previous batch's acks ran while this batch was locked and read; let them land before the
            # consumer sees new items, so at most one batch is ever consumed-but-unacked.
            self._acker.drain()
            if len(outcomes) >= _ASYNC_ACK_MIN_ITEMS:
                ack = self._acker.submit  # small batches are about latency: ack them right away
        self._deliver_all(outcomes, ack=ack)
        handled.extend(o.name for o in outcomes)
        return handled, locked

    def _release(self, held: list[_Held]) -> None:
        """Give items back untouched (fence + lock deleted). Retried later if the connection is down."""
        if not held:
            return
        groups = [[_delete_op(h.fence), _delete_op(h.lock)] for h in held]
        try:
            results = self._commit_groups(groups)
        except Exception as exc:
            log.warning("releasing %d lock(s) on %s failed (%r); will retry", len(held), self._queue_path, exc)
            with self._deferred_lock:
                self._deferred_releases.extend(held)
            return
        retry: list[_Held] = []
        for h, (ok, err) in zip(held, results):
            if not ok and isinstance(err, _CONNECTION_ERRORS):
                retry.append(h)  # the fence makes a repeat harmless
            elif not ok and not isinstance(err, NoNodeError):
                log.warning("releasing %s: %r", h.path, err)
        if retry:
            with self._deferred_lock:
                self._deferred_releases.extend(retry)

    def _ack(self, outcomes: list[_Outcome]) -> None:
        """Finish consumed items: delete (fenced) or requeue per the error mode. Work that fails for lack of
        a connection is kept and retried by the run loop (the fence makes a retry safe)."""
        with self._ack_lock:
            self._ack_locked(outcomes)

    def _ack_locked(self, outcomes: list[_Outcome]) -> None:
        plain: list[_Outcome] = []
        for o in outcomes:
            if o.error is not None and self._error_mode is ErrorMode.REQUEUE:
                try:
                    self._requeue(o)
                except Exception as exc:
                    log.warning("requeue of %s/%s failed (%r); will retry", self._queue_path, o.name, exc)
                    o.ambiguous = True
                    with self._deferred_lock:
                        self._deferred_acks.append(o)
            else:
                plain.append(o)
        if not plain:
            return
        groups = []
        for o in plain:
            h = o.held
            assert h is not None
            groups.append([_delete_op(h.fence), _delete_op(h.path, o.version), _delete_op(h.lock)])
        try:
            results = self._commit_groups(groups, retry_connection=True)
        except Exception as exc:
            log.warning("ack of %d item(s) on %s failed (%r); will retry", len(plain), self._queue_path, exc)
            for o in plain:
                o.ambiguous = True
            with self._deferred_lock:
                self._deferred_acks.extend(plain)
            return
        for o, (ok, err) in zip(plain, results):
            if ok:
                if o.error is not None:
                    self._count("deleted_on_error")
            elif isinstance(err, _CONNECTION_ERRORS):
                # Outcome unknown: retry later. The fence makes the retry safe, and the ambiguity flag lets
                # the retry recognise our own earlier commit.
                o.ambiguous = True
                with self._deferred_lock:
                    self._deferred_acks.append(o)
            else:
                if o.ambiguous and err is not None:
                    try:
                        err._zkq_ambiguous = True  # type: ignore[attr-defined]
                    except AttributeError:
                        pass
                self._ack_failed(o, err)

    def _retry_deferred(self) -> bool:
        """Retry acks/releases that failed for lack of a connection; True while some remain."""
        with self._deferred_lock:
            acks, self._deferred_acks = self._deferred_acks, []
            releases, self._deferred_releases = self._deferred_releases, []
        if not acks and not releases:
            return False
        if not self._connected.is_set():
            with self._deferred_lock:
                self._deferred_acks[:0] = acks
                self._deferred_releases[:0] = releases
            return True
        if acks:
            self._ack(acks)  # takes _ack_lock
        if releases:
            self._release(releases)
        with self._deferred_lock:
            return bool(self._deferred_acks or self._deferred_releases)

    def _ack_failed(self, o: _Outcome, err: BaseException | None) -> None:
        assert o.held is not None
        if isinstance(err, NoNodeError) and getattr(err, "_zkq_op", None) == 0:
            exists = None
            try:
                exists = self._client.exists(o.held.path)
            except Exception:
                pass
            if getattr(err, "_zkq_ambiguous", False) and exists is None:
                return  # our own earlier attempt committed
            self._count("lock_lost")
            lost = LockLostError(
                f"lock on {o.held.path} was lost (session expired?); the ack was refused and the item is left "
                "to its new owner"
            )
            log.warning("%s", lost)
            return
        log.warning("ack of %s failed: %r; releasing it for redelivery", o.held.path, err)
        self._count("loop_errors")
        self._release([o.held])

    def _requeue(self, o: _Outcome) -> None:
        h = o.held
        assert h is not None
        if o.failed_at is not None and o.failed_at > 0 and len(o.items) > 1:
            # don't redeliver what was consumed: requeue the failed item and the ones after it
            data = framing.encode_items(framing.decode_items(o.data)[o.failed_at :])
        else:
            data = o.data
        prefix = self.make_requeue_item_path(h.path)
        ops = [
            _delete_op(h.fence),
            _delete_op(h.path, o.version),
            _create_op(prefix, data, sequence=True, acl=self._acl),
            _delete_op(h.lock),
        ]
        result = self._run_multi_retrying(ops)
        if result.ok:
            self._count("requeued")
            return
        err = result.failure
        if result.failed_index is not None and err is not None:
            err._zkq_op = result.failed_index  # type: ignore[attr-defined]
            if o.ambiguous:
                err._zkq_ambiguous = True  # type: ignore[attr-defined]
        self._ack_failed(o, err)

    def _run_multi_retrying(self, ops: list[Any]) -> Any:
        """run_multi, retried once after reconnecting on a connection error (fenced ops make that safe)."""
        try:
            return protocol.run_multi(self._client, ops, limit=self._jute_max_buffer)
        except _CONNECTION_ERRORS:
            if not self._wait_connected(30.0):
                raise
            result = protocol.run_multi(self._client, ops, limit=self._jute_max_buffer)
            if result.failure is not None:
                result.failure._zkq_ambiguous = True  # type: ignore[attr-defined]
            return result

    # -- removal (the seam DistributedIdQueue.remove uses)
    def _remove_items(self, names: Sequence[str]) -> int:
        """Delete the item nodes ``names`` unless a consumer holds them; return how many were removed.

        Lock-safe queues take the lock for the removal (create lock, delete item, delete lock in one multi),
        as Curator's ``tryRemove`` does; an item held by a consumer (lock exists, or our fence child makes the
        item non-empty) or already gone counts 0.
        """
        self._check_started()
        groups = []
        for name in names:
            path = naming.join(self._queue_path, name)
            if self._lock_path is None:
                groups.append([_delete_op(path)])
            else:
                lock = naming.join(self._lock_path, self._lock_name(name))
                groups.append(
                    [_create_op(lock, self._lock_data, ephemeral=True, acl=self._acl), _delete_op(path), _delete_op(lock)]
                )
        if not groups:
            return 0
        removed = 0
        for ok, err in self._commit_groups(groups):
            if ok:
                removed += 1
            elif not isinstance(err, (NoNodeError, NodeExistsError, NotEmptyError)):
                log.warning("removing an item from %s failed: %r", self._queue_path, err)
        return removed

    # -- decoding and quarantine
    def _decode(self, data: bytes | None) -> tuple[list[Any], str | None]:
        """Unframe and deserialize every item of a node up front, so a bad node is quarantined whole before
        any of its items reaches the consumer. Returns (items, None) or ([], reason)."""
        try:
            payloads = framing.decode_items(data)
        except CorruptItemError as exc:
            return [], f"corrupt frame: {exc}"
        except Exception as exc:  # defensive: framing should only raise CorruptItemError
            return [], f"undecodable frame: {exc!r}"
        items = []
        for index, payload in enumerate(payloads):
            try:
                items.append(self._serializer.deserialize(payload))
            except Exception as exc:
                return [], f"serializer {self._serializer!r} cannot deserialize item {index}: {exc!r}"
        return items, None

    def _quarantine(self, name: str, data: bytes, version: int, held: _Held | None, reason: str) -> None:
        """Move a node aside to the quarantine path in one transaction; never delete it silently."""
        target = naming.join(self._quarantine_path, name)
        for sequence in (False, True):
            ops: list[Any] = []
            if held is not None:
                ops.append(_delete_op(held.fence))
            ops.append(_create_op(target + ("-" if sequence else ""), data or b"", sequence=sequence, acl=self._acl))
            ops.append(_delete_op(naming.join(self._queue_path, name), version))
            if held is not None:
                ops.append(_delete_op(held.lock))
            result = self._run_multi_retrying(ops)
            if result.ok:
                self._count("corrupt_quarantined")
                log.error("Corrupted queue item %s/%s moved to %s: %s", self._queue_path, name, result.results[
                    1 if held is not None else 0], reason)
                return
            if isinstance(result.failure, NodeExistsError) and not sequence:
                continue
            if isinstance(result.failure, NoNodeError) and result.failed_index == (1 if held is not None else 0):
                self._client.ensure_path(self._quarantine_path, acl=self._acl)
                continue
            log.warning("could not quarantine %s/%s (%s): %r", self._queue_path, name, reason, result.failure)
            self._count("lost_races")
            return

    # -- delivery
    def _consume_node(self, o: _Outcome) -> _Outcome:
        """Consume every item of one node. Lock-safe + REQUEUE stops at the first error."""
        consumer = self._consumer
        assert consumer is not None
        stop_on_error = o.held is not None and self._error_mode is ErrorMode.REQUEUE
        for index, item in enumerate(o.items):
            try:
                consumer.consume_message(item)
                self._count("consumed")
            except BaseException as exc:  # SystemExit from a consumer must not end the loop thread either
                self._count("consumer_errors")
                log.exception("Exception processing queue item %s/%s [%d]", self._queue_path, o.name, index)
                if o.error is None:
                    o.error = exc
                    o.failed_at = index
                if stop_on_error:
                    break
        return o

    def _deliver_all(self, outcomes: list[_Outcome], ack: Callable[[list[_Outcome]], None] | None) -> None:
        """Hand every node to the consumer (inline or on the executor) and ack as they finish.

        In lock-safe mode, nodes never handed over (closing, or the executor refused work) are released
        untouched, so they go to another consumer instead of staying locked by this live session.
        """
        if not outcomes:
            return
        started = time.monotonic()
        try:
            self._deliver_each(outcomes, ack)
        finally:
            self._note_pace(len(outcomes), time.monotonic() - started)

    def _deliver_each(self, outcomes: list[_Outcome], ack: Callable[[list[_Outcome]], None] | None) -> None:
        if self._executor is None:
            pending: list[_Outcome] = []
            last_ack = time.monotonic()
            for index, o in enumerate(outcomes):
                if ack is not None and not self._running:
                    self._release([r.held for r in outcomes[index:] if r.held is not None])
                    break
                pending.append(self._consume_node(o))
                if ack is not None and time.monotonic() - last_ack > _ACK_EVERY_SECONDS:
                    ack(pending)
                    pending = []
                    last_ack = time.monotonic()
            if ack is not None and pending:
                ack(pending)
            return
        futures: dict[Future[_Outcome], _Outcome] = {}
        try:
            for index, o in enumerate(outcomes):
                futures[self._executor.submit(self._consume_node, o)] = o
        except Exception:
            if ack is not None:
                self._release([r.held for r in outcomes[index:] if r.held is not None])
            log.exception("the executor refused work for %s", self._queue_path)
            self._count("loop_errors")
            if not futures:
                return
        remaining = set(futures)
        while remaining:
            done, remaining = futures_wait(remaining, return_when=FIRST_COMPLETED)
            finished = []
            for fut in done:
                o = futures[fut]
                exc = fut.exception()
                if exc is not None:  # _consume_node catches consumer errors; this is an engine bug
                    log.error("consume task for %s failed: %r", o.name, exc)
                    o.error = exc
                finished.append(o)
            if ack is not None:
                ack(finished)

    # -- committing groups of ops
    def _commit_groups(self, groups: list[list[Any]], *, retry_connection: bool = False) -> list[tuple[bool, Any]]:
        """Commit each group of ops atomically, as few multis as possible.

        All groups go into one multi (split by size); when it fails, the group owning the failed op is marked
        failed (its exception gets ``_zkq_op`` = the op's index in the group) and the rest is retried. After two
        failures the remaining groups are committed one multi each, pipelined, so contention costs one round.
        """
        outcome: list[tuple[bool, Any] | None] = [None] * len(groups)
        pending = list(range(len(groups)))
        failures = 0
        ambiguous = False
        budget = self._jute_max_buffer - 4096
        while pending:
            if failures >= 2 and len(pending) > 1:
                self._commit_each(groups, pending, outcome, ambiguous)
                break
            chunk: list[int] = []
            ops: list[Any] = []
            owner: list[tuple[int, int]] = []
            size = 0
            for g in pending:
                g_size = sum(_op_size(op, self._chroot_len) for op in groups[g])
                if chunk and (size + g_size > budget or len(ops) + len(groups[g]) > _MAX_OPS_PER_MULTI):
                    break
                chunk.append(g)
                for i, op in enumerate(groups[g]):
                    ops.append(op)
                    owner.append((g, i))
                size += g_size
            try:
                result = protocol.run_multi(self._client, ops, limit=self._jute_max_buffer)
            except _CONNECTION_ERRORS:
                if not retry_connection or not self._wait_connected(30.0):
                    raise
                ambiguous = True
                continue
            if result.ok:
                offset = 0
                for g in chunk:
                    n = len(groups[g])
                    outcome[g] = (True, result.results[offset : offset + n])
                    offset += n
                pending = pending[len(chunk) :]
                continue
            if result.failed_index is None:
                raise result.failure if result.failure is not None else RuntimeError("multi failed")
            g, i = owner[result.failed_index]
            err = result.failure
            try:
                err._zkq_op = i  # type: ignore[union-attr]
                if ambiguous:
                    err._zkq_ambiguous = True  # type: ignore[union-attr]
            except AttributeError:
                pass
            outcome[g] = (False, err)
            pending.remove(g)
            failures += 1
        return [o if o is not None else (False, None) for o in outcome]

    def _commit_each(
        self, groups: list[list[Any]], pending: list[int], outcome: list[Any], ambiguous: bool
    ) -> None:
        limit = self._jute_max_buffer
        asyncs = [(g, protocol.send_multi(self._client, groups[g], limit=limit)) for g in pending]
        for g, async_result in asyncs:
            try:
                result = async_result.result()
            except Exception as exc:
                outcome[g] = (False, exc)
                continue
            if result.ok:
                outcome[g] = (True, result.results)
            else:
                err = result.failure
                try:
                    err._zkq_op = result.failed_index  # type: ignore[union-attr]
                    if ambiguous:
                        err._zkq_ambiguous = True  # type: ignore[union-attr]
                except AttributeError:
                    pass
                outcome[g] = (False, err)
