"""What the parts of one queue share: its paths and settings, counters, connection watch and token source.

:class:`DistributedQueue` builds one :class:`QueueContext` and hands it to each part (producer, run loop, takers,
leases, completion, delivery), so no part reaches into another's state.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from zkqueue.consumer import ConnectionState
from zkqueue.engine.log_limits import Failover
from zkqueue.engine.stats import Counters
from zkqueue.formats import naming

log = logging.getLogger("zkqueue.engine.context")


class TokenSource:
    """Tokens unique to this queue instance: a random prefix and a counter (fences, receipts, leases)."""

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:16] + "-"
        self._count = itertools.count(1)
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            n = next(self._count)
        return f"{self._prefix}{n:x}"


class ConnectionWatch:
    """Follows the client's connection: an event that is set while connected, and each change reported to
    ``on_state`` as a Curator :class:`ConnectionState` (RECONNECTED only after SUSPENDED or LOST)."""

    def __init__(self, client: KazooClient, closing: threading.Event,
                 on_state: Callable[[ConnectionState], None], name: str = "zkqueue") -> None:
        self._client = client
        self._closing = closing
        self._on_state = on_state
        self._last: str | None = None
        self.connected = threading.Event()
        #: Quiet logs of a lost connection: one WARNING line per episode, one RECONNECTED INFO line.
        self.failover = Failover(log, name)

    def start(self) -> None:
        self._last = self._client.state
        if self._client.connected:
            self.connected.set()
        self._client.add_listener(self._listener)

    def stop(self) -> None:
        try:
            self._client.remove_listener(self._listener)
        except Exception:  # pragma: no cover - kazoo keeps a set; removal does not fail in practice
            log.debug("remove_listener failed", exc_info=True)

    def _listener(self, state: str) -> None:  # kazoo's connection thread: never block
        previous, self._last = self._last, state
        if state == KazooState.CONNECTED:
            self.connected.set()
            if previous in (KazooState.SUSPENDED, KazooState.LOST):
                self.failover.reconnected()
                self._on_state(ConnectionState.RECONNECTED)
        elif state == KazooState.SUSPENDED:
            self.connected.clear()
            self.failover.lost("connection SUSPENDED")
            self._on_state(ConnectionState.SUSPENDED)
        elif state == KazooState.LOST:
            self.connected.clear()
            self.failover.expired()
            self._on_state(ConnectionState.LOST)

    def wait(self, timeout: float) -> bool:
        """Wait until connected (True) or ``timeout`` seconds passed or the queue is closing (False)."""
        deadline = time.monotonic() + timeout
        while not self._closing.is_set():
            if self.connected.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
                return True
            if time.monotonic() >= deadline:
                return False
        return False

    def session_id(self) -> int | None:
        """The client's current ZooKeeper session id (None while it has none)."""
        client_id = self._client.client_id
        return client_id[0] if client_id else None


@dataclass
class QueueContext:
    """Settings and services shared by the parts of one queue instance."""

    client: KazooClient
    queue_path: str
    lock_path: str | None
    quarantine_path: str
    receipt_path: str
    acl: list[Any] | None
    jute_max_buffer: int
    lock_names: str
    counters: Counters
    connection: ConnectionWatch
    closing: threading.Event
    is_running: Callable[[], bool]
    tokens: TokenSource = field(default_factory=TokenSource)
    lock_data: bytes = b""
    chroot_len: int = 0
    lock_suffix: str = field(init=False)

    def __post_init__(self) -> None:
        self.lock_suffix = naming.lock_suffix(self.queue_path)

    def item_path(self, name: str) -> str:
        return naming.join(self.queue_path, name)
