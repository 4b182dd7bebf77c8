"""The ``zkqueue://`` kombu transport: a kombu virtual transport on zkqueue's lock-safe engine queues.

- publish: ``_put`` stores the message as one node of the queue's priority queue (foreground puts: committed when
  ``publish`` returns; puts of many threads share multis); over about 1 MiB it goes through the large-item side
  channel. Exchanges route by tables kept in ZooKeeper (:mod:`.routing`); fanout puts a copy in every bound queue.
- consume: ``drain_events`` claims messages in bulk (as many as the prefetch allows) under session-bound leases
  and delivers them in queue order: priority first (lower number first by default), then publish order. It waits
  for messages on the engine's children watch, not by polling ZooKeeper.
- ack, reject, recover: see :mod:`.qos`. Acks return at once: one thread per process commits them in groups
  (:mod:`.acks`), and while a group is committing a claim waits until a good share of the prefetch is free (one
  round trip for several messages instead of one per ack).

Waiting (:mod:`.wakeup`): ``drain_events`` waits on one condition per connection, woken by a change of ANY
queue it can take from (the engine's children cache of each, fed by ZooKeeper's child watch) and by an ack or a
give-back on any of its channels (a prefetch slot opening). A message published to any consumed queue is
delivered within milliseconds; the waits are local, not requests to the server.
"""

from __future__ import annotations

import itertools
import logging
import socket
import time
from queue import Empty
from typing import Any

import kazoo
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, NoAuthError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kombu.transport import virtual
from kombu.utils.uuid import uuid

from zkqueue.celery import client as clients
from zkqueue.celery import publish_with
from zkqueue.celery.publish_with import AttachedOps
from zkqueue.errors import BrokerConnectionError, SessionLostError
from zkqueue.celery.qos import QoS, Held
from zkqueue.celery.queues import QueueStore, decode, expired
from zkqueue.celery.routing import Bindings
from zkqueue.celery.url import DEFAULT_PORT, DEFAULT_ROOT, ZkUrl, from_parts, parse_url
from zkqueue.celery.wakeup import Wakeup, version_of
from zkqueue.engine.api import CONNECTION_ERRORS, Completion, wait_connected
from zkqueue.errors import QueuePermissionError

log = logging.getLogger("zkqueue.celery.transport")

#: Most seconds drain_events waits for a lost connection at a time before it looks at the session again.
FAILOVER_STEP = 1.0
#: Most messages one claim takes when the channel has no prefetch limit.
DEFAULT_BULK = 100
#: While acks are committing, a claim waits for at least 1/MIN_CLAIM_SHARE of the prefetch to be free.
MIN_CLAIM_SHARE = 2
DEFAULT_PRIORITY_STEPS = tuple(range(10))
#: Most seconds ``drain_events`` waits before it looks again without being woken.
MAX_WAIT = 1.0
#: Under an event loop: how long an empty look leaves its queues watched (the loop's timer looks again sooner).
ARMED_SECONDS = 60.0


