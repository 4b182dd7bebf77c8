"""Depths sampled over time, and the put/take rates between samples: what ``zkqueue watch`` and the dashboard's
charts show. One sample costs a few ``exists()`` calls per queue (see :mod:`zkqueue.ops.depth`)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from zkqueue.ops.depth import Depth, depths, rates

log = logging.getLogger("zkqueue.ops.history")


@dataclass
class Sample:
    """One queue at one time: its depth, and its put/take rates since the previous sample."""

    at: float
    depth: Depth
    puts_per_s: float = 0.0
    takes_per_s: float = 0.0


class History:
    """The last ``keep`` seconds of samples of the queues at ``paths`` (or of those ``find()`` returns, looked
    for again at each sample: (path, kind) pairs)."""

    def __init__(self, client: Any, paths: list[str] | None = None, *, keep: float = 600.0,
                 find: Callable[[], list[tuple[str, str]]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._paths = paths or []
        self._find = find
        self._keep = keep
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: dict[str, deque[Sample]] = {}

    def sample(self) -> list[Sample]:
        """Look at every queue now; returns the new samples (flows give one per step too). The samples of a queue
        that is gone (not found any more, or its node deleted) are dropped."""
        targets = self._find() if self._find is not None else [(p, None) for p in self._paths]
        now = self._clock()
        out = []
        for path, kind in targets:
            for depth in depths(self._client, path, kind):
                out.append(self._add(now, depth))
        seen = {s.depth.path for s in out}
        with self._lock:
            for path in [p for p in self._samples if p not in seen]:
                del self._samples[path]
        return out

    def _add(self, now: float, depth: Depth) -> Sample:
        with self._lock:
            series = self._samples.setdefault(depth.path, deque())
            sample = Sample(now, depth)
            if series:
                last = series[-1]
                sample.puts_per_s, sample.takes_per_s = rates(last.depth, depth, now - last.at)
            series.append(sample)
            while series and series[0].at < now - self._keep:
                series.popleft()
            return sample

    def series(self, path: str) -> list[Sample]:
        """The samples kept of the queue at ``path``, oldest first."""
        with self._lock:
            return list(self._samples.get(path, ()))

    def latest(self) -> dict[str, Sample]:
        """The newest sample of every queue seen."""
        with self._lock:
            return {path: s[-1] for path, s in self._samples.items() if s}
