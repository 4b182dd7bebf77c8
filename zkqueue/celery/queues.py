"""The transport's queues in ZooKeeper: where each kombu queue lives, its engine queue, and the stored message.

Layout under the transport's root (``/kombu`` in the URL's chroot unless the ``root`` option says otherwise)::

    <root>/queues/<queue>      the messages: a zkqueue priority queue (Curator's priority names), one per node
    <root>/locks/<queue>       the leases of held (delivered, not yet acked) messages
    <root>/exchanges/...       exchange bindings (see :mod:`zkqueue.celery.routing`)

A queue name is escaped into one node name (``%``, ``/``, ``|`` and characters ZooKeeper refuses, as zkqueue
escapes ids). Each kombu queue is one lock-safe engine queue in pull mode, shared by every connection of the
process (:class:`QueueStore`, one per client): ``claim_nodes`` holds messages under session-bound leases,
``complete_nodes`` acks, ``release_nodes`` gives them back untouched (same node, same place in the queue).

A stored message is kombu's message dict as JSON (kombu's ``json`` module, as the Redis transport stores it),
plus ``x-zkqueue-expires`` (epoch ms) when the message or its queue has a time to live.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError
from kombu.utils.json import dumps, loads

from zkqueue import QueueBuilder
from zkqueue.celery import publish_with
from zkqueue.celery.acks import Acker
from zkqueue.celery.publish_with import AttachedOps
from zkqueue.engine.api import held_items
from zkqueue.formats import naming
from zkqueue.errors import ItemTooLargeError, QueueStateError
from zkqueue.formats.serializers import BytesSerializer

log = logging.getLogger("zkqueue.celery.queues")

EXPIRES_KEY = "x-zkqueue-expires"
#: Seconds a get waits for a listing that shows messages the queue node says it has (a put just made may not be
#: in the engine's cached listing yet).
FRESH_LISTING_WAIT = 0.2
#: Most given-back messages a store remembers to mark as redelivered.
MAX_GIVEN_BACK = 10_000
#: Most seconds closing a store (and the process's exit) waits for unconfirmed publishes to commit.
PUBLISH_FLUSH_SECONDS = 30.0


def node_name(name: str) -> str:
    """One ZooKeeper node name for a kombu queue or exchange name (reversible, see :func:`naming.escape_id`)."""
    escaped = naming.escape_id(name)
    if escaped in ("", ".", ".."):
        escaped = escaped.replace(".", "%2E") or "%00"  # a name of its own, never a real one's escape
    return escaped


def encode(message: dict[str, Any], expires_at_ms: int | None) -> bytes:
    if expires_at_ms is not None:
        message = dict(message, **{EXPIRES_KEY: expires_at_ms})
    return dumps(message).encode("utf-8")


def decode(data: bytes) -> tuple[dict[str, Any], int | None]:
    message = loads(data)
    expires = message.pop(EXPIRES_KEY, None)
    return message, expires


def expired(expires_at_ms: int | None) -> bool:
    return expires_at_ms is not None and time.time() * 1000 >= expires_at_ms


class QueueStore:
    """The started engine queues of one client under ``root`` (built on first use, closed with the client)."""

    def __init__(self, client: KazooClient, root: str, *, large_items: bool = True) -> None:
        self.client = client
        self.root = root.rstrip("/")
        self._large_items = large_items
        self._lock = threading.Lock()
        self._queues: dict[str, Any] = {}
        #: Engine queues of unconfirmed publishes (``confirm_publish=False``): background puts, by queue name.
        self._publishers: dict[str, Any] = {}
        #: (queue, node name) of messages this process gave back (reject with requeue, recover, close), oldest
        #: first: delivered again here, they are marked ``redelivered`` (another process cannot know it).
        self._given_back: dict[tuple[str, str], None] = {}
        #: The acks of every consumer of this store, committed together (see :mod:`.acks`).
        self.acker = Acker(self.root, client)

    def note_given_back(self, name: str, node_names: list[str]) -> None:
        with self._lock:
            for node in node_names:
                self._given_back[(name, node)] = None
            while len(self._given_back) > MAX_GIVEN_BACK:
                del self._given_back[next(iter(self._given_back))]

    def was_given_back(self, name: str, node_name: str) -> bool:
        """Whether this process gave ``node_name`` of queue ``name`` back before (forgotten once asked)."""
        with self._lock:
            return self._given_back.pop((name, node_name), 0) is None

    def queue_path(self, name: str) -> str:
        return f"{self.root}/queues/{node_name(name)}"

    def lock_path(self, name: str) -> str:
        return f"{self.root}/locks/{node_name(name)}"

    def _build(self, name: str, *, background: bool) -> Any:
        """A new (not started) engine queue of kombu queue ``name``: foreground puts, or (``background``) the put
        thread of unconfirmed publishes, whose close waits up to :data:`PUBLISH_FLUSH_SECONDS` for them."""
        builder = (QueueBuilder.builder(self.client, None, BytesSerializer(), self.queue_path(name))
                   .lock_path(self.lock_path(name)).put_in_background(background)
                   .final_flush_time(PUBLISH_FLUSH_SECONDS if background else 0.0))
        if self._large_items:
            builder = builder.large_items()
        return builder.build_priority_queue(0)

    def get(self, name: str) -> Any:
        """The started engine queue of kombu queue ``name`` (its nodes are created if missing)."""
        with self._lock:
            queue = self._queues.get(name)
            if queue is None:
                queue = self._build(name, background=False)
                # The consumption order is a key per name (priority, then sequence; no due times): claims keep it
                # from one listing to the next instead of sorting the whole listing on every claim.
                queue.order_key = naming.priority_sort_key
                queue.start()
                self._queues[name] = queue
            return queue

    def put(self, name: str, message: dict[str, Any], priority: int, expires_at_ms: int | None = None, *,
            confirm: bool = True) -> None:
        """Store ``message`` in queue ``name``; returns once it is committed (puts of many threads share multis).

        With ``confirm`` False (the transport's ``confirm_publish=False``) it returns once the message is handed to
        this process's put thread of that queue, which commits the messages handed to it in publish order, many per
        multi, exactly once through a lost reply and across a failover; a put that fails for good is logged and
        counted (``put_failed``). :meth:`flush_publishes` waits for them; closing the store and the process's exit
        do so (for up to :data:`PUBLISH_FLUSH_SECONDS`). A process killed in between loses what it had not sent,
        as an AMQP publisher without confirms does."""
        data = encode(message, expires_at_ms)
        if confirm:
            self.get(name).put(data, priority)
        else:
            self._publisher(name).put(data, priority)

    def _publisher(self, name: str) -> Any:
        with self._lock:
            queue = self._publishers.get(name)
            if queue is None:
                if not self._publishers:
                    _flush_at_exit(self)
                queue = self._build(name, background=True)
                queue.start()
                self._publishers[name] = queue
            return queue

    def flush_publishes(self, timeout: float | None = PUBLISH_FLUSH_SECONDS) -> bool:
        """Wait until every unconfirmed publish of this store has committed (or failed, logged); False on timeout."""
        with self._lock:
            publishers = list(self._publishers.values())
        deadline = None if timeout is None else time.monotonic() + timeout
        for queue in publishers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not queue.flush_puts(left):
                return False
        return True

    def put_with(self, name: str, message: dict[str, Any], priority: int, expires_at_ms: int | None,
                 attached: AttachedOps) -> None:
        """:meth:`put` of ``message`` and ``attached.ops`` in ONE multi (exactly once through a lost reply); sets
        ``attached.state``: committed, or refused when one of its ops failed (the message is then not stored). A
        message too large for one znode goes alone, through the large-item side channel (the ops stay pending:
        the caller commits them itself)."""
        queue = self.get(name)
        data = encode(message, expires_at_ms)
        try:
            (outcome,) = queue.commit_puts([[*queue.put_ops(data, priority), *attached.ops]])
        except ItemTooLargeError:  # nothing was sent: the message goes alone (large items have multis of their own)
            queue.put(data, priority)
            return
        if outcome.ok:
            attached.state = publish_with.COMMITTED
            return
        if outcome.op is not None and outcome.op >= 1:
            if isinstance(outcome.error, BadVersionError):
                log.info("a publish with ops of its own to %s was refused by op %d (%r): the message is not stored",
                         name, outcome.op - 1, outcome.error)
                attached.state = publish_with.REFUSED
                return
            if isinstance(outcome.error, NoNodeError):  # the node the ops change is gone: store the message alone
                log.warning("a publish with ops of its own to %s found op %d's node gone (%r): the message is "
                            "stored alone", name, outcome.op - 1, outcome.error)
                queue.put(data, priority)
                return
        raise outcome.error or QueueStateError(f"the put to {name} failed")

    def claim(self, name: str, max_nodes: int, timeout: float = 0.0, *, confirm: bool = True) -> list[Any]:
        """Up to ``max_nodes`` held messages of ``name``, at once (``timeout`` 0) or within ``timeout`` seconds.

        A message put by this very process a moment ago may not be in the engine's cached listing yet; with
        ``confirm``, when no node was claimable at once but the queue node has children, the claim asks the server
        (one round trip) and waits briefly for a fresh listing (so ``basic_get`` right after a publish finds the
        message). ``drain_events`` does not confirm: it waits on the cache's change instead (see
        :mod:`.wakeup`), which neither costs a round trip per look nor stalls on a queue whose messages are all
        held by other consumers."""
        queue = self.get(name)
        nodes = queue.claim_nodes(max_nodes, timeout)
        if nodes or not confirm or timeout >= FRESH_LISTING_WAIT:
            return nodes
        try:
            stat = self.client.exists(self.queue_path(name))
        except NoNodeError:
            return []
        if stat is None or stat.numChildren == 0:
            return []
        return queue.claim_nodes(max_nodes, FRESH_LISTING_WAIT)

    def claim_fresh(self, name: str, max_nodes: int, timeout: float = 0.0, *, confirm: bool = True) -> list[Any]:
        """:meth:`claim`, in priority order as of now: the engine claims from its cached listing and, when a change
        came since, asks for a new listing on the way; when the claim took fewer than ``max_nodes``, a second one
        (which sees that listing: its reply came on the same connection before the claim's) adds newer messages,
        and the whole is sorted by priority, then publish order."""
        nodes = self.claim(name, max_nodes, timeout, confirm=confirm)
        if nodes and len(nodes) < max_nodes:
            more = self.get(name).claim_nodes(max_nodes - len(nodes), 0.0)
            if more:
                nodes = sorted(nodes + more, key=lambda node: naming.priority_sort_key(node.name))
        return nodes

    def exists(self, name: str) -> bool:
        return self.client.exists(self.queue_path(name)) is not None

    def size(self, name: str) -> int:
        """Messages ready in ``name`` (stored and not held by a consumer), as AMQP's ``message_count``."""
        path = self.queue_path(name)
        try:
            items = [n for n in self.client.get_children(path) if naming.is_item_name(n)]
        except NoNodeError:
            return 0
        if not items:
            return 0
        try:
            locks = self.client.get_children(self.lock_path(name))
        except NoNodeError:
            locks = []
        return len(items) - len(held_items(items, locks, path))

    def purge(self, name: str) -> int:
        """Delete every ready message of ``name`` (held ones stay with their consumers); how many were deleted."""
        if not self.exists(name):
            return 0
        count = 0
        while nodes := self.claim(name, 500):
            self.get(name).complete_nodes(nodes)  # no completion set: an ack, i.e. deleted
            count += len(nodes)
        return count

    def delete(self, name: str) -> None:
        """Purge ``name`` and remove its nodes when no consumer holds a message of it any more."""
        with self._lock:
            publisher = self._publishers.pop(name, None)
        if publisher is not None:
            publisher.close()  # its publishes commit first (then the purge deletes them, as AMQP's delete does)
        self.purge(name)
        self.acker.flush()  # acks handed over for its messages commit before the queue closes
        with self._lock:
            queue = self._queues.pop(name, None)
        if queue is not None:
            queue.close()
        for path in (self.queue_path(name), self.lock_path(name)):
            try:
                self.client.delete(path)
            except (NoNodeError, NotEmptyError):
                pass  # held messages (or a put racing the delete) keep the node

    def close(self) -> None:
        with self._lock:
            publishers, self._publishers = list(self._publishers.values()), {}
        for publisher in publishers:  # unconfirmed publishes commit (for up to PUBLISH_FLUSH_SECONDS)
            try:
                publisher.close()
            except Exception:
                log.warning("closing the publisher of %s failed", publisher.queue_path, exc_info=True)
        self.acker.close()  # the acks handed over commit before the queues (and their leases) close
        with self._lock:
            queues, self._queues = list(self._queues.values()), {}
        for queue in queues:
            try:
                queue.close()
            except Exception:
                log.warning("closing queue %s failed", queue.queue_path, exc_info=True)


def _flush_at_exit(store: QueueStore) -> None:
    """At the interpreter's exit, wait for ``store``'s unconfirmed publishes (the put threads are daemons)."""
    ref = weakref.ref(store)

    def flush() -> None:
        live = ref()
        if live is not None and not live.flush_publishes():
            log.warning("unconfirmed publishes of %s did not commit within %.0f s of the exit", live.root,
                        PUBLISH_FLUSH_SECONDS)

    atexit.register(flush)
