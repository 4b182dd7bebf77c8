"""Waking a connection's ``drain_events`` the moment any of its queues changes or its prefetch window opens.

A kombu connection consumes several queues at once (a Celery worker: its task queues and its remote-control
queue); ``drain_events`` must deliver a message published to ANY of them within milliseconds, and must look
again as soon as an ack frees a prefetch slot (a channel at its prefetch limit takes nothing until then).

:class:`Wakeup` is one condition per connection with a generation counter. It is bumped by

- a change of a consumed queue: one :class:`_Watch` thread per queue waits on that engine queue's children cache
  (the cache its claims read, fed by the child watch ZooKeeper fires), only while ``drain_events`` waits; it then
  wakes the condition. The waits are local: the cache's own listing answers them, no request is sent per wait;
- an ack, reject or give-back on any channel of the connection (:meth:`Wakeup.wake`, called by the QoS);
- a new consumer.

Under an event loop (Celery's worker with its non-blocking loop, see ``Transport.register_with_event_loop``) the
connection's claims run on a thread of their own that waits on this condition (:mod:`.prefetch`); it tells the
loop that messages are ready through a :class:`LoopSignal`, a pipe the loop watches.

``drain_events`` reads the generation and every queue's cache version BEFORE it claims, so a change that lands
between its claim and its wait is never missed: the wait returns at once.

The waits use the engine queue's seam ``DistributedQueue.change_version()`` / ``wait_for_change()``; a queue
nothing watches yet (before its first claim) is looked at again every :data:`FALLBACK_POLL` seconds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

log = logging.getLogger("zkqueue.celery.wakeup")

#: Most seconds a watch thread waits on a cache before it looks whether it is still wanted.
WATCH_CHUNK = 0.5
#: Seconds between wakes of a queue whose children nothing watches yet (before its first claim).
FALLBACK_POLL = 0.05


def version_of(queue: Any) -> int | None:
    """The listing version of engine queue ``queue`` now (read it BEFORE claiming, then wait for a change from it);
    None when nothing watches its children yet."""
    return queue.change_version()


class _Watch:
    """One queue's watch thread: while armed, waits on the queue's cache and wakes the connection on a change."""

    def __init__(self, wakeup: Wakeup, name: str) -> None:
        self._wakeup = wakeup
        self.name = name
        self.request: tuple[Any, int | None, float] | None = None  # (engine queue, version, deadline)
        self._thread = threading.Thread(target=self._run, name=f"zkqueue-celery-watch-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        cond = self._wakeup.cond
        while True:
            with cond:
                while self.request is None and not self._wakeup.closed:
                    cond.wait()
                if self._wakeup.closed:
                    return
                request = self.request
            assert request is not None
            queue, version, deadline = request
            left = deadline - time.monotonic()
            changed = left <= 0
            if not changed:
                changed = self._wait(queue, version, min(left, WATCH_CHUNK))
            with cond:
                if self.request is request and (changed or time.monotonic() >= deadline):
                    self.request = None
            if changed:
                self._wakeup.wake()

    @staticmethod
    def _wait(queue: Any, version: int | None, timeout: float) -> bool:
        """Whether ``queue`` changed from ``version`` within ``timeout`` seconds."""
        if version is None:
            time.sleep(min(timeout, FALLBACK_POLL))
            return True  # nothing watches it yet: wake the drain, whose claim starts the watch
        try:
            now = queue.wait_for_change(version, timeout)
        except Exception:  # a closed or broken queue: let the drain look (and see the error there)
            log.debug("waiting on %s failed", getattr(queue, "queue_path", queue), exc_info=True)
            time.sleep(min(timeout, FALLBACK_POLL))
            return True
        return now != version


class LoopSignal:
    """A pipe an event loop watches: readable once :meth:`signal` was called, until :meth:`consume` reads it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        self._pipe: tuple[int, int] | None = (read, write)
        self._signalled = False  # a byte is in the pipe and not read yet

    def fileno(self) -> int:
        assert self._pipe is not None, "the signal is closed"
        return self._pipe[0]

    def signal(self) -> None:
        with self._lock:
            if self._pipe is None or self._signalled:
                return
            self._signalled = True
            try:
                os.write(self._pipe[1], b"\0")
            except OSError:  # full (then it is readable anyway) or closed
                pass

    def consume(self) -> None:
        """Read what :meth:`signal` wrote (before looking, so a signal after this is not lost)."""
        with self._lock:
            if self._pipe is None:
                return
            self._signalled = False
            try:
                while os.read(self._pipe[0], 512):
                    pass
            except (BlockingIOError, OSError):
                pass

    def close(self) -> None:
        with self._lock:
            pipe, self._pipe = self._pipe, None
        for fd in pipe or ():
            try:
                os.close(fd)
            except OSError:
                pass


class Wakeup:
    """The wake-up condition of one kombu connection (see the module docstring)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.generation = 0
        self.closed = False
        self._watches: dict[str, _Watch] = {}

    def wake(self) -> None:
        """Something changed: a waiting ``drain_events`` (or the claiming thread under an event loop) looks again
        now."""
        with self.cond:
            self.generation += 1
            self.cond.notify_all()

    def wait(self, since: int, queues: dict[str, tuple[Any, int | None]], timeout: float) -> bool:
        """Wait until :meth:`wake` was called since generation ``since``, one of ``queues`` (name -> engine queue,
        the cache version read before the last claim) changed, or ``timeout`` seconds passed; whether woken."""
        deadline = time.monotonic() + timeout
        with self.cond:
            if self.closed:
                return False
            for name, (queue, version) in queues.items():
                watch = self._watches.get(name)
                if watch is None:
                    watch = self._watches[name] = _Watch(self, name)
                watch.request = (queue, version, deadline)
            self.cond.notify_all()  # the watch threads start waiting
            try:
                while self.generation == since and not self.closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.cond.wait(left)
                return self.generation != since
            finally:
                for name in queues:
                    self._watches[name].request = None

    def close(self) -> None:
        """Stop the watch threads (each within :data:`WATCH_CHUNK` seconds)."""
        with self.cond:
            self.closed = True
            self._watches.clear()
            self.cond.notify_all()
