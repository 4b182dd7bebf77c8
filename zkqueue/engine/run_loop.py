"""The run loop (thread ``zkqueue-loop-<path>``): waits for a new children listing, orders it, picks what is
due, and hands it to the taker step by step.

Curator's order and delay semantics come from the queue's hooks (``sort_children``, ``get_delay``): if the head
of the ordered listing is not due, the loop sleeps until it is or the children change; it never polls. Nodes
already handled by this instance are skipped until they leave the listing. When other consumers work on the
same queue (the taker counts races and lock conflicts), each step starts at a random point of what is left, so
consumers spread over the queue instead of racing for its head; lock-safe consumers on block leases first take
their own share of the blocks (see :meth:`~zkqueue.engine.locksafe.LeaseTaker.partition`). A lone consumer stays
strictly FIFO. The loop
never dies: an error is logged, counted, and retried after a backoff.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Callable, Protocol

from zkqueue.engine.backoff import Backoff
from zkqueue.engine.children import ChildrenCache, Snapshot
from zkqueue.engine.context import QueueContext
from zkqueue.engine.steps import StepSizer
from zkqueue.formats import naming

log = logging.getLogger("zkqueue.engine.run_loop")

#: How long a consumer waits before trying again items another consumer held.
LOCKED_RETRY_SECONDS = 0.5
#: Consumers that split the queue list it again after races at most this often: at least this many seconds...
_RELIST_AFTER = 0.1
#: ...and this many per child of the last listing (a listing costs as much as the queue is long).
_RELIST_PER_CHILD = 2e-5


class Taker(Protocol):
    def take(self, names: list[str]) -> tuple[list[str], bool]: ...


class RunLoop:
    """Drives one queue's consumption from its children listing."""

    def __init__(
        self,
        ctx: QueueContext,
        cache: ChildrenCache,
        taker: Taker,
        sizer: StepSizer,
        *,
        sort_children: Callable[[list[str]], list[str]],
        get_delay: Callable[[str], float],
        batch_size: int,
        refresh_on_watch: bool,
        min_items_before_refresh: int | None,
        retry_deferred: Callable[[], bool] = lambda: False,
        take_released: Callable[[], set[str]] = set,
        align_blocks: Callable[[], bool] = lambda: False,
        share: Callable[[], tuple[int, int] | None] = lambda: None,
    ) -> None:
        self._ctx = ctx
        self._cache = cache
        self._taker = taker
        self._sizer = sizer
        self._sort_children = sort_children
        self._get_delay = get_delay
        self._batch_size = batch_size
        self._refresh_on_watch = refresh_on_watch
        self._min_items_before_refresh = min_items_before_refresh
        self._retry_deferred = retry_deferred
        self._take_released = take_released
        self._align_blocks = align_blocks
        self._share = share
        self._foreign_seen: set[str] = set()
        self._contended_recently = False
        self.last_message_count = 0

    def run(self) -> None:
        cache = self._cache
        version = -1
        czxid = None
        done: set[str] = set()
        backoff = Backoff(initial=0.1, maximum=5.0)  # after errors in a row
        wake_at: float | None = None
        while self._ctx.is_running():
            try:
                pending = self._retry_deferred()  # also collects completions still in flight
                released = self._take_released()
                if released:  # given back untouched: try them again a little later
                    done.difference_update(released)
                if pending or released:
                    retry_at = time.monotonic() + LOCKED_RETRY_SECONDS
                    wake_at = retry_at if wake_at is None else min(wake_at, retry_at)
                timeout = None if wake_at is None else max(0.0, wake_at - time.monotonic())
                if timeout is None or timeout > 0:
                    snap = cache.wait_for_change(version, timeout)
                elif cache.changed_since(version):
                    snap = cache.wait_for_change(version, 1.0)  # a change is pending: get that listing
                else:
                    snap = cache.snapshot
                if not self._ctx.is_running():
                    break
                version = snap.version
                if snap.version == 0:
                    wake_at = None
                    continue
                if czxid is not None and snap.czxid != czxid:
                    done.clear()  # the queue node was recreated: sequences restart
                czxid = snap.czxid
                wake_at = self._process_snapshot(snap, done)
                backoff.succeeded()
            except BaseException as exc:  # never die: log, count, back off, continue
                self._ctx.counters.add("loop_errors")
                if not self._ctx.connection.failover.error(exc, "taking items"):  # a failover: one quiet line
                    log.exception("error in queue loop of %s (the loop continues)", self._ctx.queue_path)
                if self._ctx.closing.wait(backoff.failed()):
                    break
                wake_at = time.monotonic()  # retry the current snapshot
        log.debug("queue loop of %s stopped", self._ctx.queue_path)

    def item_names(self, snap: Snapshot) -> list[str]:
        """The item children of ``snap``; foreign nodes are logged (once each) and counted."""
        names = []
        for name in snap.children:
            if naming.is_item_name(name):
                names.append(name)
            elif name not in self._foreign_seen:
                self._foreign_seen.add(name)
                self._ctx.counters.add("foreign_skipped")
                log.warning("Foreign node in queue path %s: %s (skipped)", self._ctx.queue_path, name)
        self.last_message_count = len(names)
        return names

    def _process_snapshot(self, snap: Snapshot, done: set[str]) -> float | None:
        """Consume what is due in ``snap``; return when to look again without a change (or None)."""
        started = time.monotonic()
        names = self.item_names(snap)
        if done:
            present = set(names)
            done.intersection_update(present)
            names = [n for n in names if n not in done]
        if not names:
            return None
        ordered = self._sort_children(list(names))
        due: list[str] = []
        next_due: float | None = None
        for name in ordered:
            delay = self._get_delay(name)
            if delay > 0:
                at = time.monotonic() + delay
                next_due = at if next_due is None else min(next_due, at)
                if not due:
                    # Curator: if the head is not due, wait for it (or for a change).
                    return next_due
                continue
            due.append(name)
        step = self._batch_size
        if self._refresh_on_watch and self._min_items_before_refresh is not None:
            step = max(1, min(step, self._min_items_before_refresh or 1))
        retry_locked = False
        processed = 0
        remaining = due
        pos = 0  # remaining[pos:] is still to do (an index, not slicing: no O(n^2) on big snapshots)
        spread = not self._refresh_on_watch and len(due) > step
        shared = self._share() if spread else None
        own_end = -1  # with a share: where the others' blocks start in ``remaining``
        if shared is not None:
            # Several consumers take block leases here: this one starts with its own share of the blocks and
            # goes on to the others' after, so they do not race for the same blocks.
            remaining, own_end = share_first(remaining, *shared)
        elif spread and self._contended_recently:
            # Other consumers are active: start at a random point instead of racing them for the head.
            cut = random.randrange(len(remaining))
            remaining = remaining[cut:] + remaining[:cut]
        contended = False
        counters = self._ctx.counters
        while pos < len(remaining):
            if not self._ctx.is_running():
                break
            if (
                self._refresh_on_watch
                and processed >= (self._min_items_before_refresh or 0)
                and self._cache.changed_since(snap.version)
            ):
                return time.monotonic()  # abandon: re-read the newest listing
            if spread:
                now_shared = self._share()
                if now_shared is not None and now_shared != shared:  # a consumer came or went: split again
                    shared = now_shared
                    (remaining, own_end), pos = share_first(remaining[pos:], *now_shared), 0
            if shared is not None and 0 < own_end == pos < len(remaining):
                # Our share of this listing is done; the rest is the others'. Most of it is likely taken by now,
                # so look at a fresh listing before helping with it.
                own_end = -1
                if self._cache.changed_since(snap.version):
                    return time.monotonic()
            end = pos + self._sizer.size(step)
            if not self._refresh_on_watch and self._align_blocks():
                end = _block_end(remaining, pos, end)
            batch = remaining[pos:end]
            pos += len(batch)
            contention_before = counters.contention()
            handled, locked = self._taker.take(batch)
            done.update(handled)
            retry_locked = retry_locked or locked
            processed += len(batch)
            lost = counters.contention() - contention_before
            if lost and shared is not None:
                # Our share is ours; a race means we reached blocks others are taking. Only when most of a step
                # was gone already is the listing worth reading again (a listing costs as much as the queue).
                contended = self._contended_recently = True
                if (2 * lost > len(batch) and pos < len(remaining) and self._cache.changed_since(snap.version)
                        and time.monotonic() - started > max(_RELIST_AFTER, _RELIST_PER_CHILD * len(names))):
                    return time.monotonic()
            elif lost:
                # Other consumers work on this queue. A newer listing drops the names they already took;
                # a random starting point keeps us off the items they are taking right now. A lone consumer
                # never gets here, so it stays strictly FIFO.
                contended = self._contended_recently = True
                if pos < len(remaining) and spread:
                    if self._cache.changed_since(snap.version):
                        return time.monotonic()
                    rest = remaining[pos:]
                    cut = random.randrange(len(rest))
                    remaining, pos = rest[cut:] + rest[:cut], 0
        if not contended and pos >= len(remaining):
            self._contended_recently = False
        if retry_locked:
            at = time.monotonic() + LOCKED_RETRY_SECONDS
            next_due = at if next_due is None else min(next_due, at)
        return next_due


