"""Services shared by every job queue (and flow) on one client: one thread runs the periodic clean-ups of all of
them (:class:`Reaper` registers there), however many queues the client serves, so a flow of many steps adds no
reaper thread per step. The thread starts with the first clean-up registered and ends with the last one."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import weakref
from typing import Any, Callable

log = logging.getLogger("zkqueue.jobs.services")

_lock = threading.Lock()
_by_client: weakref.WeakKeyDictionary[Any, Services] = weakref.WeakKeyDictionary()


class Services:
    """The shared services of one client (:meth:`of`)."""

    def __init__(self, name: str = "zkqueue-reaper") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, int]] = []  # (when, seq, chore id)
        self._chores: dict[int, tuple[Callable[[], None], float]] = {}
        self._ids = itertools.count()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    @classmethod
    def of(cls, client: Any) -> Services:
        """The services of ``client`` (made on first use)."""
        with _lock:
            services = _by_client.get(client)
            if services is None:
                services = _by_client[client] = cls()
            return services

    @property
    def threads(self) -> int:
        """Threads running for these services now (0 or 1)."""
        with self._cond:
            return 1 if self._thread is not None and self._thread.is_alive() else 0

    @property
    def chores(self) -> int:
        """Periodic clean-ups registered now."""
        with self._cond:
            return len(self._chores)

    def every(self, interval: float, chore: Callable[[], None]) -> Callable[[], None]:
        """Run ``chore()`` every ``interval`` seconds (first after one interval) on the shared thread until the
        returned function is called (it waits for a run under way). ``chore`` must not raise (it is logged)."""
        with self._cond:
            chore_id = next(self._ids)
            self._chores[chore_id] = (chore, float(interval))
            heapq.heappush(self._due, (time.monotonic() + interval, next(self._seq), chore_id))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

        def cancel() -> None:
            with self._cond:
                self._chores.pop(chore_id, None)
                while self._running == chore_id:
                    self._cond.wait(1.0)
                self._cond.notify_all()

        return cancel

    _running: int | None = None

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
            except Exception:  # never dies: tried again next interval
                log.warning("a periodic clean-up failed (tried again in %.0fs)", interval, exc_info=True)
            finally:
                with self._cond:
                    self._running = None
                    if chore_id in self._chores:
                        heapq.heappush(self._due, (time.monotonic() + interval, next(self._seq), chore_id))
                    self._cond.notify_all()


__all__ = ["Services"]
