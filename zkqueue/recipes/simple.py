"""SimpleDistributedQueue: Curator's (and ZooKeeper's own recipe's) synchronous byte queue.

Items are raw bytes in PERSISTENT_SEQUENTIAL ``<path>/qn-<seq>`` nodes, no framing: data-compatible with
Curator's ``SimpleDistributedQueue`` and ZooKeeper's ``recipes.queue.DistributedQueue``. Taking an item is
get-then-delete; a taker whose delete finds the node gone moves to the next node, so no item is handed out
twice (at most once, as Curator: if the connection drops between the read and the delete, and the delete
committed, the item is gone without being returned). Children not named ``qn-*`` are ignored.

Blocking ``take``/``poll(timeout)`` wait on a child watch, and also wake on every connection state change (kazoo
drops watches when the connection is lost), so they survive reconnects and session expiry. If the parent node
disappears (a container reaped, someone deleted it) it is recreated and the wait goes on (CURATOR-308, where
Curator's ``take`` hung). Parents are created as ordinary persistent nodes (kazoo cannot create containers).
"""

from __future__ import annotations

import logging
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from zkqueue.formats import naming
from zkqueue.transport.requests import CONNECTION_ERRORS
from zkqueue.errors import ConfigurationError, NoSuchElementError

log = logging.getLogger("zkqueue.recipes.simple")

#: Longest single wait while disconnected before looking at the connection again.
_DISCONNECTED_RECHECK = 1.0


class SimpleDistributedQueue:
    """A synchronous FIFO of ``bytes`` at ``path``. Thread-safe; no start/close needed."""

    def __init__(self, client: KazooClient, path: str) -> None:
        if client is None:
            raise ConfigurationError("client is required")
        self._client = client
        self._path = naming.validate_path(path)
        if self._path == "/":
            raise ConfigurationError("the queue path cannot be the root '/'")
        self._prefix = naming.join(self._path, naming.SIMPLE_PREFIX)

    @property
    def path(self) -> str:
        return self._path

    # -- Curator's API
    def offer(self, data: bytes) -> bool:
        """Add ``data`` at the tail (creating the queue node if needed). Always True, as Curator."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"SimpleDistributedQueue stores bytes, got {type(data).__name__}")
        self._client.create(self._prefix, bytes(data), sequence=True, makepath=True)
        return True

    def peek(self) -> bytes | None:
        """The head without removing it, or None if the queue is empty."""
        return self._head(remove=False)

    def element(self) -> bytes:
        """The head without removing it; :class:`NoSuchElementError` if the queue is empty."""
        data = self._head(remove=False)
        if data is None:
            raise NoSuchElementError(f"queue {self._path} is empty")
        return data

    def remove(self) -> bytes:
        """Remove and return the head; :class:`NoSuchElementError` if the queue is empty."""
        data = self._head(remove=True)
        if data is None:
            raise NoSuchElementError(f"queue {self._path} is empty")
        return data

    def poll(self, timeout: float | None = None) -> bytes | None:
        """Remove and return the head. ``timeout=None``: don't wait, None if empty. Otherwise wait up to
        ``timeout`` seconds for an item, then return None."""
        if timeout is None:
            return self._head(remove=True)
        if timeout < 0:
            raise ConfigurationError(f"timeout must be >= 0 seconds, got {timeout!r}")
        return self._take(timeout)

    def take(self, timeout: float | None = None) -> bytes | None:
        """Remove and return the head, waiting for one. ``timeout=None`` (Curator's ``take()``) waits forever;
        otherwise None after ``timeout`` seconds."""
        if timeout is not None and timeout < 0:
            raise ConfigurationError(f"timeout must be >= 0 seconds, got {timeout!r}")
        return self._take(timeout)

    # -- internals
    def _list(self, watch: object | None) -> list[str] | None:
        """Sorted ``qn-`` children, or None when the queue node does not exist."""
        try:
            children = self._client.get_children(self._path, watch=watch)
        except NoNodeError:
            return None
        return sorted(n for n in children if naming.is_simple_item_name(n))

    def _head(self, remove: bool, watch: object | None = None) -> bytes | None:
        names = self._list(watch)
        if names is None:
            if watch is None:
                return None
            # CURATOR-308: the parent was reaped or deleted. Recreate it so the watch can be set, and go on.
            log.info("queue node %s is gone; recreating it", self._path)
            try:
                self._client.ensure_path(self._path)
            except NodeExistsError:  # pragma: no cover - ensure_path tolerates it already
                pass
            names = self._list(watch)
            if names is None:
                return None
        for name in names:
            path = naming.join(self._path, name)
            try:
                data, _stat = self._client.get(path)
                if remove:
                    self._client.delete(path)
            except NoNodeError:
                continue  # another taker got it first
            return data
        return None

    def _take(self, timeout: float | None) -> bytes | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        wake = threading.Event()

        def on_watch(_event: object) -> None:  # kazoo's callback thread: never block
            wake.set()

        def on_state(_state: str) -> None:  # kazoo's connection thread: never block
            wake.set()

        self._client.add_listener(on_state)
        try:
            while True:
                wake.clear()
                disconnected = False
                try:
                    data = self._head(remove=True, watch=on_watch)
                except CONNECTION_ERRORS as exc:
                    log.debug("take on %s: %r; waiting for the connection", self._path, exc)
                    data, disconnected = None, True
                if data is not None:
                    return data
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                if disconnected or self._client.state != KazooState.CONNECTED:
                    # Don't hammer a server we cannot reach; wake on the next state change or soon after.
                    limit = _DISCONNECTED_RECHECK if remaining is None else min(remaining, _DISCONNECTED_RECHECK)
                    wake.wait(limit)
                else:
                    wake.wait(remaining)
        finally:
            self._client.remove_listener(on_state)
