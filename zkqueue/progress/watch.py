"""Append notifications of a :class:`~zkqueue.progress.log.JobLog`: one kazoo ``DataWatch`` on the newest bucket
(every append multi sets its count), moved to the next bucket when that one fills. No listing of entries."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kazoo.recipe.watchers import DataWatch

from zkqueue.errors import LogFormatError

if TYPE_CHECKING:
    from zkqueue.progress.log import JobLog

log = logging.getLogger("zkqueue.progress.watch")


class AppendWatch:
    """Calls every registered callback after each change of the newest bucket."""

    def __init__(self, job_log: JobLog) -> None:
        self._log = job_log
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._current: int | None = None
        self._errors = 0

    def add(self, callback: Callable[[], None]) -> Callable[[], None]:
        with self._lock:
            self._callbacks.append(callback)
            start = self._current is None
        if start:
            self._watch_bucket(self._log._newest_bucket().number)

        def remove() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)
                if not self._callbacks:
                    self._current = None  # the DataWatch stops at its next event

        return remove

    def _watch_bucket(self, b: int) -> None:
        with self._lock:
            self._current = b
        DataWatch(self._log.client, self._log._bucket_path(b), functools.partial(self._fired, b))

    def _fired(self, b: int, data: bytes | None, stat: Any, event: Any = None) -> bool:
        with self._lock:
            if self._current != b:
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
        from zkqueue.progress.log import _parse_count  # noqa: PLC0415

        try:
            count, _ = _parse_count(data, self._log._bucket_path(b))
        except LogFormatError:
            log.error("bucket %d of %s holds %r: appends there are not watched", b, self._log.path, data[:40])
            return True
        if count >= self._log.bucket_size:
            self._watch_bucket(b + 1)
            return False
        return True
