"""Step ends committed off the handler's thread, many per multi: what frees a worker's slot as soon as its handler
returns, while the hand-off (a fenced multi) is still to commit.

A worker hands each decided end to :meth:`EndCommitter.put` and its slot is free; ``threads`` committer threads
each take every end queued when they start and commit them in one call of ``commit(batch)`` (flows:
:func:`zkqueue.flows.ends.settle_many` through :class:`~zkqueue.flows.worker.FlowWorker`; canvases:
:func:`zkqueue.flows.canvas_ends.commit_many`), so the more ends come while one batch commits, the larger the next.
:meth:`EndCommitter.close` commits what is left, then ends the threads. ``commit`` must never leave a job without an
outcome: what it cannot commit it gives back; what it raises is logged loudly (a bug of ours) and the thread goes on.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Generic, TypeVar

log = logging.getLogger("zkqueue.flows.committer")

T = TypeVar("T")


class EndCommitter(Generic[T]):
    """The threads that commit a worker's ends (see the module docs). ``threads`` batches are under way at once;
    ``batches`` counts the calls of ``commit`` and ``largest`` is the largest batch."""

    def __init__(self, commit: Callable[[list[T]], None], name: str, threads: int = 1) -> None:
        self._commit = commit
        self._cond = threading.Condition()
        self._pending: list[T] = []
        self._busy = 0
        self._closing = False
        self.batches = 0
        self.largest = 0
        self._threads = [threading.Thread(target=self._loop, daemon=True, name=f"{name}-ends-{i}")
                         for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def put(self, end: T) -> None:
        """Queue ``end`` for the next batch (never blocks on ZooKeeper); after :meth:`close`, commit it here."""
        with self._cond:
            if not self._closing:
                self._pending.append(end)
                self._cond.notify_all()
                return
        log.warning("an end came after its committer closed: committed on the calling thread")
        self._commit([end])

    def idle(self) -> bool:
        """Whether nothing is queued or being committed."""
        with self._cond:
            return not self._pending and not self._busy

    def close(self) -> None:
        """Commit what is queued, then end the threads. Idempotent."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
                self._busy += 1
            try:
                self._commit(batch)
            except BaseException:  # a bug of ours: logged loudly; commit() gave the jobs back
                log.critical("committing %d end(s) failed", len(batch), exc_info=True)
            finally:
                with self._cond:
                    self._busy -= 1
                    self.batches += 1
                    self.largest = max(self.largest, len(batch))
                    self._cond.notify_all()


__all__ = ["EndCommitter"]
