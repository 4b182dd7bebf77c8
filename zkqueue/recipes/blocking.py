"""BlockingQueueConsumer: pull items instead of receiving callbacks (Curator's BlockingQueueConsumer).

Pass it as the consumer of any queue; the queue hands items into a local buffer and the application pulls
them with :meth:`get`, :meth:`poll`, :meth:`drain` or by iterating::

    consumer = BlockingQueueConsumer()
    with QueueBuilder.builder(client, consumer, StrSerializer(), "/jobs").build_queue():
        for item in consumer:          # blocks for the next item; ends after consumer.close()
            handle(item)

As in Curator, an item counts as consumed once it is in the buffer: with a lock path the ZooKeeper node is
deleted then, not when the application pulls it. A bounded ``capacity`` makes the queue wait (holding the
item's lock, in lock-safe mode) until the application makes room, which limits how much can be lost with the
process.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from zkqueue.consumer import ConnectionState, QueueConsumer
from zkqueue.errors import ConfigurationError, QueueClosedError

log = logging.getLogger("zkqueue.recipes.blocking")

T = TypeVar("T")

class BlockingQueueConsumer(QueueConsumer[T], Generic[T]):
    """A QueueConsumer that buffers items for the application to pull.

    ``capacity`` (default 0 = unbounded, as Curator's LinkedBlockingQueue) bounds the buffer.
    ``on_state`` receives connection state changes (Curator forwards them to a ConnectionStateListener).
    """

    def __init__(self, capacity: int = 0, on_state: Callable[[ConnectionState], Any] | None = None) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ConfigurationError(f"capacity must be an int >= 0 (0 = unbounded), got {capacity!r}")
        self._capacity = capacity
        self._buffer: deque[Any] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._on_state = on_state

    # -- the queue's side
    def consume_message(self, item: T) -> None:
        """Buffer ``item``; with a full bounded buffer, wait for room. Raises QueueClosedError once closed
        (so a lock-safe queue gives the item back instead of losing it)."""
        with self._cond:
            while self._capacity and len(self._buffer) >= self._capacity and not self._closed:
                self._cond.wait()
            if self._closed:
                raise QueueClosedError("BlockingQueueConsumer is closed; item not accepted")
            self._buffer.append(item)
            self._cond.notify_all()

    def state_changed(self, state: ConnectionState) -> None:
        if self._on_state is not None:
            self._on_state(state)

    # -- the application's side
    def get(self, timeout: float | None = None) -> T:
        """The next item, waiting up to ``timeout`` seconds (None: forever). :class:`queue.Empty` on timeout;
        :class:`QueueClosedError` once closed and drained."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._buffer or self._closed, timeout):
                raise queue.Empty(f"no item within {timeout} s")
            if self._buffer:
                item = self._buffer.popleft()
                self._cond.notify_all()
                return item
            raise QueueClosedError("BlockingQueueConsumer is closed")

    def take(self) -> T:
        """Curator's ``take()``: the next item, waiting forever."""
        return self.get()

    def poll(self, timeout: float = 0.0, default: Any = None) -> T | Any:
        """Curator's ``take(time, unit)``: the next item, or ``default`` after ``timeout`` seconds."""
        try:
            return self.get(timeout)
        except (queue.Empty, QueueClosedError):
            return default

    def drain(self, max_items: int | None = None) -> list[T]:
        """Remove and return what is buffered now (at most ``max_items``), without waiting (``drainTo``)."""
        with self._cond:
            n = len(self._buffer) if max_items is None else min(max_items, len(self._buffer))
            out = [self._buffer.popleft() for _ in range(n)]
            if out:
                self._cond.notify_all()
            return out

    def items(self) -> list[T]:
        """A copy of what is buffered now, not removed (``getItems``)."""
        with self._cond:
            return list(self._buffer)

    def size(self) -> int:
        """Items buffered now."""
        with self._cond:
            return len(self._buffer)

    def __len__(self) -> int:
        return self.size()

    def __iter__(self) -> Iterator[T]:
        """Yield items as they arrive until :meth:`close` (items buffered before it still come)."""
        while True:
            try:
                yield self.get()
            except QueueClosedError:
                return

    def close(self) -> None:
        """Stop accepting items (a waiting queue thread gets QueueClosedError) and end iterators once the
        buffer is drained. Close the queue first so it stops delivering."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed
