"""Helpers for the queue-family tests (imported as ``familyutil``: pytest puts this folder on sys.path)."""

from __future__ import annotations

import threading

from zkqueue.builder import QueueBuilder
from zkqueue.formats.serializers import JsonSerializer


class Recorder:
    """A thread-safe consumer that records what it got; ``fail_on(item, times)`` makes it raise."""

    def __init__(self) -> None:
        self.items: list = []
        self.attempts: list = []
        self._fail: dict = {}
        self._lock = threading.Lock()
        self.gate: threading.Event | None = None
        self.before: dict = {}

    def fail_on(self, item, times: int = 1) -> "Recorder":
        self._fail[item] = times
        return self

    def __call__(self, item) -> None:
        key = item if not isinstance(item, list) else tuple(item)
        with self._lock:
            self.attempts.append(item)
            hook = self.before.pop(key, None)
        if hook is not None:
            hook()
        with self._lock:
            left = self._fail.get(key, 0)
            if left:
                self._fail[key] = left - 1
                raise RuntimeError(f"planned failure on {item!r}")
            self.items.append(item)

    def __len__(self) -> int:
        with self._lock:
            return len(self.items)


def producer(client, path, kind: str = "queue", serializer=None):
    """A started producer-only queue of ``kind`` with foreground puts (node order = put order)."""
    b = QueueBuilder.builder(client, None, serializer or JsonSerializer(), path).put_in_background(False)
    q = {
        "queue": b.build_queue,
        "priority": lambda: b.build_priority_queue(0),
        "delay": b.build_delay_queue,
        "id": b.build_id_queue,
    }[kind]()
    q.start()
    return q

