"""The ``zkqueue://`` kombu transport: a kombu virtual transport on zkqueue's lock-safe engine queues.

- publish: ``_put`` stores the message as one node of the queue's priority queue (foreground puts: committed when
  ``publish`` returns; puts of many threads share multis); over about 1 MiB it goes through the large-item side
  channel. Exchanges route by tables kept in ZooKeeper (:mod:`.routing`); fanout puts a copy in every bound queue.
- consume: ``drain_events`` claims messages in bulk (as many as the prefetch allows) under session-bound leases
  and delivers them in queue order: priority first (lower number first by default), then publish order. It waits
  for messages on the engine's children watch, not by polling ZooKeeper.
- ack, reject, recover: see :mod:`.qos`.

Waiting: a connection consuming one queue waits on that queue's watch and wakes when a message arrives. With
several queues (Celery's task queue and its remote-control queue), it waits on each in turn for at most
``polling_interval`` seconds (default 0.1; a transport option): a message to the queue not waited on is seen
within that time. The waits are local (the engine's cached listing), not requests to the server.
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
from zkqueue.errors import BrokerConnectionError, SessionLostError
from zkqueue.celery.qos import QoS, Held
from zkqueue.celery.queues import QueueStore, decode, expired
from zkqueue.celery.routing import Bindings
from zkqueue.celery.url import DEFAULT_PORT, DEFAULT_ROOT, ZkUrl, from_parts, parse_url
from zkqueue.engine.api import Completion
from zkqueue.errors import QueuePermissionError

log = logging.getLogger("zkqueue.celery.transport")

#: Most messages one claim takes when the channel has no prefetch limit.
DEFAULT_BULK = 100
DEFAULT_PRIORITY_STEPS = tuple(range(10))


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
            queue.release_nodes([held.node])
            return
        held.node.completion = completion
        queue.complete_nodes([held.node])
        if held.node.settled == "lost":
            log.warning("message of queue %r was not acked: its lease ended with the ZooKeeper session, so it is "
                        "delivered again", held.queue)

    def release(self, held: list[Held]) -> None:
        by_queue: dict[str, list[Any]] = {}
        for h in held:
            by_queue.setdefault(h.queue, []).append(h.node)
        for name, nodes in by_queue.items():
            self.store.get(name).release_nodes(nodes)

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

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        props = message.get("properties") or {}
        ttl_ms: int | None = None
        if props.get("expiration") is not None:
            ttl_ms = int(float(props["expiration"]))
        elif queue in self._queue_ttl:
            ttl_ms = self._queue_ttl[queue]
        expires = None if ttl_ms is None else int(time.time() * 1000) + ttl_ms
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
        message.setdefault("properties", {})["delivery_tag"] = tag
        self.connection.pending[tag] = Held(queue, node)
        return message

    def _settle_unclaimed(self, tag: str, queue: str) -> None:
        """After a delivery: a message no QoS took (a no-ack consumer) is acked now."""
        held = self.connection.pending.pop(tag, None)
        if held is not None:
            self.store.get(queue).complete_nodes([held.node])

    def _budget(self) -> int:
        estimate = self.qos.can_consume_max_estimate()
        return min(self.bulk, estimate) if estimate is not None else self.bulk

    def deliver_from(self, queue: str, timeout: float) -> int:
        """Claim what the prefetch allows from ``queue`` (waiting up to ``timeout``) and deliver it; how many."""
        budget = self._budget()
        if budget <= 0:
            return 0
        delivered = 0
        for node in self.store.claim_fresh(queue, budget, timeout):
            message = self._deliverable(queue, node)
            if message is None:
                continue
            tag = message["properties"]["delivery_tag"]
            try:
                self.connection._deliver(message, queue)
            finally:
                self._settle_unclaimed(tag, queue)
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
        super().close()


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
        asynchronous=False, exchange_type=frozenset(["direct", "topic", "fanout"]), heartbeats=False)

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
        something to arrive; ``socket.timeout`` if nothing did."""
        deadline = None if timeout is None else time.monotonic() + timeout
        wait_step = self.polling_interval or 0.1
        while True:
            self._check_session()
            pairs = self._consuming()
            start = next(self._turn)
            pairs = pairs[start % len(pairs):] + pairs[:start % len(pairs)] if pairs else pairs
            delivered = 0
            for channel, queue in pairs:
                delivered += channel.deliver_from(queue, 0.0)
            if delivered:
                return
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise socket.timeout()
            step = wait_step if left is None else min(wait_step, left)
            if len(pairs) == 1:  # one queue: wait on its watch for the whole time left (checking the session)
                step = 1.0 if left is None else min(1.0, left)
            if not pairs:
                time.sleep(step)
                continue
            channel, queue = pairs[0]
            if channel.deliver_from(queue, step):
                return