class Channel(virtual.Channel):
    """A kombu channel on the transport's shared queues and bindings."""

    QoS = QoS
    supports_fanout = True
    do_restore = True
    from_transport_options = virtual.Channel.from_transport_options + (
        "priority_steps", "priority_order", "bulk", "polling_interval")

    priority_steps: tuple[int, ...] = DEFAULT_PRIORITY_STEPS
    #: "lower_first" (Celery's order on Redis: 0 comes out first) or "higher_first" (RabbitMQ's: 9 first).
    priority_order = "lower_first"
    bulk = DEFAULT_BULK
    polling_interval: float | None = None

    def __init__(self, connection: Any, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        if self.priority_order not in ("lower_first", "higher_first"):
            raise ValueError(f"priority_order must be 'lower_first' or 'higher_first', got {self.priority_order!r}")
        self._queue_ttl: dict[str, int] = {}  # queue -> message TTL in ms (x-message-ttl of this process's declare)
        self._auto_delete: set[str] = set()

    # ------------------------------------------------------------------------------------------ parts
    @property
    def store(self) -> QueueStore:
        return self.connection.store

    @property
    def bindings(self) -> Bindings:
        return self.connection.bindings

    def take_pending(self, delivery_tag: str) -> Held | None:
        return self.connection.pending.pop(delivery_tag, None)

    def finish(self, held: Held, completion: Any) -> None:
        """Ack (``completion`` None) or end ``held`` as ``completion`` says, in one fenced multi."""
        queue = self.store.get(held.queue)
        if completion is not None and completion.action == "release":
            self.store.note_given_back(held.queue, [held.node.name])
            try:
                queue.release_nodes([held.node])
            finally:
                self.connection.wakeup.wake()  # a slot opened, and the message is there to take again
            return
        held.node.completion = completion
        try:
            queue.complete_nodes([held.node])
        finally:
            self.connection.wakeup.wake()  # a prefetch slot opened
        if held.node.settled == "lost":
            log.warning("message of queue %r was not acked: its lease ended with the ZooKeeper session, so it is "
                        "delivered again", held.queue)

    def ack_later(self, held: Held, on_done: Any) -> None:
        """Ack ``held`` in the process's next group commit of acks (:mod:`.acks`); ``on_done(node)`` once known."""
        self.store.acker.submit(held.node, on_done)

    def slot_opened(self) -> None:
        """A group of acks committed: prefetch slots opened, the drain looks again (unless the channel closed)."""
        transport = self.connection
        if transport is not None:
            transport.wakeup.wake()

    def release(self, held: list[Held]) -> None:
        by_queue: dict[str, list[Any]] = {}
        for h in held:
            by_queue.setdefault(h.queue, []).append(h.node)
        try:
            for name, nodes in by_queue.items():
                self.store.note_given_back(name, [n.name for n in nodes])
                self.store.get(name).release_nodes(nodes)
        finally:
            self.connection.wakeup.wake()

    def basic_consume(self, queue: str, no_ack: bool, callback: Any, consumer_tag: str, **kwargs: Any) -> Any:
        tag = super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)
        self.connection.wakeup.wake()  # a drain waiting in another thread takes this queue into account
        return tag

    # ------------------------------------------------------------------------------------------ priorities
    def _zk_priority(self, message: dict[str, Any]) -> int:
        priority = self._get_message_priority(message)
        steps = sorted(self.priority_steps)
        step = max((s for s in steps if s <= priority), default=steps[0])
        return step if self.priority_order == "lower_first" else self.max_priority - step

    # ------------------------------------------------------------------------------------------ queues
    def _new_queue(self, queue: str, auto_delete: bool = False, arguments: Any = None, **kwargs: Any) -> None:
        if auto_delete:
            self._auto_delete.add(queue)
        ttl = (arguments or {}).get("x-message-ttl")
        if ttl is not None:
            self._queue_ttl[queue] = int(ttl)
        self.store.get(queue)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return self.store.exists(queue)

    def _size(self, queue: str) -> int:
        return self.store.size(queue)

    def _purge(self, queue: str) -> int:
        return self.store.purge(queue)

    def queue_delete(self, queue: str, if_unused: bool = False, if_empty: bool = False, **kwargs: Any) -> None:
        if if_empty and self._size(queue):
            return
        self.state.queue_bindings_delete(queue)
        self.bindings.unbind_queue(queue)
        self.store.delete(queue)
        self._auto_delete.discard(queue)

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        self.queue_delete(queue)

    def basic_publish(self, message: dict[str, Any], exchange: str, routing_key: str, **kwargs: Any) -> Any:
        """kombu's publish; a message that ops were attached to (:mod:`.publish_with`: a chord's body) and that goes
        to exactly one queue is stored with those ops in one multi."""
        attached = publish_with.take(self.store.client, (message.get("headers") or {}).get("id"))
        if attached is not None:
            queues = self._destinations(exchange, routing_key)
            if len(queues) == 1:
                self._inplace_augment_message(message, exchange, routing_key)
                self._put(queues[0], message, attached=attached)
                return None
        return super().basic_publish(message, exchange, routing_key, **kwargs)

    def _destinations(self, exchange: str, routing_key: str) -> list[str]:
        """The queues a publish to ``exchange`` with ``routing_key`` reaches, looked up without side effects ([]
        for a fanout exchange or one not known here: such a publish goes kombu's own way)."""
        if not exchange:
            return [routing_key] if routing_key else []
        try:
            kind = self.typeof(exchange)
            if kind.type == "fanout":
                return []
            return list(kind.lookup(self.get_table(exchange), exchange, routing_key, None))
        except KeyError:
            return []

    def _put(self, queue: str, message: dict[str, Any], attached: AttachedOps | None = None, **kwargs: Any) -> None:
        props = message.get("properties") or {}
        ttl_ms: int | None = None
        if props.get("expiration") is not None:
            ttl_ms = int(float(props["expiration"]))
        elif queue in self._queue_ttl:
            ttl_ms = self._queue_ttl[queue]
        expires = None if ttl_ms is None else int(time.time() * 1000) + ttl_ms
        if attached is not None:  # ops to commit with this message (a chord's body and its "sent" mark)
            self.store.put_with(queue, message, self._zk_priority(message), expires, attached)
            return
        self.store.put(queue, message, self._zk_priority(message), expires)

    def _put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str, **kwargs: Any) -> None:
        for queue in {q for _rk, q in self.bindings.table(exchange)}:
            self._put(queue, message, **kwargs)

    # ------------------------------------------------------------------------------------------ exchanges
    def exchange_declare(self, exchange: str | None = None, type: str = "direct", durable: bool = False,
                         auto_delete: bool = False, arguments: Any = None, nowait: bool = False,
                         passive: bool = False) -> None:
        if passive and exchange and exchange not in self.state.exchanges:
            known = self.bindings.exchange_type(exchange)
            if known is not None:
                self.state.exchanges[exchange] = {"type": known, "durable": durable, "auto_delete": auto_delete,
                                                  "arguments": arguments or {}, "table": []}
        super().exchange_declare(exchange, type, durable, auto_delete, arguments, nowait, passive)
        if exchange and not passive:
            self.bindings.declare(exchange, self.state.exchanges[exchange]["type"])

    def exchange_delete(self, exchange: str, if_unused: bool = False, nowait: bool = False) -> None:
        self.state.exchanges.pop(exchange, None)
        self.bindings.delete_exchange(exchange)

    def typeof(self, exchange: str, default: str = "direct") -> Any:
        if exchange in self.state.exchanges:
            return super().typeof(exchange, default)
        return self.exchange_types[self.bindings.exchange_type(exchange) or default]

    def queue_bind(self, queue: str, exchange: str | None = None, routing_key: str = "", arguments: Any = None,
                   **kwargs: Any) -> None:
        exchange = exchange or "amq.direct"
        self.state.binding_declare(queue, exchange, routing_key, arguments)
        self.bindings.bind(exchange, routing_key, queue, ephemeral=queue in self._auto_delete)

    def queue_unbind(self, queue: str, exchange: str | None = None, routing_key: str = "", arguments: Any = None,
                     **kwargs: Any) -> None:
        self.state.binding_delete(queue, exchange, routing_key)
        if exchange:
            self.bindings.unbind(exchange, routing_key, queue)

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        self.bindings.bind(exchange, routing_key, queue, ephemeral=queue in self._auto_delete)

    def get_table(self, exchange: str) -> list[tuple[str, str, str]]:
        type_ = self.typeof(exchange)
        return [type_.prepare_bind(queue, exchange, rk, None) for rk, queue in self.bindings.table(exchange)]

    def list_bindings(self) -> Any:
        return ((queue, exchange, rkey) for exchange in self.state.exchanges
                for rkey, _pattern, queue in self.get_table(exchange))

    # ------------------------------------------------------------------------------------------ consuming
    def _deliverable(self, queue: str, node: Any) -> dict[str, Any] | None:
        """The message of ``node``, registered as pending under a fresh delivery tag; None (and the node acked)
        when it expired. Each delivery gets its own tag: a fanout copy or a redelivery never shares one."""
        try:
            message, expires = decode(node.items[0])
        except Exception:
            log.exception("message %s of queue %r cannot be decoded: quarantined", node.name, queue)
            node.completion = Completion.quarantine("not a kombu message")
            self.store.get(queue).complete_nodes([node])
            return None
        if expired(expires):
            self.store.get(queue).complete_nodes([node])
            return None
        tag = uuid()
        props = message.setdefault("properties", {})
        props["delivery_tag"] = tag
        if self.store.was_given_back(queue, node.name):
            props.setdefault("delivery_info", {})["redelivered"] = True
        self.connection.pending[tag] = Held(queue, node)
        return message

    def _settle_unclaimed(self, tag: str, queue: str, *, now: bool = True) -> None:
        """After a delivery: a message no QoS took (a no-ack consumer) is acked, now or (``now`` False) in the
        process's next group commit of acks."""
        held = self.connection.pending.pop(tag, None)
        if held is None:
            return
        if now:
            self.store.acker.flush()
            self.store.get(queue).complete_nodes([held.node])
        else:
            self.store.acker.submit(held.node)

    def _min_claim(self) -> int:
        """Fewest messages worth a claim's round trip while acks are committing: half the prefetch."""
        return max(1, (self.qos.prefetch_count or 0) // MIN_CLAIM_SHARE)

    def _budget(self) -> int:
        estimate = self.qos.can_consume_max_estimate()
        return min(self.bulk, estimate) if estimate is not None else self.bulk

    def deliver_from(self, queue: str, timeout: float) -> int:
        """Claim what the prefetch allows from ``queue`` (waiting up to ``timeout``) and deliver it; how many."""
        budget = self._budget()
        if budget <= 0:
            return 0
        if budget < self._min_claim() and self.qos.acking_count:
            return 0  # a group of acks is committing: the wake when it has opens more slots, claimed in one go
        delivered = 0
        for node in self.store.claim_fresh(queue, budget, timeout, confirm=timeout > 0):
            message = self._deliverable(queue, node)
            if message is None:
                continue
            tag = message["properties"]["delivery_tag"]
            try:
                self.connection._deliver(message, queue)
            finally:
                self._settle_unclaimed(tag, queue, now=False)
            delivered += 1
        return delivered

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        while True:
            nodes = self.store.claim(queue, 1, 0.0)
            if not nodes:
                raise Empty()
            message = self._deliverable(queue, nodes[0])
            if message is not None:
                return message

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        message = super().basic_get(queue, no_ack=no_ack, **kwargs)
        if message is not None and no_ack:
            self._settle_unclaimed(message.delivery_tag, queue)
        return message

    def basic_qos(self, prefetch_size: int = 0, prefetch_count: int = 0, apply_global: bool = False) -> None:
        self.qos.prefetch_count = prefetch_count or 0

    def basic_recover(self, requeue: bool = False) -> Any:
        if not requeue:
            raise NotImplementedError("zkqueue:// gives unacked messages back to the queue only (requeue=True)")
        return self.qos.restore_unacked()

    def close(self) -> None:
        transport = self.connection
        super().close()
        if transport is not None and transport.shared is not None:
            transport.store.acker.flush()  # this channel's acks are committed when its close returns


class Transport(virtual.Transport):
    """kombu transport for ``zkqueue://host1:2181,host2:2181/chroot``."""

    Channel = Channel

    #: The transport parses its own URLs: kombu's ``parse_url`` cannot read a multi-host connect string.
    can_parse_url = True
    default_port = DEFAULT_PORT
    driver_type = "zookeeper"
    driver_name = "kazoo"
    #: Most seconds a consumer of several queues waits on one of them before looking at the next.
    polling_interval = 0.1

    implements = virtual.Transport.implements.extend(
        asynchronous=True, exchange_type=frozenset(["direct", "topic", "fanout"]), heartbeats=False)

    connection_errors = virtual.Transport.connection_errors + (
        BrokerConnectionError, SessionLostError, KazooTimeoutError, ConnectionLoss, SessionExpiredError,
        ConnectionClosedError)
    channel_errors = virtual.Transport.channel_errors + (QueuePermissionError, NoAuthError)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.shared: clients.SharedClient | None = None
        self.pending: dict[str, Held] = {}
        self._epoch = 0
        self._turn = itertools.count()
        self.wakeup = Wakeup()
        self._loop: Any = None
        self._loop_fd: int | None = None
        self._loop_timer: Any = None

    def driver_version(self) -> str:
        return kazoo.version.__version__ if hasattr(kazoo, "version") else "unknown"

    # ------------------------------------------------------------------------------------------ connection
    def broker_url(self) -> ZkUrl:
        """This connection's URL: its own (``zkqueue://...`` kept whole by kombu), or the fields kombu parsed
        when it switched to an alternate URL."""
        conn = self.client
        host = conn.hostname or ""
        if "://" in host:
            return parse_url(host)
        return from_parts(host, conn.port, conn.virtual_host, conn.userid, conn.password)

    def establish_connection(self) -> Any:
        url = self.broker_url()
        options = self.client.transport_options or {}
        if self.shared is None:
            self.shared = clients.acquire(url, connect_timeout=float(self.client.connect_timeout or 10),
                                          session_timeout=options.get("session_timeout"))
        self._epoch = self.shared.session_epoch
        if self.wakeup.closed:
            self.wakeup = Wakeup()
        root = str(options.get("root") or url.options.get("root") or DEFAULT_ROOT)
        parts = self.shared.parts
        key = f"queues:{root}"
        if key not in parts:
            parts[key] = QueueStore(self.shared.client, root, large_items=options.get("large_items", True))
            parts[f"bindings:{root}"] = Bindings(self.shared.client, root)
        self.store: QueueStore = parts[key]
        self.bindings: Bindings = parts[f"bindings:{root}"]
        try:
            return super().establish_connection()
        except NoAuthError as exc:
            raise QueuePermissionError(f"ZooKeeper refused {url.as_uri()}: check the ACL of {root}") from exc

    def close_connection(self, connection: Any) -> None:
        try:
            super().close_connection(connection)
        finally:
            if self._loop is not None:
                self.unregister_from_event_loop(connection, self._loop)
            self.wakeup.close()
            shared, self.shared = self.shared, None
            if shared is not None:
                clients.release(shared)

    def verify_connection(self, connection: Any) -> bool:
        return self.shared is not None and self.shared.client.connected

    def as_uri(self, uri: str, include_password: bool = False, mask: str = "**") -> str:
        if not uri or "://" not in uri:
            raise NotImplementedError  # kombu builds the URI from its parsed fields
        return parse_url(uri).as_uri(include_password=include_password, mask=mask)

    @property
    def default_connection_params(self) -> dict[str, Any]:
        return {"port": self.default_port, "hostname": "localhost"}

    def _check_session(self) -> None:
        shared = self.shared
        if shared is None:
            raise BrokerConnectionError("the connection is closed")
        if shared.session_epoch != self._epoch:
            raise SessionLostError("the ZooKeeper session of this connection was lost; its unacked messages went "
                                   "back to their queues")

    # ------------------------------------------------------------------------------------------ draining
    def _consuming(self) -> list[tuple[Channel, str]]:
        return [(ch, q) for ch in self.channels if ch._consumers and not ch.closed and ch.qos.can_consume()
                for q in ch._active_queues]

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        """Deliver what is ready (in bulk, up to each channel's prefetch); wait up to ``timeout`` seconds for
        something to arrive; ``socket.timeout`` if nothing did.

        The wait wakes on a change of ANY queue it can take from and on an ack or give-back (a prefetch slot
        opening): see :mod:`.wakeup`. It looks again at least every :data:`MAX_WAIT` seconds (the session; a
        message another process gave back, which changes no listing)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        wakeup = self.wakeup
        while True:
            self._check_session()
            since = wakeup.generation
            pairs = self._consuming()  # a channel at its prefetch limit is woken by its ack, not by its queues
            versions = {q: (queue, version_of(queue)) for q, queue in ((q, ch.store.get(q)) for ch, q in pairs)}
            if pairs:
                start = next(self._turn) % len(pairs)
                pairs = pairs[start:] + pairs[:start]  # no queue always first
            delivered = 0
            try:
                for channel, queue in pairs:
                    delivered += channel.deliver_from(queue, 0.0)
            except CONNECTION_ERRORS as exc:
                # A failover under way: the session, and with it every lease, lives on. Wait it out here rather
                # than let kombu reconnect: its reconnect gives every unacked message back, and the tasks running
                # on them now would run twice.
                if delivered:
                    return
                self._check_session()
                assert self.shared is not None
                log.info("drain_events: %r; waiting for ZooKeeper to come back", exc)
                left = None if deadline is None else deadline - time.monotonic()
                step = FAILOVER_STEP if left is None else max(0.0, min(FAILOVER_STEP, left))
                wait_connected(self.shared.client, step)
                if deadline is not None and time.monotonic() >= deadline:
                    raise socket.timeout() from exc
                continue  # (a lost session shows at the top: SessionLostError)
            if delivered:
                return
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                if self._loop is not None:  # the event loop looks again when a watch or an ack wakes the pipe
                    wakeup.arm(versions, ARMED_SECONDS)
                raise socket.timeout()
            step = MAX_WAIT if left is None else min(MAX_WAIT, left)
            wakeup.wait(since, versions, step)

    # ------------------------------------------------------------------------------------------ event loop
    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        """Run under kombu's event loop (Celery's non-blocking worker loop): the loop reads the wake-up pipe of
        :mod:`.wakeup` and drains then; a timer looks again every :data:`MAX_WAIT` seconds regardless."""
        self.unregister_from_event_loop(connection, loop)
        self._loop = loop
        fd = self.wakeup.fileno()
        self._loop_fd = fd
        loop.add_reader(fd, self._on_wake, connection, loop)
        self._loop_timer = loop.call_repeatedly(MAX_WAIT, self.wakeup.wake)
        self.wakeup.wake()  # a first look: messages may be waiting already

    def unregister_from_event_loop(self, connection: Any, loop: Any) -> None:
        timer, self._loop_timer = self._loop_timer, None
        if timer is not None:
            timer.cancel()
        fd, self._loop_fd = self._loop_fd, None
        if fd is not None and self._loop is not None:
            try:
                self._loop.remove_reader(fd)
            except Exception:
                log.debug("removing the wake-up reader failed", exc_info=True)
        self._loop = None

    def _on_wake(self, connection: Any, loop: Any) -> None:
        """The wake-up pipe is readable: deliver what is ready, one bulk per loop turn, until nothing is."""
        self.wakeup.consume_signal()
        try:
            self.drain_events(connection, timeout=0)
        except socket.timeout:
            return
        loop.call_soon(self._on_wake, connection, loop)
