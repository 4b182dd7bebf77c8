"""Leases: how a lock-safe consumer holds items so that no other live consumer handles them meanwhile.

Two kinds of lease, mutually exclusive by construction:

- A **block lease** covers every item whose sequence number falls in one block of
  :data:`~zkqueue.formats.naming.BLOCK_SPAN` numbers: one EPHEMERAL node ``<lock path>/block-<first seq>@<queue
  hash>``, created in one multi. Its items are acked by deleting them (version-checked) and nothing else, so a
  fast consumer pays about one write per item, the same as the no-lock taker.
- An **item lease** is the lock Curator and zkqueue always used: ``<lock path>/<item>@<queue hash>`` plus a fence
  child ``<item>/lock-<token>`` (both EPHEMERAL). It costs five writes an item; the engine uses it while it does not
  know the consumer's pace yet, for slow consumers (a block lease would keep other consumers off the rest of the
  block while one slow item runs), for items without a sequence number, and always with Curator's lock names.

Mutual exclusion: an item claim first creates and deletes the item's block node in the same multi, so it
fails while anyone holds that block. A block claim cannot see item leases taken earlier, so the block's items
are read *after* the claim (same session: ZooKeeper answers in order) and an item with a child (an item lease's
fence) is left alone. No item claim can succeed while the block is held, and no block holder touches an item
that already had a fence when it read it.

Fencing (CURATOR-605): each consumer keeps one EPHEMERAL **session fence** ``<lock path>/fence-<token>@<queue
hash>`` for its ZooKeeper session, and every lock-safe multi (claims, acks, requeues, releases) starts with a
``check`` of it. When the session expires, the server deletes the fence together with every lease of that
session, so any later multi of the expired consumer fails as a whole and the items, which may belong to a new
owner by then, are untouched. A new session gets a fence with a new token; the old name never comes back.

A block stays held until every item of it this consumer took is finished: the release is in the same multi as
the last ack when that multi commits, never before an ack whose outcome is unknown. If a block is held longer
than :data:`DOWNGRADE_AFTER` (one slow item among fast ones), its unfinished items move to item leases and the
block is released, in one multi, so the rest of the block goes to other consumers.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from kazoo.exceptions import NodeExistsError, NoNodeError

from zkqueue.engine.commit import (
    CONNECTION_ERRORS,
    PrefixFailedError,
    check_op,
    commit_groups,
    create_op,
    delete_op,
)
from zkqueue.engine.context import QueueContext
from zkqueue.errors import QueueStateError
from zkqueue.formats import naming
from zkqueue.transport import protocol

log = logging.getLogger("zkqueue.engine.leases")

#: A block lease held longer than this (seconds) moves its unfinished items to item leases.
DOWNGRADE_AFTER = 1.0
#: How long the count of live consumers (see :meth:`Leases.peers`) is reused before the lock path is listed again.
PEERS_TTL = 0.2


class LeaseKind(enum.Enum):
    BLOCK = "block"
    ITEM = "item"


@dataclass(eq=False)
class Lease:
    """One claim of this consumer: a block of sequence numbers, or one item (with its fence child)."""

    kind: LeaseKind
    lock: str
    fence: str | None = None  # ITEM: the fence child under the item
    block: int | None = None  # BLOCK: the block's first sequence number
    session_fence: str | None = None  # the session fence it was claimed under (None with Curator's lock names)
    members: dict[str, Held] = field(default_factory=dict)  # items taken under it and not finished yet
    since: float = field(default_factory=time.monotonic)
    #: Commits under way on it (completions, releases, fenced writes, sent and not yet settled): while any is, it
    #: is not downgraded. Changed under :attr:`Leases._changed` (see :meth:`Leases.begin`).
    busy: int = 0
    #: A downgrade of it is under way: commits on its items wait for it (their ops depend on its kind).
    downgrading: bool = False
    #: Its lock's delete went in a multi with the acks of its last members (a completion's tail, or a caller's own
    #: multi: :func:`zkqueue.engine.held.block_tail`): ``"done"`` (committed) or ``"unsure"`` (the reply was lost);
    #: None: not yet. :meth:`Leases.release_blocks` does not delete a "done" lock again, an "unsure" one only if it
    #: is still ours.
    tail: str | None = None
    #: A multi that deletes its lock with the acks of its members was planned (:meth:`Leases.releases_if_finished`):
    #: no name joins it any more (see :meth:`Leases.join_blocks`), whether that multi commits or not.
    sealed: bool = False


@dataclass(eq=False)
class Held:
    """An item this consumer holds; ``lease`` changes if its block lease is downgraded."""

    name: str
    path: str
    lease: Lease


# ------------------------------------------------------------------------------------ op groups (pure)
def item_claim_ops(queue_path: str, lock_path: str, name: str, token: str, *, curator_names: bool,
                   lock_data: bytes = b"", acl: Any = None) -> tuple[list[Any], str, str, int]:
    """Ops that take an item lease on ``name``: (ops, lock path, fence path, index of the lock create).

    With qualified names and a sequence number, the ops first create and delete the item's block node, so the
    claim fails while a block lease covers the item.
    """
    path = naming.join(queue_path, name)
    lock = naming.join(lock_path, naming.lock_name(name, queue_path, "curator" if curator_names else "qualified"))
    fence = path + "/lock-" + token
    ops: list[Any] = []
    block = None if curator_names else naming.block_of(name)
    if block is not None:
        block_lock = naming.join(lock_path, naming.block_lock_name(block, queue_path))
        ops += [create_op(block_lock, lock_data, ephemeral=True, acl=acl), delete_op(block_lock)]
    lock_index = len(ops)
    ops += [create_op(lock, lock_data, ephemeral=True, acl=acl), create_op(fence, b"", ephemeral=True, acl=acl)]
    return ops, lock, fence, lock_index


def item_finish_ops(fence: str, lock: str, ops: Sequence[Any]) -> list[Any]:
    """``ops`` on an item held by an item lease, with the lease given up in the same multi (fence first)."""
    return [delete_op(fence), *ops, delete_op(lock)]


def removal_ops(queue_path: str, lock_path: str | None, name: str, *, curator_names: bool, lock_data: bytes = b"",
                acl: Any = None, version: int = -1) -> list[Any]:
    """Ops that delete ``name`` (at ``version``, any by default) only if no consumer holds it (Curator's
    ``tryRemove``)."""
    path = naming.join(queue_path, name)
    if lock_path is None:
        return [delete_op(path, version)]
    block = None if curator_names else naming.block_of(name)
    if block is not None:
        # The block check keeps block holders' items; an item lease's fence child makes the delete fail.
        block_lock = naming.join(lock_path, naming.block_lock_name(block, queue_path))
        return [create_op(block_lock, lock_data, ephemeral=True, acl=acl), delete_op(block_lock),
                delete_op(path, version)]
    lock = naming.join(lock_path, naming.lock_name(name, queue_path, "curator" if curator_names else "qualified"))
    return [create_op(lock, lock_data, ephemeral=True, acl=acl), delete_op(path, version), delete_op(lock)]


def held_items(items: Iterable[str], lock_names: Iterable[str], queue_path: str) -> set[str]:
    """Which of ``items`` (names in ``queue_path``) a live consumer holds, from the names in its lock path: an item
    lease in either naming style, or a block lease that covers the item."""
    locks = set(lock_names)
    blocks = {b for b in (naming.parse_block_lock(n, queue_path) for n in locks) if b is not None}
    suffix = naming.lock_suffix(queue_path)
    return {i for i in items if i + suffix in locks or i in locks or naming.block_of(i) in blocks}


@dataclass
class BlockClaim:
    """Block claims sent in one multi: (first sequence, names) per block, the fence checked, the reply."""

    blocks: list[tuple[int, list[str]]]
    fence: str
    reply: Any


@dataclass
class Claimed:
    """What one claim round got: items held, names gone for good, and whether some were held by others."""

    held: list[Held] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    locked: bool = False


class FenceLostError(Exception):
    """This consumer's session fence is gone: its session expired, and with it every lease it held."""


