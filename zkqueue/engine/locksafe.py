"""The lock-safe taker: lease, read, deliver, then complete (at-least-once; a crash before the ack means
redelivery, never a loss, and never two live consumers on one item).

One step: the block claims go out as pipelined multis, item claims (if any) as one fenced commit, and the
multiRead of the claimed nodes follows in the same session, so it sees the claims (ZooKeeper answers a session's
requests in order). Nodes that cannot be decoded are quarantined under their lease. A :class:`ClaimHook`'s ops
then commit, fenced, before the consumer sees anything. Completions are sent as nodes finish without waiting for
the reply, so they overlap the next step's claim on the same thread; they are collected before the next step is
delivered, so at most one step is ever consumed-but-unacked.

Which lease (see :mod:`zkqueue.engine.leases`): block leases once the consumer is known to be fast
(:data:`BLOCK_LEASE_MAX_PACE` seconds a node or less); item leases before its pace is known, for slow consumers
and with Curator's lock names. A lease keeper, a chore on the client's shared thread (see
:mod:`~zkqueue.engine.shared`), moves the unfinished items of a block held too long (a slow item among fast ones) to
item leases.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from kazoo.exceptions import NoNodeError

from zkqueue.consumer import ErrorMode
from zkqueue.engine.commit import CONNECTION_ERRORS, GroupOutcome, PrefixFailedError, check_op, commit_groups
from zkqueue.engine.completion import Completer, Outcome
from zkqueue.engine.context import QueueContext
from zkqueue.engine.delivery import Delivery, decode_node
from zkqueue.engine.leases import Claimed, FenceLostError, Held, LeaseKind, Leases
from zkqueue.engine.quarantine import Quarantine
from zkqueue.engine.seams import ClaimHook, Completion
from zkqueue.engine.shared import ClientServices
from zkqueue.engine.steps import StepSizer
from zkqueue.errors import CorruptItemError
from zkqueue.formats import large_ref, naming
from zkqueue.transport import protocol

log = logging.getLogger("zkqueue.engine.locksafe")

#: Consumers at least this fast (seconds per node, measured) take block leases.
BLOCK_LEASE_MAX_PACE = 0.02
#: After a claim of several blocks met one held by another consumer, claim block by block for this long.
_SPLIT_CLAIMS_FOR = 5.0
#: How often the keeper looks for block leases held too long.
_KEEPER_INTERVAL = 0.25
#: Seconds the lease keeper pauses after an error.
_KEEPER_PAUSE = 2.0
#: The longest a claim waits in the claim hook's admit (a rate limit) before it retries deferred completions.
ADMIT_SLICE = 1.0


class LeaseTaker:
    """Takes nodes under leases, delivers them, and completes them."""

    def __init__(
        self,
        ctx: QueueContext,
        serializer: Any,
        delivery: Delivery | None,
        quarantine: Quarantine,
        sizer: StepSizer,
        *,
        error_mode: Callable[[], ErrorMode],
        requeue_prefix: Callable[[str], str],
        claim_hook: ClaimHook | None = None,
    ) -> None:
        self._ctx = ctx
        self._serializer = serializer
        self._delivery = delivery
        self._quarantine = quarantine
        self._sizer = sizer
        self._claim_hook = claim_hook
        self.leases = Leases(ctx)
        self.completer = Completer(ctx, self.leases, quarantine, error_mode=error_mode,
                                   requeue_prefix=requeue_prefix)
        self._split_claims_until = 0.0
        self._stop_keeping: Callable[[], None] | None = None
        self._keep_after = 0.0  # after an error the keeper pauses until then (see _keep)

    def start(self) -> None:
        """Create the session fence (other consumers count it at once) and start the lease keeper."""
        self.leases.prefix()
        self._stop_keeping = ClientServices.of(self._ctx.client).every(_KEEPER_INTERVAL, self._keep)

    # ------------------------------------------------------------------------------------------ lifecycle
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every node the consumer returned from is completed (each reply comes, or its connection
        fails, within the session timeout)."""
        self.completer.collect()
        return True

    def retry_deferred(self) -> bool:
        return self.completer.retry_deferred()

    def take_released(self) -> set[str]:
        return self.completer.take_released()

    def close(self) -> None:
        """Finish what can be finished, stop the keeper, drop the session fence."""
        self.completer.collect()
        stop_keeping, self._stop_keeping = self._stop_keeping, None
        if stop_keeping is not None:
            stop_keeping()  # waits for a pass under way
        try:
            if self.completer.retry_deferred():
                log.warning("queue %s closed with unfinished acks; their items will be redelivered",
                            self._ctx.queue_path)
        except Exception:
            log.exception("final ack retry on %s failed", self._ctx.queue_path)
        self.leases.close()

    def _keep(self) -> None:
        """One pass of the lease keeper: downgrade block leases held too long. Never raises; after an error it
        pauses for :data:`_KEEPER_PAUSE` seconds (logged, counted, not retried hot)."""
        if time.monotonic() < self._keep_after:
            return
        try:
            if self.leases.stale_blocks():
                self.completer.collect()  # what is finished must not be moved to item leases
                for lease in self.leases.stale_blocks():
                    self.leases.downgrade(lease)  # not while a commit on it is under way: next time
        except Exception as exc:
            self._ctx.counters.add("loop_errors")
            if not self._ctx.connection.failover.error(exc, "keeping leases"):
                log.exception("lease keeper of %s (it continues)", self._ctx.queue_path)
            self._keep_after = time.monotonic() + _KEEPER_PAUSE

    # ------------------------------------------------------------------------------------------ a step
    def uses_blocks(self) -> bool:
        """Whether the next step takes block leases (the consumer is known to be fast)."""
        pace = self._delivery.pace if self._delivery is not None else None
        return not self.leases.curator_names and pace is not None and pace <= BLOCK_LEASE_MAX_PACE

    def share(self) -> tuple[int, int] | None:
        """(this consumer's rank, how many consumers) when several lock-safe consumers split the queue by blocks
        (see :func:`zkqueue.engine.run_loop.share_first`); None when it is alone or uses Curator's lock names."""
        if self.leases.curator_names:
            return None
        rank, count = self.leases.peers()
        return (rank, count) if count > 1 else None

    def take(self, names: list[str]) -> tuple[list[str], bool]:
        """Claim, read, deliver and complete ``names``, as many at a time as the claim hook admits; return (names
        finished for this instance, whether some were held by others and should be tried again soon). Names not
        admitted before the queue closed are left alone."""
        assert self._delivery is not None
        handled: list[str] = []
        locked = False
        rest = names
        while rest:
            step_handled, step_locked, outcomes, tried = self.claim(rest)
            if not tried:  # closing
                break
            rest = rest[tried:]
            handled.extend(step_handled)
            locked = locked or step_locked
            # The previous step's completions went out before this step's claim; collect them before the
            # consumer sees new nodes, so at most one step is ever consumed-but-unacked.
            self.completer.collect()
            self._delivery.deliver_all(outcomes, self.completer.submit, release=self._release_outcomes)
            handled.extend(o.name for o in outcomes)
        return handled, locked

    def claim(self, names: list[str], timeout: float | None = None, *, blocks: bool | None = None
              ) -> tuple[list[str], bool, list[Outcome], int]:
        """Claim and read the names the claim hook admits (a prefix of ``names``; see
        :meth:`~zkqueue.engine.seams.ClaimHook.admit`, which may wait up to ``timeout`` seconds) and run the claim
        hook: (names finished for this instance, whether some were held by others, the claimed nodes to deliver,
        how many of ``names`` were tried). ``names[tried:]`` were left alone; ``tried`` is 0 only when nothing
        was admitted (closing, or ``timeout`` passed). The caller completes or releases every outcome. ``blocks``:
        whether to take block leases (None: when the consumer is known to be fast, see :meth:`uses_blocks`)."""
        hook = self._claim_hook
        admit = getattr(hook, "admit", None) if names else None
        if admit is None:
            return (*self._claim_step(names, blocks), len(names))
        tried = max(0, min(len(names), self._admit(admit, len(names), timeout)))
        if not tried:
            return [], False, [], 0
        outcomes: list[Outcome] = []
        try:
            handled, locked, outcomes = self._claim_step(names[:tried], blocks)
        finally:
            unused = getattr(hook, "unused", None)
            try:
                if unused is not None and tried > len(outcomes):
                    unused(tried - len(outcomes))
            except Exception:
                log.exception("claim hook unused() of %s raised", self._ctx.queue_path)
        return handled, locked, outcomes, tried

    def _admit(self, admit: Callable[..., int], count: int, timeout: float | None) -> int:
        """The claim hook's admission of ``count`` names, waiting up to ``timeout`` seconds (None: until closing).
        Asked first without waiting (so a hook that admits at once keeps a step's acks overlapping the next claim);
        then, since a wait (a rate limit's budget) may be long, the acks sent so far are collected and the wait goes
        in slices of at most :data:`ADMIT_SLICE` seconds, with the deferred completions retried between them: a
        consumer waiting for budget still acks what it ran."""
        closing = self._ctx.closing
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        tried = admit(count, closing, 0.0)
        while not tried and not closing.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            try:
                self.completer.retry_deferred()  # collects the acks in flight first
            except Exception as exc:  # the wait goes on; the run loop retries them too
                if not self._ctx.connection.failover.error(exc, "completing while waiting for admission"):
                    log.warning("completing on %s while waiting for admission failed: %r", self._ctx.queue_path, exc)
            tried = admit(count, closing, ADMIT_SLICE if left is None else min(ADMIT_SLICE, left))
        return tried

    def _claim_step(self, names: list[str], blocks_wanted: bool | None = None
                    ) -> tuple[list[str], bool, list[Outcome]]:
        """Claim and read ``names`` and run the claim hook (see :meth:`claim`)."""
        leases = self.leases
        locked = False
        blocks = [naming.block_of(n) for n in names]
        order = names  # the consumption order the outcomes keep
        joined: dict[str, Held] = {}
        if leases.held_blocks().intersection(blocks):
            self.completer.collect()  # the previous step's completions release its blocks
            ours = leases.held_blocks()
            if ours.intersection(blocks):
                # Names in a block we hold (items of it claimed before and not finished yet) join that lease, so
                # the claim keeps the queue's order. A name whose lease cannot take it now (being released or
                # downgraded) is left for a later claim.
                mine = [i for i, b in enumerate(blocks) if b in ours]
                joined = leases.join_blocks([names[i] for i in mine], [blocks[i] for i in mine])
                if len(joined) < len(mine):
                    locked = True
                keep = [i for i, b in enumerate(blocks) if b not in ours]
                names, blocks = [names[i] for i in keep], [blocks[i] for i in keep]
        blocks_ok = (self.uses_blocks() if blocks_wanted is None
                     else blocks_wanted and not self.leases.curator_names)
        by_block: dict[int, list[str]] = {}
        item_names: list[str] = []
        for n, b in zip(names, blocks):
            if blocks_ok and b is not None:
                by_block.setdefault(b, []).append(n)
            else:
                item_names.append(n)
        together = time.monotonic() >= self._split_claims_until
        try:
            held, reads, claimed, claim_locked, again = self._claim(by_block, item_names, together, joined)
            if again:  # a claim of several blocks met one held by another consumer: claim block by block
                self._split_claims_until = time.monotonic() + _SPLIT_CLAIMS_FOR
                again_by_block = {b: by_block[b] for b in again}
                held2, reads2, _none, locked2, _again = self._claim(again_by_block, [], False)
                held.update(held2)
                reads.update(reads2)
                claim_locked = claim_locked or locked2
        except FenceLostError:
            return [], True, []  # the session expired: every lease went with it
        locked = locked or claim_locked
        if joined or (by_block and item_names) or len(by_block) > 1:
            position = {n: i for i, n in enumerate(order)}
            held = dict(sorted(held.items(), key=lambda kv: position.get(kv[0], len(position))))
        handled, outcomes, more_locked = self._read_out(held, reads)
        handled.extend(claimed.gone)
        locked = locked or more_locked
        if self._claim_hook is not None and outcomes:
            outcomes = self._run_claim_hook(outcomes, handled)
        return handled, locked, outcomes

    def _claim(self, by_block: dict[int, list[str]], item_names: list[str], together: bool,
               joined: dict[str, Held] | None = None
               ) -> tuple[dict[str, Held], dict[str, Any], Claimed, bool, list[int]]:
        """Claim blocks (first sequence -> names) and ``item_names`` by item, and read what was claimed and what
        ``joined`` block leases held already (see :meth:`Leases.join_blocks`): (held by name, read result by name,
        the item claims, whether some were held by others, blocks to claim again)."""
        ctx = self._ctx
        leases = self.leases
        sent: list[Any] = []
        claimed = Claimed()
        held: dict[str, Held] = dict(joined or {})
        locked = False
        again: list[int] = []
        read_names: list[str] = []
        try:
            try:
                sent = leases.send_block_claims(by_block, together=together) if by_block else []
                claimed = leases.claim_items(item_names) if item_names else Claimed()
                read_names = ([*held] + [n for members in by_block.values() for n in members]
                              + [h.name for h in claimed.held])
                read = protocol.send_multi_read(ctx.client, [ctx.item_path(n) for n in read_names],
                                                limit=ctx.jute_max_buffer)
            finally:
                if sent:  # always learn what the block claims got, so nothing stays held unknowingly
                    got, locked, again = leases.finish_block_claims(sent)
                    held.update(got)
            for h in claimed.held:
                held[h.name] = h
            results = read.result()
        except FenceLostError:
            raise
        except BaseException:
            self._give_back(list(held.values()) + claimed.held)
            raise
        reads = {name: res for name, res in zip(read_names, results) if name in held}
        return held, reads, claimed, locked or claimed.locked, again

    def _read_out(self, held: dict[str, Held], reads: dict[str, Any]
                  ) -> tuple[list[str], list[Outcome], bool]:
        """Turn the reads of held nodes into outcomes to deliver; give back what is not ours to deliver and
        quarantine what cannot be decoded. Returns (names finished, outcomes, whether some were held by others)."""
        ctx = self._ctx
        self._sizer.note_sizes(list(reads.values()))
        handled: list[str] = []
        outcomes: list[Outcome] = []
        not_ours: list[Held] = []
        locked = False
        for name, h in held.items():
            res = reads.get(name)
            if res is None or isinstance(res, BaseException):
                if isinstance(res, NoNodeError):
                    ctx.counters.add("lost_races")  # taken and finished by another consumer before our claim
                    handled.append(name)
                else:
                    log.warning("reading held item %s failed: %r; releasing it", h.path, res)
                not_ours.append(h)
                continue
            data, stat = res
            if h.lease.kind is LeaseKind.BLOCK and stat.numChildren:
                # An item lease taken before our block claim (its fence is the child): not ours to touch.
                ctx.counters.add("lock_conflicts")
                locked = True
                not_ours.append(h)
                continue
            if large_ref.is_ref(data):
                try:  # a large item: its blob is read when the node is delivered (see zkqueue.engine.delivery)
                    ref, reason = large_ref.decode_ref(data), None
                except CorruptItemError as exc:
                    ref, reason = None, str(exc)
                items: list[Any] = []
            else:
                ref = None
                items, reason = decode_node(self._serializer, data)
            if reason is not None:
                self.completer.complete([Outcome(h, name, data, stat.version, items,
                                                 completion=Completion.quarantine(reason))])
                handled.append(name)
                continue
            outcomes.append(Outcome(h, name, data, stat.version, items, blob=ref, unread=ref is not None))
        self._give_back(not_ours)
        return handled, outcomes, locked

    def _give_back(self, held: list[Held]) -> None:
        """Give back items this step will not deliver: an item lease is released; a block lease just stops
        covering them (and is released once it covers nothing)."""
        if held:
            self.completer.release(held)

    def _release_outcomes(self, outcomes: list[Outcome]) -> None:
        self._give_back([o.held for o in outcomes if o.held is not None])

    def commit_fenced(self, outcomes: list[Outcome], ops_of: list[list[Any]], checks: list[Any] | None = None
                      ) -> list[Any]:
        """Commit ``ops_of[i]`` on held node ``outcomes[i]`` without ending it, each group fenced by the node's lease
        (its session fence, and the item lease's fence child), many groups per multi. Per node: None (no ops),
        False (its session, and so its lease, is gone) or the group's :class:`GroupOutcome`. Connection errors
        propagate: whether the ops committed is then unknown. The leases stay as they are (not downgraded) until
        the reply is in; commits on other nodes go on meanwhile. ``checks``: ops every group depends on, sent once
        per multi after the session fence's check; when one fails, every group fails with it (nothing commits)."""
        results: list[Any] = [None] * len(outcomes)
        plans: list[tuple[str | None, list[int], list[list[Any]]]] = []
        busy = self.leases.begin(o.held for i, o in enumerate(outcomes) if ops_of[i] and o.held is not None)
        try:
            by_fence: dict[str | None, list[int]] = {}
            for i, o in enumerate(outcomes):
                if ops_of[i]:
                    assert o.held is not None
                    by_fence.setdefault(o.held.lease.session_fence, []).append(i)
            for fence, indexes in by_fence.items():
                groups = []
                for i in indexes:
                    lease = outcomes[i].held.lease  # type: ignore[union-attr]
                    item_fence = lease.fence if lease.kind is LeaseKind.ITEM else None
                    groups.append(([check_op(item_fence)] if item_fence else []) + ops_of[i])
                plans.append((fence, indexes, groups))
            self._commit_plans(plans, results, list(checks or ()))
        finally:
            self.leases.end(busy)
        return results

    def _commit_plans(self, plans: list[tuple[str | None, list[int], list[list[Any]]]], results: list[Any],
                      checks: list[Any]) -> None:
        for fence, indexes, groups in plans:
            prefix = self.leases.prefix_for(fence)
            try:
                part = commit_groups(self._ctx, groups, prefix=prefix + checks)
            except PrefixFailedError as exc:
                if exc.index >= len(prefix):  # one of the checks: the groups not committed yet fail with it
                    done = exc.done or [None] * len(indexes)
                    part = [o if o is not None else GroupOutcome(False, error=exc.error, op=exc.index - len(prefix))
                            for o in done]
                else:
                    self.leases.fence_lost(fence)  # its session is gone, and the leases with it
                    part = [False] * len(indexes)
            for i, res in zip(indexes, part):
                results[i] = res

    def _run_claim_hook(self, outcomes: list[Outcome], handled: list[str]) -> list[Outcome]:
        """Commit the claim hook's ops for ``outcomes`` (fenced); return the outcomes that may be delivered. Nodes
        the hook completes at once (it returned a Completion) are finished here and added to ``handled``."""
        hook = self._claim_hook
        assert hook is not None
        ctx = self._ctx
        nodes = [o.node(o.held.path) for o in outcomes if o.held is not None]
        try:
            hook.prepare(nodes)
        except Exception:
            log.exception("claim hook prepare() of %s raised; giving the step back", ctx.queue_path)
            self._release_outcomes(outcomes)
            return []
        ops_of: list[list[Any]] = []
        failed: list[tuple[Outcome, BaseException | None]] = []
        at_once: list[Outcome] = []
        for o, node in zip(outcomes, nodes):
            try:
                ops = hook.claim_ops(node)
            except Exception as exc:
                log.exception("claim_ops of %s raised", node.path)
                ops_of.append([])
                failed.append((o, exc))
                continue
            if isinstance(ops, Completion):  # not to be delivered: finished at once
                o.completion = ops
                at_once.append(o)
                ops_of.append([])
                continue
            ops_of.append(list(ops))
        if at_once:
            self.completer.complete(at_once)
            handled.extend(o.name for o in at_once)
        failed_ids = {id(o) for o, _e in failed} | {id(o) for o in at_once}
        try:
            results = self.commit_fenced(outcomes, [[] if id(o) in failed_ids else ops
                                                   for o, ops in zip(outcomes, ops_of)])
        except CONNECTION_ERRORS as exc:
            # Unknown whether the claim ops committed: deliver nothing of this step; the nodes come back later.
            log.warning("claim ops on %s lost their reply (%r); giving the step back", ctx.queue_path, exc)
            self._release_outcomes(outcomes)
            return []
        keep: list[Outcome] = []
        for i, o in enumerate(outcomes):
            res = results[i]
            if id(o) in failed_ids or res is False:  # claim_ops raised or finished it, or the session is gone
                continue
            if res is None or res.ok:  # no claim ops for it, or they committed
                keep.append(o)
                continue
            log.warning("claim ops of %s failed: %r", o.held.path, res.error)  # type: ignore[union-attr]
            failed.append((o, res.error))
        for o, error in failed:
            assert o.held is not None
            try:
                completion = hook.claim_failed(o.node(o.held.path), error)
            except Exception:
                log.exception("claim_failed hook of %s raised; releasing the node", ctx.queue_path)
                completion = None
            if completion is None or completion.action == "release":
                self._give_back([o.held])
            else:
                o.completion = completion
                self.completer.complete([o])
        return keep
