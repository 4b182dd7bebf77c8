"""Put listeners, a listener container, and a small single-thread dispatcher used to get work off
kazoo's threads."""

from __future__ import annotations

import logging
import queue as _queue
import threading
from typing import Any, Callable, Generic, Iterator, Sequence, TypeVar

log = logging.getLogger("zkqueue.listeners")

T = TypeVar("T")
L = TypeVar("L")


class QueuePutListener(Generic[T]):
    """Notified about puts. Override what you need; the defaults do nothing.

    Background puts call these on the queue's put thread; foreground puts on the caller's thread.
    """

    def put_completed(self, item: T) -> None:
        """A single item was stored."""

    def put_multi_completed(self, items: Sequence[T]) -> None:
        """All ``items`` of one put_multi were stored (in one znode)."""

    def put_failed(self, item: Any, exc: BaseException) -> None:
        """A background put failed; ``item`` is the item (or the list of items of a put_multi)."""


class ListenerContainer(Generic[L]):
    """A thread-safe set of listeners, called in insertion order; a raising listener is logged, never fatal."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[L] = []

    def add(self, listener: L) -> None:
        with self._lock:
            if listener not in self._listeners:
                self._listeners.append(listener)

    def remove(self, listener: L) -> None:
        with self._lock:
            try:
                self._listeners.remove(listener)
            except ValueError:
                pass

    def clear(self) -> None:
        with self._lock:
            self._listeners.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._listeners)

    def __iter__(self) -> Iterator[L]:
        with self._lock:
            return iter(list(self._listeners))

    def for_each(self, fn: Callable[[L], Any]) -> None:
        """Call ``fn(listener)`` for every listener; exceptions are logged and swallowed."""
        for listener in self:
            try:
                fn(listener)
            except BaseException:
                log.exception("listener %r raised", listener)

    def notify(self, method: str, *args: Any) -> None:
        """Call ``listener.<method>(*args)`` on every listener that has it (duck-typed listeners may
        implement only some methods); exceptions are logged and swallowed."""
        for listener in self:
            fn = getattr(listener, method, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except BaseException:  # a listener must never take our thread down (not even with SystemExit)
                log.exception("listener %r.%s raised", listener, method)


_STOP = object()


class Dispatcher:
    """One daemon thread running submitted callables in order. Exceptions are logged, never fatal.

    Used to move work off kazoo's connection and completion threads, which must not block.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._q: _queue.SimpleQueue[Any] = _queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False
        self._stopped = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        if not self._stopped:
            self._q.put((fn, args))

    def stop(self, timeout: float | None = 5.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._q.put(_STOP)
        if self._started and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            task = self._q.get()
            if task is _STOP:
                return
            fn, args = task
            try:
                fn(*args)
            except BaseException:
                log.exception("task %r on %s raised", fn, self._name)