class Leases:
    """The leases of one lock-safe queue instance, and the session fence that guards them."""

    def __init__(self, ctx: QueueContext) -> None:
        assert ctx.lock_path is not None
        self._ctx = ctx
        self._lock_path = ctx.lock_path
        self.curator_names = ctx.lock_names == "curator"
        self._state = threading.Lock()  # lease state only; never held across a request to ZooKeeper
        #: Signalled when a lease's ``busy`` count or ``downgrading`` flag changes.
        self._changed = threading.Condition(self._state)
        self._blocks: dict[int, Lease] = {}
        self._fence: str | None = None
        self._fence_session: int | None = None
        self._unreleased: list[Lease] = []  # block releases whose outcome is unknown (see release_blocks)
        self._releasing: Counter[int] = Counter()  # blocks whose lock release_blocks is deleting now
        self._peers: tuple[int, int] = (0, 1)
        self._peers_at = 0.0

    # ------------------------------------------------------------------------------------- session fence
    @property
    def fence(self) -> str | None:
        return self._fence

    def prefix(self) -> list[Any]:
        """Ops that lead a multi claiming new leases: a check of the current session fence (none with Curator's
        lock names, whose item leases carry their own fence)."""
        if self.curator_names:
            return []
        return [check_op(self._ensure_fence())]

    @staticmethod
    def prefix_for(fence: str | None) -> list[Any]:
        """Ops that lead a multi on leases claimed under session fence ``fence``: its check."""
        return [] if fence is None else [check_op(fence)]

    def _ensure_fence(self) -> str:
        session = self._ctx.connection.session_id()
        with self._state:
            # No session id means "not connected right now", not "a new session": keep the fence (a multi sent
            # now fails with ConnectionLoss anyway). Only a different session id proves the old one ended.
            if self._fence is not None and (session is None or self._fence_session == session):
                return self._fence
            old = self._fence
        if old is not None:
            self.fence_lost(old)
        path = naming.join(self._lock_path, naming.fence_name(self._ctx.tokens.next(), self._ctx.queue_path))
        for _ in range(2):
            try:
                protocol.create(self._ctx.client, create_op(path, self._ctx.lock_data, ephemeral=True,
                                                            acl=self._ctx.acl))
                break
            except NoNodeError:
                self._ctx.client.ensure_path(self._lock_path, acl=self._ctx.acl)
        else:  # pragma: no cover - ensure_path made it, so the second create cannot miss its parent
            raise NoNodeError(self._lock_path)
        with self._state:
            self._fence, self._fence_session = path, session
        log.debug("session fence %s (session %s)", path, session)
        return path

    def fence_lost(self, fence: str | None) -> None:
        """Session fence ``fence`` is gone (its session expired): forget it and every lease claimed under it;
        their items are no longer ours."""
        if fence is None:
            return
        with self._state:
            if self._fence == fence:
                self._fence = None
            lost = [b for b, lease in self._blocks.items() if lease.session_fence == fence]
            for b in lost:
                del self._blocks[b]
            self._unreleased = [lease for lease in self._unreleased if lease.session_fence != fence]
        log.warning("session fence %s of %s is gone (session expired?); its leases are lost", fence,
                    self._ctx.queue_path)

    def close(self) -> None:
        """Delete the session fence (best effort: it goes with the session anyway)."""
        with self._state:
            fence, self._fence = self._fence, None
        if fence is not None:
            try:
                self._ctx.client.delete(fence)
            except Exception as exc:
                log.debug("deleting fence %s: %r", fence, exc)

    def peers(self) -> tuple[int, int]:
        """(this consumer's rank, how many lock-safe consumers of this queue are live), from the session fences
        in the lock path (listed at most every :data:`PEERS_TTL` seconds; (0, 1) when unknown)."""
        now = time.monotonic()
        if now - self._peers_at < PEERS_TTL:
            return self._peers
        self._peers_at = now
        fence = self._fence
        if fence is None or self.curator_names:
            return self._peers
        try:
            names = self._ctx.client.get_children(self._lock_path)
        except Exception as exc:
            log.debug("listing %s: %r", self._lock_path, exc)
            return self._peers
        fences = sorted(n for n in names if naming.is_fence_name(n, self._ctx.queue_path))
        own = fence.rsplit("/", 1)[-1]
        self._peers = (fences.index(own), len(fences)) if own in fences else (0, 1)
        return self._peers

    # ------------------------------------------------------------------------------------- claims
    def held_blocks(self) -> frozenset[int]:
        """The blocks this instance holds now, or is still releasing: a block is not claimed again while its old
        lock's delete is unsettled (a delete whose reply was lost is checked by owner and data, which a new claim
        of this instance would share, so the check could delete the new lock)."""
        with self._state:
            return frozenset(self._blocks).union(
                self._releasing, (lease.block for lease in self._unreleased if lease.block is not None))

    def send_block_claims(self, by_block: dict[int, list[str]], *, together: bool = False) -> list[BlockClaim]:
        """Send the claims of blocks (first sequence -> the names to take in it) without waiting: one multi per
        block, or with ``together`` one multi for all of them (one request, but one block held by another
        consumer fails them all). No block may be one this consumer holds already.
        """
        prefix = self.prefix()
        fence = prefix[0].path
        parts = [list(by_block.items())] if together else [[item] for item in by_block.items()]
        sent = []
        for blocks in parts:
            ops = prefix + [create_op(self._block_lock(block), self._ctx.lock_data, ephemeral=True,
                                      acl=self._ctx.acl) for block, _members in blocks]
            sent.append(BlockClaim(blocks, fence,
                                   protocol.send_multi(self._ctx.client, ops, limit=self._ctx.jute_max_buffer)))
        return sent

    def join_blocks(self, names: Sequence[str], blocks: Sequence[int | None]) -> dict[str, Held]:
        """Take ``names`` (``blocks[i]`` the block of ``names[i]``) under the block leases this instance holds
        already: no request, the block's lock covers every item of the block. This keeps a claim in the queue's
        order when its next names share a block with items claimed before and not finished yet (a block claim
        takes only as many items as the consumer has room for).

        A name joins only a lease that is current (not released, not of an older session fence), open (not being
        downgraded, no multi planned to delete its lock: see :attr:`Lease.sealed`) and does not hold that name
        already. The caller reads the joined items as it reads a block claim's (an item lease taken before our
        block claim shows as a child of its item and is left alone) and gives back what it will not deliver."""
        joined: dict[str, Held] = {}
        with self._state:
            for name, block in zip(names, blocks):
                lease = None if block is None else self._blocks.get(block)
                if (lease is None or lease.sealed or lease.downgrading or lease.tail is not None
                        or lease.session_fence != self._fence or name in lease.members):
                    continue
                h = Held(name, self._ctx.item_path(name), lease)
                lease.members[name] = h
                joined[name] = h
        if joined:
            self._ctx.counters.add("block_joins", len(joined))
        return joined

    def _block_lock(self, block: int) -> str:
        return naming.join(self._lock_path, naming.block_lock_name(block, self._ctx.queue_path))

    def finish_block_claims(self, sent: list[BlockClaim]) -> tuple[dict[str, Held], bool, list[int]]:
        """Await block claims: the items held (by name), whether some blocks were held by others, and the blocks
        of a claim of several blocks that failed because one was held by another consumer (to be claimed again
        block by block).

        Raises :class:`FenceLostError` if the fence check failed. A claim whose reply was lost is checked
        after reconnecting and, if it committed, released at once: the items are taken another round.
        """
        held: dict[str, Held] = {}
        locked = False
        again: list[int] = []
        unsure: list[Lease] = []
        lost_fence: str | None = None
        lock_path_missing = False
        for claim in sent:
            leases = [Lease(LeaseKind.BLOCK, self._block_lock(block), block=block, session_fence=claim.fence)
                      for block, _members in claim.blocks]
            try:
                result = claim.reply.result()
            except CONNECTION_ERRORS:
                unsure.extend(leases)
                continue
            if result.ok:
                for lease, (block, members) in zip(leases, claim.blocks):
                    for name in members:
                        h = Held(name, self._ctx.item_path(name), lease)
                        lease.members[name] = h
                        held[name] = h
                    with self._state:
                        self._blocks[block] = lease
                continue
            if result.failed_index == 0:
                lost_fence = claim.fence
            elif isinstance(result.failure, NodeExistsError):
                self._ctx.counters.add("lock_conflicts")
                if len(claim.blocks) > 1:
                    again.extend(block for block, _members in claim.blocks)
                else:
                    locked = True
            elif isinstance(result.failure, NoNodeError):
                lock_path_missing = True
            else:
                log.warning("could not take block(s) %s: %r", [lease.lock for lease in leases], result.failure)
                self._ctx.counters.add("lock_conflicts")
                locked = True
        if unsure:
            self._ctx.connection.failover.lost(f"{len(unsure)} block claim(s) lost their reply (checking them)")
            self._release_if_ours(unsure)
            locked = True
        if lock_path_missing:
            self._ctx.client.ensure_path(self._lock_path, acl=self._ctx.acl)
            locked = True
        if lost_fence is not None:
            self.fence_lost(lost_fence)
            raise FenceLostError(self._ctx.queue_path)
        return held, locked, again

    def claim_items(self, names: Sequence[str]) -> Claimed:
        """Take item leases on ``names`` (fenced); what was held, gone, or held by others."""
        out = Claimed()
        candidates = list(names)
        for _attempt in range(3):
            if not candidates:
                break
            token = self._ctx.tokens.next()
            prefix = self.prefix()
            session_fence = prefix[0].path if prefix else None
            plans = []
            for name in candidates:
                ops, lock, fence, lock_index = item_claim_ops(
                    self._ctx.queue_path, self._lock_path, name, token, curator_names=self.curator_names,
                    lock_data=self._ctx.lock_data, acl=self._ctx.acl,
                )
                plans.append((name, ops, lock, fence, lock_index))
            try:
                results = commit_groups(self._ctx, [p[1] for p in plans], prefix=prefix)
            except PrefixFailedError:
                self.fence_lost(session_fence)
                raise FenceLostError(self._ctx.queue_path) from None
            except CONNECTION_ERRORS as exc:
                log.warning("taking locks on %s: %r; checking what was committed", self._ctx.queue_path, exc)
                # Our fence exists exactly when a claim committed (its token is new): ask until we know.
                committed = self.exist([p[3] for p in plans])
                candidates = []
                for (name, _ops, lock, fence, _i), ok in zip(plans, committed):
                    if ok:
                        out.held.append(self._item_held(name, lock, fence, session_fence))
                    else:
                        candidates.append(name)
                continue
            lock_path_missing: list[str] = []
            unsure = []
            for (name, _ops, lock, fence, lock_index), res in zip(plans, results):
                if res.ok:
                    out.held.append(self._item_held(name, lock, fence, session_fence))
                elif isinstance(res.error, CONNECTION_ERRORS):
                    unsure.append((name, lock, fence))  # the request may have committed: we may hold it
                elif isinstance(res.error, NodeExistsError):
                    out.locked = True
                    self._ctx.counters.add("lock_conflicts")
                elif isinstance(res.error, NoNodeError) and (res.op or 0) <= lock_index:
                    lock_path_missing.append(name)
                elif isinstance(res.error, NoNodeError):
                    out.gone.append(name)
                    self._ctx.counters.add("lost_races")
                else:
                    log.warning("could not lock %s/%s: %r", self._ctx.queue_path, name, res.error)
                    self._ctx.counters.add("lock_conflicts")
                    out.locked = True
            if unsure:
                # A claim whose reply was lost: our fence exists exactly when it committed. Without this check a
                # committed lock would be held by nobody who knows it, stalling the item until the session ends.
                self._ctx.connection.failover.lost(f"{len(unsure)} lock request(s) lost their reply (checking fences)")
                for (name, lock, fence), ok in zip(unsure, self.exist([u[2] for u in unsure])):
                    if ok:
                        out.held.append(self._item_held(name, lock, fence, session_fence))
                    else:
                        lock_path_missing.append(name)  # not committed: try it again
            if not lock_path_missing:
                break
            if not unsure:
                log.warning("lock path %s is gone; recreating it", self._lock_path)
                self._ctx.client.ensure_path(self._lock_path, acl=self._ctx.acl)
            candidates = lock_path_missing
        return out

    def exist(self, paths: list[str]) -> list[bool]:
        """Whether each of ``paths`` exists, asked until every answer is definite (a lost connection is no answer:
        taking it for "not there" would leave a committed claim held by nobody who knows it). Raises
        :class:`QueueStateError` if the connection does not come back, or the session ends first."""
        answers: list[bool | None] = [None] * len(paths)
        session = self._ctx.connection.session_id()
        while any(a is None for a in answers):
            if not self._ctx.connection.wait(30.0):
                raise QueueStateError(f"lost the connection while claiming items of {self._ctx.queue_path}; "
                                      "what was claimed goes with the session if it does not come back")
            if session is not None and self._ctx.connection.session_id() not in (None, session):
                raise QueueStateError(f"the session ended while claiming items of {self._ctx.queue_path}")
            todo = [i for i, a in enumerate(answers) if a is None]
            try:
                results = protocol.get_many(self._ctx.client, [paths[i] for i in todo])
            except CONNECTION_ERRORS:
                continue
            for i, res in zip(todo, results):
                if isinstance(res, NoNodeError):
                    answers[i] = False
                elif not isinstance(res, BaseException):
                    answers[i] = True
                elif not isinstance(res, CONNECTION_ERRORS):
                    raise res
        return [bool(a) for a in answers]

    def _item_held(self, name: str, lock: str, fence: str, session_fence: str | None) -> Held:
        lease = Lease(LeaseKind.ITEM, lock, fence=fence, session_fence=session_fence)
        h = Held(name, self._ctx.item_path(name), lease)
        lease.members[name] = h
        return h

    # ------------------------------------------------------------------------------------- commits under way
    def begin(self, helds: Iterable[Held]) -> list[Lease]:
        """Mark the leases of ``helds`` busy for a commit on them (a completion, a release, a fenced write), waiting
        while one of them is being downgraded (its items' ops change with its kind); once this returns, their
        ``lease`` stays as it is until :meth:`end` is called with the leases returned. Marks nest. No lock is held
        in between: commits on different leases (or the same one) go on at once, each fenced by ZooKeeper."""
        helds = list(helds)
        with self._changed:
            while True:
                leases = list({id(h.lease): h.lease for h in helds}.values())
                if not any(lease.downgrading for lease in leases):
                    break
                self._changed.wait()
            for lease in leases:
                lease.busy += 1
        return leases

    def end(self, leases: Iterable[Lease]) -> None:
        """The commits marked by :meth:`begin` (which returned ``leases``) are settled."""
        with self._changed:
            for lease in leases:
                lease.busy -= 1
            self._changed.notify_all()

    # ------------------------------------------------------------------------------------- finishing
    def finish_group(self, h: Held, ops: Sequence[Any]) -> list[Any]:
        """``ops`` on held item ``h`` (which must include its delete), as one group for a fenced multi. An item
        lease is given up in the same group; a block lease when its last item is finished (see
        :meth:`finished`)."""
        if h.lease.kind is LeaseKind.ITEM:
            assert h.lease.fence is not None
            return item_finish_ops(h.lease.fence, h.lease.lock, ops)
        return list(ops)

    def release_group(self, h: Held, ops: Sequence[Any] = ()) -> list[Any]:
        """Give ``h`` back untouched (``ops`` still commit): an item lease's nodes are deleted; a block lease
        needs nothing per item."""
        if h.lease.kind is LeaseKind.ITEM:
            assert h.lease.fence is not None
            return [delete_op(h.lease.fence), *ops, delete_op(h.lease.lock)]
        return list(ops)

    def releases_if_finished(self, helds: Iterable[Held]) -> tuple[list[Any], list[Lease]]:
        """The block deletes that would follow if every item in ``helds`` were finished now, and their leases (which
        are sealed: see :attr:`Lease.sealed`; nothing else changes)."""
        finishing: dict[int, set[str]] = {}
        leases: dict[int, Lease] = {}
        with self._state:  # against a name joining one of these leases meanwhile (see join_blocks)
            for h in helds:
                if h.lease.kind is LeaseKind.BLOCK:
                    finishing.setdefault(id(h.lease), set()).add(h.name)
                    leases[id(h.lease)] = h.lease
            emptied = [leases[key] for key, names in finishing.items() if set(leases[key].members) <= names]
            for lease in emptied:
                lease.sealed = True  # its lock's delete is planned: nothing may join it from now on
        return [delete_op(lease.lock) for lease in emptied], emptied

    def finished(self, helds: Iterable[Held]) -> list[Lease]:
        """Mark ``helds`` finished (their outcome is final); return the block leases now empty, which the caller
        MUST pass to :meth:`release_blocks` (it deletes their locks, or knows that a multi already did: see
        :attr:`Lease.tail`). From here until then their blocks count as being released (:meth:`held_blocks`), so
        this instance does not claim one of them again before its old lock's delete is settled."""
        emptied = []
        with self._state:
            for h in helds:
                lease = h.lease
                if lease.members.pop(h.name, None) is None:
                    continue
                if lease.kind is LeaseKind.BLOCK and not lease.members:
                    if self._blocks.get(lease.block) is lease:  # type: ignore[arg-type]
                        del self._blocks[lease.block]  # type: ignore[arg-type]
                    emptied.append(lease)
            self._releasing.update(lease.block for lease in emptied if lease.block is not None)
        return emptied

    def release_blocks(self, leases: Sequence[Lease], *, unsure: bool = False) -> None:
        """Delete the lock nodes of block leases emptied by :meth:`finished`, fenced.

        A block lock is never deleted blindly twice: if a delete's reply is lost (or ``unsure`` says an earlier
        multi may already have deleted it), another consumer may hold that block by now, so the node is deleted
        only if it is still this instance's (its ephemeral owner is our session and it carries our data). A lease
        whose lock a multi of its acks already deleted (:attr:`Lease.tail` "done") is left alone; one whose such
        multi lost its reply ("unsure") is deleted only if still ours.
        """
        if not leases:
            return
        blocks = [lease.block for lease in leases if lease.block is not None]
        try:
            sure = [lease for lease in leases if lease.tail is None]
            doubtful = [lease for lease in leases if lease.tail == "unsure"]
            if unsure:
                sure, doubtful = [], sure + doubtful
            if sure:
                self._release_blocks(sure, False)
            if doubtful:
                self._release_blocks(doubtful, True)
        finally:
            self._done_releasing(blocks)

    def _done_releasing(self, blocks: list[int]) -> None:
        with self._state:
            self._releasing.subtract(blocks)
            self._releasing += Counter()  # drops the blocks at zero

    def _release_blocks(self, leases: Sequence[Lease], unsure: bool) -> None:
        if unsure:
            self._release_if_ours(list(leases))
            return
        by_fence: dict[str | None, list[Lease]] = {}
        for lease in leases:
            by_fence.setdefault(lease.session_fence, []).append(lease)
        for fence, group in by_fence.items():
            try:
                results = commit_groups(self._ctx, [[delete_op(lease.lock)] for lease in group],
                                        prefix=self.prefix_for(fence))
            except PrefixFailedError:
                self.fence_lost(fence)
                continue
            except CONNECTION_ERRORS:
                self._release_if_ours(group)
                continue
            for lease, res in zip(group, results):
                if res.ok or isinstance(res.error, NoNodeError):
                    continue
                if isinstance(res.error, CONNECTION_ERRORS):
                    self._release_if_ours([lease])
                else:
                    log.warning("releasing block %s: %r (it goes with the session)", lease.lock, res.error)

    def _release_if_ours(self, leases: list[Lease]) -> None:
        """Delete the block locks of ``leases`` that are still this instance's; what cannot be settled now is
        kept for :meth:`retry_releases`."""
        pending = list(leases)
        for _attempt in range(3):
            if not pending or not self._ctx.connection.wait(30.0):
                break
            session = self._ctx.connection.session_id()
            if session is None:
                continue
            try:
                stats = protocol.get_many(self._ctx.client, [lease.lock for lease in pending])
            except CONNECTION_ERRORS:
                continue
            if any(isinstance(res, CONNECTION_ERRORS) for res in stats):
                continue
            mine = [lease for lease, res in zip(pending, stats)
                    if not isinstance(res, BaseException) and res[1].ephemeralOwner == session
                    and res[0] == self._ctx.lock_data]
            pending = []
            for lease in mine:
                try:
                    res = commit_groups(self._ctx, [[delete_op(lease.lock)]], prefix=self.prefix_for(lease.session_fence))
                except PrefixFailedError:
                    self.fence_lost(lease.session_fence)
                    continue
                except CONNECTION_ERRORS:
                    pending.append(lease)
                    continue
                if not res[0].ok and isinstance(res[0].error, CONNECTION_ERRORS):
                    pending.append(lease)
        if pending:
            with self._state:
                self._unreleased.extend(pending)

    def retry_releases(self) -> bool:
        """Settle block releases whose outcome was unknown; True while some remain."""
        with self._state:
            pending, self._unreleased = self._unreleased, []
            blocks = [lease.block for lease in pending if lease.block is not None]
            self._releasing.update(blocks)  # in the same breath: their blocks never look free meanwhile
        try:
            if pending:
                if not self._ctx.connection.connected.is_set():
                    with self._state:
                        self._unreleased[:0] = pending
                    return True
                self._release_if_ours(pending)
        finally:
            self._done_releasing(blocks)
        with self._state:
            return bool(self._unreleased)

    def _created(self, path: str) -> bool | None:
        """Whether ``path`` exists, asked until answered; None if the queue closes or the session ends first."""
        while self._ctx.connection.wait(30.0):
            try:
                return self._ctx.client.exists(path) is not None
            except CONNECTION_ERRORS:
                continue
            except Exception as exc:  # SessionExpired is a connection error; anything else: give up asking
                log.warning("checking %s: %r", path, exc)
                return None
        return None

    # ------------------------------------------------------------------------------------- downgrade
    def stale_blocks(self, older_than: float = DOWNGRADE_AFTER) -> list[Lease]:
        now = time.monotonic()
        with self._state:
            return [lease for lease in self._blocks.values() if now - lease.since > older_than and lease.members]

    def downgrade(self, lease: Lease) -> None:
        """Move the unfinished items of a block lease to item leases and release the block, in one multi. Not
        while a commit on it is under way (it is tried again later); commits on its items that begin meanwhile
        wait for it (see :meth:`begin`)."""
        with self._changed:
            members = list(lease.members.values())
            current = self._blocks.get(lease.block) is lease  # type: ignore[arg-type]
            if not members or not current or lease.busy or lease.downgrading:
                return
            lease.downgrading = True
        try:
            self._downgrade(lease, members)
        finally:
            with self._changed:
                lease.downgrading = False
                self._changed.notify_all()

    def _downgrade(self, lease: Lease, members: list[Held]) -> None:
        token = self._ctx.tokens.next()
        plans = []
        for h in members:
            lock = naming.join(self._lock_path, naming.lock_name(h.name, self._ctx.queue_path))
            plans.append((h, lock, h.path + "/lock-" + token))
        prefix = self.prefix_for(lease.session_fence)
        ops = list(prefix)
        for _h, lock, fence in plans:
            ops += [create_op(lock, self._ctx.lock_data, ephemeral=True, acl=self._ctx.acl),
                    create_op(fence, b"", ephemeral=True, acl=self._ctx.acl)]
        ops.append(delete_op(lease.lock))
        try:
            result = protocol.run_multi(self._ctx.client, ops, limit=self._ctx.jute_max_buffer)
            committed = result.ok
        except CONNECTION_ERRORS as exc:
            # Did it commit? Exactly when our new fences exist (they are unique to this attempt). Until we know,
            # nothing else may touch this lease, so we ask until we get an answer (commits on it wait).
            log.warning("downgrading %s: %r; checking whether it committed", lease.lock, exc)
            committed = self._created(plans[0][2])
            if committed is None:
                return  # the queue is closing or the session is gone: the lease goes with it
            result = None
        if not committed:
            lease.since = time.monotonic()  # try again a while later, not in a hot loop
            if result is None:
                return
            index = (result.failed_index or 0) - len(prefix)
            if result.failed_index is not None and index < 0:
                self.fence_lost(lease.session_fence)
            elif isinstance(result.failure, NoNodeError) and index < 2 * len(plans) and index % 2 == 1:
                gone = plans[index // 2][0]
                log.info("item %s of block lease %s is gone (deleted by someone else)", gone.path, lease.lock)
                self.release_blocks(self.finished([gone]))
            else:
                log.warning("could not downgrade block lease %s: %r", lease.lock, result.failure)
            return
        with self._state:
            for h, lock, fence in plans:
                item = Lease(LeaseKind.ITEM, lock, fence=fence, session_fence=lease.session_fence)
                item.members[h.name] = h
                h.lease = item
            lease.members.clear()
            if self._blocks.get(lease.block) is lease:  # type: ignore[arg-type]
                del self._blocks[lease.block]  # type: ignore[arg-type]
        self._ctx.counters.add("leases_downgraded")
        log.info("block lease %s held %.1fs: %d unfinished item(s) moved to item leases", lease.lock,
                 time.monotonic() - lease.since, len(plans))
