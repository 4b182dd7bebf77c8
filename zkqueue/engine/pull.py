"""Pull mode: a lock-safe queue without a consumer hands out claimed nodes on request (scoped takes).

:meth:`Puller.claim` blocks until at least one node is due (in the queue's order and due times) and claims up to
``max_nodes`` of them with the same leases and claim hook as the run loop (as many as the hook's ``admit`` lets
through: it may wait, within the timeout, e.g. at a rate limit); the caller completes each node later with
:meth:`Puller.complete` (or gives it back). Item leases by default: the caller's pace is unknown and a scope
may hold its nodes for long; a caller that ends its nodes soon asks for block leases. Large items come back with
their blob read (one call's worth at a time).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable

from zkqueue.engine import blobs
from zkqueue.engine.children import ChildrenCache, Snapshot
from zkqueue.engine.commit import delete_op
from zkqueue.engine.completion import Outcome
from zkqueue.engine.context import QueueContext
from zkqueue.engine.delivery import read_large
from zkqueue.engine.leases import LeaseKind, Leases
from zkqueue.engine.locksafe import LeaseTaker
from zkqueue.engine.ordering import DueScan, KeptOrder
from zkqueue.engine.run_loop import LOCKED_RETRY_SECONDS, share_first
from zkqueue.errors import QueueStateError
from zkqueue.formats import naming

log = logging.getLogger("zkqueue.engine.pull")

#: Seconds a finished name is skipped while listings still show it (see :meth:`Puller._forget_skips`).
SKIP_SECONDS = 2.0
#: A claim that finds enough due names in the listing it has asks for a fresh one (after a change) only once that
#: listing is this many seconds old: the names it still holds are claimable, and a listing costs as much as the
#: queue is long (a queue that changes with every job would otherwise be listed again for every claim).
RELIST_AFTER = 0.5


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
        order_key: Callable[[str], Any] | None = None,
        serializer: Any = None,
    ) -> None:
        self._ctx = ctx
        self._serializer = serializer
        self._cache = cache
        self._taker = taker
        self._sort_children = sort_children
        self._get_delay = get_delay
        self._kept = None if order_key is None else KeptOrder(order_key, get_delay)
        self._lock = threading.Lock()
        self._held: dict[str, Outcome] = {}  # claimed and not ended yet, by name
        #: Names finished for us (gone, quarantined, or being completed) that a listing may still show, with the
        #: time they were finished: see :meth:`_forget_skips`.
        self._skip: dict[str, float] = {}
        self._skip_lock = threading.Lock()  # completions add to it from other threads
        self._listed: tuple[Snapshot, frozenset[str]] | None = None  # the item names of the last listing looked at

    @property
    def queue_path(self) -> str:
        return self._ctx.queue_path

    def claim(self, max_nodes: int, timeout: float | None, *, block_leases: bool = False) -> list[Outcome]:
        """Up to ``max_nodes`` claimed nodes, at least one; [] if none was due within ``timeout`` seconds. With
        ``block_leases`` they are held under block leases (see :meth:`DistributedQueue.claim_nodes`)."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._lock:
            version = -1
            while self._ctx.is_running():
                self._taker.retry_deferred()
                released = self._taker.take_released()
                with self._skip_lock:
                    for name in released:
                        self._skip.pop(name, None)
                snap = self._cache.snapshot
                version = snap.version
                present = self._items_of(snap)
                recheck = self._forget_skips(present)
                due = self._due(present)
                # nothing due: no listing of the queue's other consumers (an idle pull sends no request at all; it
                # waits for the watch)
                shared = self._taker.share() if due.any_due() else None
                locked = False
                relisted = False
                while batch := self._next(due, max_nodes, shared):
                    if not relisted and self._cache.stale and (
                            len(batch) < max_nodes or time.monotonic() - snap.at > RELIST_AFTER):
                        relisted = True  # a listing costs as much as the queue is long: only when it helps
                        self._cache.request_sync()
                    left = None if deadline is None else deadline - time.monotonic()
                    handled, batch_locked, outcomes, tried = self._taker.claim(batch, left, blocks=block_leases)
                    if not tried:  # the claim hook admitted none (closing, or the timeout passed at its limit)
                        locked = True  # (a hook that admits none for another reason: look again soon)
                        break
                    due.give_back(batch[tried:])
                    locked = locked or batch_locked
                    taken = {o.name for o in outcomes}
                    self._skip_names(n for n in handled if n not in taken)
                    outcomes = self._read_large(outcomes)
                    if outcomes:
                        self._held.update((o.name, o) for o in outcomes)
                        return outcomes
                if self._cache.stale and not relisted:
                    self._cache.request_sync()  # nothing claimable in this listing: look at a fresh one
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return []
                wait = None if deadline is None else deadline - now
                if locked:
                    wait = LOCKED_RETRY_SECONDS if wait is None else min(wait, LOCKED_RETRY_SECONDS)
                if recheck is not None:
                    wait = recheck if wait is None else min(wait, recheck)
                if due.next_due is not None:
                    to_due = max(0.0, due.next_due - now)
                    wait = to_due if wait is None else min(wait, to_due)
                self._cache.wait_for_change(version, wait)
        return []

    def _items_of(self, snap: Snapshot) -> frozenset[str]:
        """The item names of listing ``snap``. Kept per listing: the claims between two listings (a worker claims
        many times per listing) reuse the same set, and :class:`~zkqueue.engine.ordering.KeptOrder` sees at once
        that nothing changed, instead of filtering and comparing the whole listing on every claim."""
        listed = self._listed
        if listed is not None and listed[0] is snap:
            return listed[1]
        present = frozenset(n for n in snap.children if naming.is_item_name(n))
        self._listed = (snap, present)
        return present

    @staticmethod
    def _next(due: DueScan, max_nodes: int, shared: tuple[int, int] | None) -> list[str]:
        """The next names to claim. With other live consumers of the queue (``shared``: this one's rank and how
        many), this consumer's own share of the blocks in a window of the next due names comes first (as the run
        loop does, :func:`~zkqueue.engine.run_loop.share_first`), so pulls of several processes do not race for
        the same head names: a lost race costs a failed claim (and, under a rate limit, budget taken for
        nothing)."""
        if shared is None:
            return due.take(max_nodes)
        window = due.take(max_nodes + naming.BLOCK_SPAN * shared[1])
        ordered, _own = share_first(window, *shared)
        due.give_back(ordered[max_nodes:])
        return ordered[:max_nodes]

    def _read_large(self, outcomes: list[Outcome]) -> list[Outcome]:
        """Read the blobs of large items; those that cannot be delivered are finished (quarantined or released)."""
        unusable = [o for o in outcomes if o.unread and not read_large(self._ctx, self._serializer, o)]
        if not unusable:
            return outcomes
        self._taker.completer.complete(unusable)
        return [o for o in outcomes if o not in unusable]

    def _excluded(self, name: str) -> bool:
        return name in self._held or name in self._skip

    def _due(self, present: frozenset[str]) -> DueScan:
        """The due names of ``present`` in consumption order (none held or finished by us), and in how many
        seconds the first one not due yet will be."""
        if self._kept is not None:
            return self._kept.due(present, self._excluded)
        due: list[str] = []
        wait: float | None = None
        for name in self._sort_children([n for n in present if not self._excluded(n)]):
            delay = self._get_delay(name)
            if delay > 0:
                wait = delay if wait is None else min(wait, delay)
                continue
            due.append(name)
        return DueScan(due, wait)

    def complete(self, outcomes: list[Outcome]) -> None:
        """Finish claimed nodes: each per its ``completion`` (or ``error`` and the error mode, as delivered ones)."""
        try:
            self._taker.completer.complete(outcomes)
        finally:
            self._skip_names(o.name for o in outcomes if o.completion is None or o.completion.action != "release")
            self._ended(outcomes)

    def forget(self, outcomes: list[Outcome]) -> None:
        """Drop claimed nodes that the caller finished in its own multi (see :meth:`Completer.forget`)."""
        try:
            self._taker.completer.forget([o.held for o in outcomes if o.held is not None])
        finally:
            self._skip_names(o.name for o in outcomes)
            self._ended(outcomes)

    def _skip_names(self, names: Iterable[str]) -> None:
        """Names whose nodes are gone (or going: a completion the completer retries stays ours) are not claimed
        again while the children cache still lists them: a claim that meets them fails, and the claim's multi
        is split group by group, one round trip per name. See :meth:`_forget_skips`."""
        now = time.monotonic()
        with self._skip_lock:
            self._skip.update((name, now) for name in names)

    def _forget_skips(self, present: frozenset[str]) -> float | None:
        """Skip a finished name while it is listed and its end is recent: the listing may not show the end yet
        (the watch that brings the next listing is on its way). A name still listed :data:`SKIP_SECONDS` after its
        end was not deleted (its completion was refused, e.g. the session had expired), or the listing is late: it
        can be claimed again (a claim of a node that is gone costs one failed try). Returns in how many seconds a
        skipped name should be looked at again (None: none is skipped)."""
        now = time.monotonic()
        recheck: float | None = None
        with self._skip_lock:
            kept: dict[str, float] = {}
            for name, at in self._skip.items():
                left = SKIP_SECONDS - (now - at)
                if name in present and left > 0:
                    kept[name] = at
                    recheck = left if recheck is None else min(recheck, left)
            self._skip = kept
        return recheck

    def commit_held(self, outcomes: list[Outcome], ops_of: list[list[Any]], checks: list[Any] | None = None
                    ) -> list[Any]:
        """Ops on claimed nodes that stay held, fenced by their leases (see :meth:`LeaseTaker.commit_fenced`)."""
        return self._taker.commit_fenced(outcomes, ops_of, checks)

    def ack_ops(self, outcome: Outcome, extra_ops: list[Any]) -> tuple[list[Any], int]:
        """The fenced ops of ``outcome``'s ack with ``extra_ops`` and the index of the first extra op (see
        :meth:`HeldNode.ack_ops <zkqueue.engine.held.HeldNode.ack_ops>`). The node's lease is kept as it is (a
        block lease is not downgraded) from the first call until the node is forgotten, released or completed, so
        the ops stay those of its lease."""
        held = outcome.held
        if held is None:
            raise QueueStateError(f"node {outcome.name} is not held")
        if outcome.ack_busy is None:
            outcome.ack_busy = self._taker.leases.begin([held])
        lease = held.lease
        if lease.kind is LeaseKind.ITEM and lease.fence is None:
            raise QueueStateError(f"node {outcome.name} is not held under a fenced lease")
        # As the engine's own completions: an item lease is given up in the same ops (its fence child first); a
        # block lease by its lock's delete once its last member is finished (see block_tail() and forget()).
        prefix = Leases.prefix_for(lease.session_fence)
        # A large item's blob goes with its reference, after the caller's ops (the index returned stays theirs).
        blob = blobs.removal_ops(outcome.blob) if outcome.blob is not None else []
        ops = prefix + self._taker.leases.finish_group(
            held, [delete_op(held.path, outcome.version), *extra_ops, *blob])
        return ops, len(prefix) + (2 if lease.kind is LeaseKind.ITEM else 1)

    def block_tail(self, outcomes: list[Outcome]) -> tuple[list[Any], list[Any]]:
        """The deletes of the block locks that ``outcomes`` would empty if all of them were acked now, and their
        leases (see :func:`zkqueue.engine.held.block_tail`). Only outcomes whose :meth:`ack_ops` were built count:
        their leases stay as they are meanwhile."""
        return self._taker.leases.releases_if_finished(
            o.held for o in outcomes if o.held is not None and o.ack_busy is not None)

    def release(self, outcomes: list[Outcome]) -> None:
        """Give claimed nodes back untouched."""
        try:
            self._taker.completer.release([o.held for o in outcomes if o.held is not None])
        finally:
            self._ended(outcomes)

    def _ended(self, outcomes: Iterable[Outcome]) -> None:
        for o in outcomes:
            self._held.pop(o.name, None)
            with self._skip_lock:  # (close() may end nodes while their owner does)
                busy, o.ack_busy = o.ack_busy, None
            if busy is not None:
                self._taker.leases.end(busy)

    def close(self) -> None:
        """Give back the nodes still claimed and not ended: their leases would otherwise outlive the queue (until
        the client's session ends), keeping those nodes from every other consumer. Ending one of them afterwards
        finds its lease gone (``settled == "lost"``)."""
        left = list(dict(self._held).values())  # (a copy: other threads may end nodes meanwhile)
        if left:
            log.warning("queue %s closed with %d claimed node(s) not ended; they are given back",
                        self._ctx.queue_path, len(left))
            self.release(left)
