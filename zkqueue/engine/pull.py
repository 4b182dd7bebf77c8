"""Pull mode: a lock-safe queue without a consumer hands out claimed nodes on request (scoped takes).

:meth:`Puller.claim` blocks until at least one node is due (in the queue's order and due times) and claims up to
``max_nodes`` of them with the same leases and claim hook as the run loop (as many as the hook's ``admit`` lets
through: it may wait, within the timeout, e.g. at a rate limit); the caller completes each node later with
:meth:`Puller.complete` (or gives it back). Item leases are used throughout: the caller's pace is unknown and
a scope may hold its nodes for long. Large items come back with their blob read (one call's worth at a time).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from zkqueue.engine.children import ChildrenCache
from zkqueue.engine.completion import Outcome
from zkqueue.engine.context import QueueContext
from zkqueue.engine.delivery import read_large
from zkqueue.engine.locksafe import LeaseTaker
from zkqueue.engine.run_loop import LOCKED_RETRY_SECONDS
from zkqueue.formats import naming

log = logging.getLogger("zkqueue.engine.pull")


class Puller:
    """Claims due nodes of one queue on request."""

    def __init__(
        self,
        ctx: QueueContext,
        cache: ChildrenCache,
        taker: LeaseTaker,
        *,
        sort_children: Callable[[list[str]], list[str]],
        get_delay: Callable[[str], float],
        serializer: Any = None,
    ) -> None:
        self._ctx = ctx
        self._serializer = serializer
        self._cache = cache
        self._taker = taker
        self._sort_children = sort_children
        self._get_delay = get_delay
        self._lock = threading.Lock()
        self._held: set[str] = set()  # names claimed and not completed yet
        self._skip: set[str] = set()  # names finished for us (gone, quarantined) that a listing may still show

    def claim(self, max_nodes: int, timeout: float | None) -> list[Outcome]:
        """Up to ``max_nodes`` claimed nodes, at least one; [] if none was due within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._lock:
            version = -1
            while self._ctx.is_running():
                self._taker.retry_deferred()
                self._skip.difference_update(self._taker.take_released())
                if self._cache.stale:
                    self._cache.request_sync()
                snap = self._cache.snapshot
                version = snap.version
                present = [n for n in snap.children if naming.is_item_name(n)]
                self._skip.intersection_update(present)
                due, next_due = self._due([n for n in present if n not in self._held and n not in self._skip])
                locked = False
                while due:
                    batch = due[:max_nodes]
                    left = None if deadline is None else deadline - time.monotonic()
                    handled, batch_locked, outcomes, tried = self._taker.claim(batch, left)
                    if not tried:  # the claim hook admitted none (closing, or the timeout passed at its limit)
                        locked = True  # (a hook that admits none for another reason: look again soon)
                        break
                    due = due[tried:]
                    locked = locked or batch_locked
                    taken = {o.name for o in outcomes}
                    self._skip.update(n for n in handled if n not in taken)
                    outcomes = self._read_large(outcomes)
                    if outcomes:
                        self._held.update(o.name for o in outcomes)
                        return outcomes
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return []
                wait = None if deadline is None else deadline - now
                if locked:
                    wait = LOCKED_RETRY_SECONDS if wait is None else min(wait, LOCKED_RETRY_SECONDS)
                if next_due is not None:
                    wait = max(0.0, next_due - now) if wait is None else min(wait, max(0.0, next_due - now))
                self._cache.wait_for_change(version, wait)
        return []

    def _read_large(self, outcomes: list[Outcome]) -> list[Outcome]:
        """Read the blobs of large items; those that cannot be delivered are finished (quarantined or released)."""
        unusable = [o for o in outcomes if o.unread and not read_large(self._ctx, self._serializer, o)]
        if not unusable:
            return outcomes
        self._taker.completer.complete(unusable)
        return [o for o in outcomes if o not in unusable]

    def _due(self, names: list[str]) -> tuple[list[str], float | None]:
        """The due names in consumption order, and when the first one not due yet will be."""
        due: list[str] = []
        next_due: float | None = None
        for name in self._sort_children(names):
            delay = self._get_delay(name)
            if delay > 0:
                at = time.monotonic() + delay
                next_due = at if next_due is None else min(next_due, at)
                continue
            due.append(name)
        return due, next_due

    def complete(self, outcomes: list[Outcome]) -> None:
        """Finish claimed nodes: each per its ``completion`` (or ``error`` and the error mode, as delivered ones)."""
        try:
            self._taker.completer.complete(outcomes)
        finally:
            self._held.difference_update(o.name for o in outcomes)

    def forget(self, outcomes: list[Outcome]) -> None:
        """Drop claimed nodes that the caller finished in its own multi (see :meth:`Completer.forget`)."""
        try:
            self._taker.completer.forget([o.held for o in outcomes if o.held is not None])
        finally:
            self._held.difference_update(o.name for o in outcomes)

    def release(self, outcomes: list[Outcome]) -> None:
        """Give claimed nodes back untouched."""
        try:
            self._taker.completer.release([o.held for o in outcomes if o.held is not None])
        finally:
            self._held.difference_update(o.name for o in outcomes)
