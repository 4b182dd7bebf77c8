"""Threads that every queue on one client shares (:meth:`ClientServices.of`), so that a process serving many queues
(a flow of many steps, many job queues) does not run a thread per queue for work that is mostly waiting:

- **chores** (``zkqueue-chores``): periodic upkeep, run one at a time on one thread: the lease keeper of every
  lock-safe queue (:mod:`~zkqueue.engine.locksafe`), the reaper of every job queue and flow
  (:mod:`zkqueue.jobs.reaper`). It starts with the first chore registered and ends with the last one cancelled.
- **events** (``zkqueue-events``): the connection states queues pass to their consumers, off kazoo's connection
  thread, in order. It starts with the first queue that uses it and ends when the last one lets it go.

A chore must be short and must not raise (what it raises is logged; it runs again after its interval). A chore that
waits for ZooKeeper (a lease downgrade during an outage) holds the others back meanwhile: they are upkeep that can
wait as long.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import weakref
from typing import Any, Callable

from zkqueue.listeners import Dispatcher

log = logging.getLogger("zkqueue.engine.shared")

_lock = threading.Lock()
_by_client: weakref.WeakKeyDictionary[Any, ClientServices] = weakref.WeakKeyDictionary()

#: Thread names.
CHORES_THREAD = "zkqueue-chores"
EVENTS_THREAD = "zkqueue-events"


class ClientServices:
    """The shared threads of one client (:meth:`of`)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, int]] = []  # (when, seq, chore id)
        self._chores: dict[int, tuple[Callable[[], None], float]] = {}
        self._ids = itertools.count()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._running: int | None = None
        self._events: Dispatcher | None = None
        self._event_users = 0

    @classmethod
    def of(cls, client: Any) -> ClientServices:
        """The shared services of ``client`` (made on first use)."""
        with _lock:
            services = _by_client.get(client)
            if services is None:
                services = _by_client[client] = cls()
            return services

    @property
    def threads(self) -> int:
        """Threads running for these services now (0, 1 or 2)."""
        with self._cond:
            chores = self._thread is not None and self._thread.is_alive()
            return int(chores) + int(self._events is not None)

    @property
    def chores(self) -> int:
        """Periodic chores registered now."""
        with self._cond:
            return len(self._chores)

    # ------------------------------------------------------------------------------------------ chores
    def every(self, interval: float, chore: Callable[[], None]) -> Callable[[], None]:
        """Run ``chore()`` every ``interval`` seconds (first after one interval) on the shared thread until the
        returned function is called (it waits for a run under way, unless called from the chore itself)."""
        with self._cond:
            chore_id = next(self._ids)
            self._chores[chore_id] = (chore, float(interval))
            heapq.heappush(self._due, (time.monotonic() + interval, next(self._seq), chore_id))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=CHORES_THREAD, daemon=True)
                self._thread.start()
            self._cond.notify_all()

        def cancel() -> None:
            with self._cond:
                self._chores.pop(chore_id, None)
                if threading.current_thread() is not self._thread:
                    while self._running == chore_id:
                        self._cond.wait(1.0)
                self._cond.notify_all()

        return cancel

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._due and self._due[0][2] not in self._chores:
                        heapq.heappop(self._due)  # cancelled
                    if not self._chores:
                        self._thread = None
                        return
                    wait = self._due[0][0] - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                _when, _seq, chore_id = heapq.heappop(self._due)
                chore, interval = self._chores[chore_id]
                self._running = chore_id
            try:
                chore()
            except Exception:  # never dies: the chore runs again after its interval
                log.warning("a periodic chore failed (it runs again in %gs)", interval, exc_info=True)
            finally:
                with self._cond:
                    self._running = None
                    if chore_id in self._chores:
                        heapq.heappush(self._due, (time.monotonic() + interval, next(self._seq), chore_id))
                    self._cond.notify_all()

    # ------------------------------------------------------------------------------------------ events
    def take_events(self) -> Dispatcher:
        """The shared event dispatcher (started on first use); give it back with :meth:`release_events`."""
        with self._cond:
            if self._events is None:
                self._events = Dispatcher(EVENTS_THREAD)
                self._events.start()
            self._event_users += 1
            return self._events

    def release_events(self) -> None:
        """One user of the event dispatcher is done with it; the last one stops it (events already submitted
        are delivered first)."""
        with self._cond:
            self._event_users -= 1
            if self._event_users > 0 or self._events is None:
                return
            events, self._events = self._events, None
        events.stop()


__all__ = ["CHORES_THREAD", "EVENTS_THREAD", "ClientServices"]