def share_first(names: list[str], rank: int, count: int) -> tuple[list[str], int]:
    """``names`` with the share of consumer ``rank`` of ``count`` first, and where the others' part starts.

    The share is the blocks whose index is ``rank`` modulo ``count``, in order. The others' blocks follow by owner
    (the next rank's first), each owner's from its last block back: live consumers split a deep queue this way
    without racing for the same blocks, and a consumer done with its share helps the others from the far end of
    theirs, which their owners reach last, each helper at a different owner.
    """
    own: list[str] = []
    others: dict[int, dict[int | None, list[str]]] = {}
    for n in names:
        block = naming.block_of(n)
        owner = (block // naming.BLOCK_SPAN) % count if block is not None else -1
        if owner == rank:
            own.append(n)
        else:
            others.setdefault(owner, {}).setdefault(block, []).append(n)
    rest = []
    for k in range(1, count + 1):
        blocks = others.get((rank + k) % count if k < count else -1, {})
        for block in reversed(blocks):
            rest.extend(blocks[block])
    return own + rest, len(own)


def _block_end(names: list[str], start: int, end: int) -> int:
    """Pull a step's end back to the start of its last block when that block goes on after it, so block leases
    cover whole blocks and the next step starts on a block boundary (never below one block's worth)."""
    if end >= len(names) or end - start <= 1:
        return end
    block = naming.block_of(names[end - 1])
    if block is None or naming.block_of(names[end]) != block:
        return end
    cut = end - 1
    while cut > start and naming.block_of(names[cut - 1]) == block:
        cut -= 1
    return cut if cut > start else end
