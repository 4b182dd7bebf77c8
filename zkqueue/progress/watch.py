"""Append notifications of a :class:`~zkqueue.progress.log.JobLog`: one kazoo ``DataWatch`` on the newest bucket
(every append multi sets its count), moved to the next bucket when that one fills. No listing of entries."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from kazoo.recipe.watchers import DataWatch

from zkqueue.errors import LogFormatError

log = logging.getLogger("zkqueue.progress.watch")


class WatchedLog(Protocol):
    """What an :class:`AppendWatch` uses of its :class:`~zkqueue.progress.log.JobLog`."""

    client: Any
    path: str
    bucket_size: int

    def newest_bucket_number(self) -> int: ...

    def bucket_path(self, bucket: int) -> str: ...

    def bucket_count(self, data: bytes, bucket: int) -> int: ...


class AppendWatch:
    """Calls every registered callback after each change of the newest bucket.

    At most one ``DataWatch`` is live at a time (``_generation`` names it; an older one stops at its next
    event). When the last callback is removed the live one stops at its next event, unless a callback is added
    before that: then it is kept, not doubled."""

    def __init__(self, job_log: WatchedLog) -> None:
        self._log = job_log
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._generation = 0
        self._live = False  # a DataWatch of the current generation is registered and has not stopped
        self._errors = 0

    def add(self, callback: Callable[[], None]) -> Callable[[], None]:
        with self._lock:
            self._callbacks.append(callback)
            start = not self._live
            self._live = True
        if start:
            try:
                self._watch_bucket(self._log.newest_bucket_number())
            except BaseException:
                with self._lock:
                    self._live = False
                    if callback in self._callbacks:
                        self._callbacks.remove(callback)
                raise

        def remove() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)
                # with no callbacks left the live DataWatch stops at its next event (_fired)

        return remove

    def _watch_bucket(self, b: int) -> None:
        with self._lock:
            self._generation += 1
            generation = self._generation
        DataWatch(self._log.client, self._log.bucket_path(b), functools.partial(self._fired, generation, b))

    def _fired(self, generation: int, b: int, data: bytes | None, stat: Any, event: Any = None) -> bool:
        with self._lock:
            if generation != self._generation:
                return False  # replaced by a newer watch
            if not self._callbacks:
                self._live = False
                self._generation += 1  # an add() from now on starts a new watch
                return False
            callbacks = list(self._callbacks)
        for cb in callbacks:
            try:
                cb()
            except Exception:  # a callback's bug must not stop the watch for the others
                self._errors += 1
                log.exception("append callback of %s failed", self._log.path)
        if data is None:
            return True  # not created yet: the watch fires when it is
        try:
            count = self._log.bucket_count(data, b)
        except LogFormatError:
            log.error("bucket %d of %s holds %r: appends there are not watched", b, self._log.path, data[:40])
            return True
        if count >= self._log.bucket_size:
            self._watch_bucket(b + 1)
            return False
        return True
