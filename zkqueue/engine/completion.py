"""Completion: how held items end (lock-safe mode), each in one fenced multi with the lease bookkeeping.

A consumed node is acked (deleted), requeued (deleted and created again, in the same multi), moved to another
queue, released untouched or quarantined: per Curator's error mode for item consumers, or per the
:class:`~zkqueue.engine.seams.Completion` a node consumer returned, plus that completion's extra ops. Many nodes
share one multi; a block lease whose last item finishes is released in that same multi when it commits.

Work whose reply was lost to a connection loss is kept and retried (the fence makes a retry safe, and an
``ambiguous`` flag lets the retry recognise its own earlier commit); the run loop calls :meth:`retry_deferred`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from kazoo.exceptions import NoNodeError

from zkqueue.consumer import ErrorMode
from zkqueue.engine import blobs
from zkqueue.engine.commit import (
    CONNECTION_ERRORS,
    GroupOutcome,
    PrefixFailedError,
    commit_groups,
    commit_with_tail,
    create_op,
    delete_op,
    fits_one_multi,
)
from zkqueue.engine.context import QueueContext
from zkqueue.engine.leases import Held, Lease, LeaseKind, Leases
from zkqueue.engine.quarantine import Quarantine
from zkqueue.engine.seams import ClaimedNode, Completion
from zkqueue.errors import LockLostError, QueueStateError
from zkqueue.formats import framing, naming
from zkqueue.formats.large_ref import BlobRef
from zkqueue.transport import protocol

log = logging.getLogger("zkqueue.engine.completion")


@dataclass(eq=False)
class _Inflight:
    """Completions sent by :meth:`Completer.submit` and not collected yet."""

    fence: str | None
    plan: list[tuple[Outcome, Completion]]
    tail_leases: list[Lease]
    reply: Any
    busy: list[Lease]  # the leases it keeps busy until it is collected (see Leases.begin)


@dataclass(eq=False)
class Outcome:
    """A node handed to the consumer, and what came of it."""

    held: Held | None
    name: str
    data: bytes
    version: int
    items: list[Any]
    failed_at: int | None = None  # index of the item whose consumer raised
    error: BaseException | None = None
    completion: Completion | None = None  # what a node consumer asked for
    ambiguous: bool = False  # an earlier attempt to complete it may have committed
    blob: BlobRef | None = None  # a large item's blob (the node's data is its reference)
    unread: bool = False  # a large item whose blob is not read yet: ``items`` is empty until then
    #: How its completion ended, once known: ``"done"`` (committed: acked, requeued or moved), ``"released"``
    #: (given back), ``"quarantined"``, ``"lost"`` (the lease was gone: nothing committed, the node is someone
    #: else's); None while it is not known (not completed yet, or deferred after a lost reply: retried later, at
    #: the latest when the queue closes).
    settled: str | None = None
    #: The leases :meth:`Puller.ack_ops <zkqueue.engine.pull.Puller.ack_ops>` keeps busy (not downgraded, so the ops
    #: it built stay right) until the node is forgotten, released or completed.
    ack_busy: list[Lease] | None = None

    def node(self, path: str) -> ClaimedNode:
        return ClaimedNode(self.name, path, self.version, self.data, self.items)


class Completer:
    """Finishes the held items of one lock-safe queue instance."""

    def __init__(
        self,
        ctx: QueueContext,
        leases: Leases,
        quarantine: Quarantine,
        *,
        error_mode: Callable[[], ErrorMode],
        requeue_prefix: Callable[[str], str],
    ) -> None:
        self._ctx = ctx
        self._leases = leases
        self._quarantine = quarantine
        self._error_mode = error_mode
        self._requeue_prefix = requeue_prefix
        self._deferred_lock = threading.Lock()
        self._deferred: list[Outcome] = []
        self._deferred_releases: list[Held] = []
        self._released: set[str] = set()  # names given back since the run loop last asked
        self._inflight: deque[_Inflight] = deque()  # sent by submit(), in order, not collected yet
        self._collecting = 0  # in-flight completions being collected now (by any thread)
        self._collected = threading.Condition()  # guards the two above
        self._local = threading.local()  # .collecting: this thread collects now (it must not wait for itself)

    def take_released(self) -> set[str]:
        """Names of the nodes given back untouched since the last call: the run loop tries them again."""
        with self._deferred_lock:
            released, self._released = self._released, set()
        return released

    # ------------------------------------------------------------------------------------------ decisions
    def _decide(self, o: Outcome) -> Completion:
        if o.completion is not None:
            return o.completion
        if o.error is not None and self._error_mode() is ErrorMode.REQUEUE:
            data = None
            if o.failed_at is not None and o.failed_at > 0 and len(o.items) > 1:
                # don't redeliver what was consumed: requeue the failed item and the ones after it
                data = framing.encode_items(framing.decode_items(o.data)[o.failed_at :])
            return Completion.requeue(data=data)
        return Completion.ack()

    def _core_ops(self, o: Outcome, c: Completion) -> list[Any]:
        """The ops of completion ``c`` on ``o``'s node, before any lease ops."""
        assert o.held is not None
        path = o.held.path
        if c.action == "ack":
            return [delete_op(path, o.version), *self._blob_ops(o, blobs.removal_ops), *c.extra_ops]
        if c.action in ("requeue", "move"):
            prefix = c.prefix if c.prefix is not None else self._requeue_prefix(path)
            data = c.data if c.data is not None else o.data
            # The same reference re-created keeps the blob (marked moving); new data replaces it.
            blob_ops = self._blob_ops(o, blobs.moving_ops if c.data is None else blobs.removal_ops)
            return [delete_op(path, o.version), create_op(prefix, data, sequence=True, acl=self._ctx.acl),
                    *blob_ops, *c.extra_ops]
        if c.action == "release":
            return list(c.extra_ops)
        raise ValueError(f"unknown completion action {c.action!r}")

    @staticmethod
    def _blob_ops(o: Outcome, ops_of: Callable[[BlobRef], list[Any]]) -> list[Any]:
        return ops_of(o.blob) if o.blob is not None else []

    # ------------------------------------------------------------------------------------------ complete
    def complete(self, outcomes: list[Outcome]) -> None:
        """Finish consumed nodes now. Never raises for an item: failures are logged, counted and retried or
        released."""
        self.collect()
        busy = self._leases.begin(o.held for o in outcomes if o.held is not None)
        try:
            for fence, plan in self._plan(outcomes).items():
                self._commit(fence, plan)
        finally:
            self._leases.end(busy)

    def submit(self, outcomes: list[Outcome]) -> None:
        """Send the completions of ``outcomes`` without waiting for the reply; :meth:`collect` (called before
        the next step is delivered, and by everything else that touches leases) finishes them. This is how a
        step's acks overlap the next step's claim on one thread: ZooKeeper answers a session in order, so the
        claim that follows sees them. Their leases stay busy (not downgraded) until they are collected."""
        self.collect()
        busy = self._leases.begin(o.held for o in outcomes if o.held is not None)
        try:
            for fence, plan in self._plan(outcomes).items():
                groups = self._groups(plan)
                tail, tail_leases = self._leases.releases_if_finished(o.held for o, _c in plan if o.held)
                prefix = self._leases.prefix_for(fence)
                ops = prefix + [op for g in groups for op in g] + tail
                if not fits_one_multi(self._ctx, ops):
                    self._commit(fence, plan)
                    continue
                try:
                    reply = protocol.send_multi(self._ctx.client, ops, limit=self._ctx.jute_max_buffer)
                except Exception as exc:  # e.g. the client is closed: the sync path decides what to do
                    log.debug("could not send a completion of %d on %s (%r)", len(plan), self._ctx.queue_path, exc)
                    self._commit(fence, plan)
                    continue
                sent = self._leases.begin(o.held for o, _c in plan if o.held is not None)  # until collected
                with self._collected:
                    self._inflight.append(_Inflight(fence, plan, tail_leases, reply, sent))
        finally:
            self._leases.end(busy)

    def collect(self) -> None:
        """Finish every completion sent by :meth:`submit` (and wait for those other threads are finishing)."""
        if getattr(self._local, "collecting", False):
            return  # called while collecting (a release of a failed completion): the outer loop goes on
        with self._collected:
            if not self._inflight and not self._collecting:
                return  # nothing sent (pull mode)
        self._local.collecting = True
        try:
            while True:
                with self._collected:
                    while not self._inflight and self._collecting:
                        self._collected.wait()
                    if not self._inflight:
                        return
                    f = self._inflight.popleft()
                    self._collecting += 1
                try:
                    self._collect_one(f)
                finally:
                    self._leases.end(f.busy)
                    with self._collected:
                        self._collecting -= 1
                        self._collected.notify_all()
        finally:
            self._local.collecting = False

    @property
    def in_flight(self) -> bool:
        with self._collected:
            return bool(self._inflight) or self._collecting > 0

    def _collect_one(self, f: _Inflight) -> None:
        try:
            result = f.reply.result()
        except CONNECTION_ERRORS as exc:
            self._ctx.connection.failover.error(exc, f"completing {len(f.plan)} item(s) (checking them)")
            self._commit(f.fence, f.plan, after_lost_reply=True)
            return
        except Exception as exc:
            log.warning("completion of %d item(s) on %s failed (%r); will retry", len(f.plan),
                        self._ctx.queue_path, exc)
            self._defer([o for o, _c in f.plan])
            return
        if result.ok:
            finished = []
            for o, c in f.plan:
                assert o.held is not None
                self._succeeded(o, c)
                finished.append(o.held)
            for lease in f.tail_leases:
                lease.tail = "done"  # deleted by the multi that just committed
            self._leases.release_blocks(self._leases.finished(finished))
            return
        prefix_len = len(self._leases.prefix_for(f.fence))
        if result.failed_index is not None and result.failed_index < prefix_len:
            self._leases.fence_lost(f.fence)
            for o, _c in f.plan:
                self._lock_lost(o)
            return
        self._commit(f.fence, f.plan)  # all-or-nothing: nothing committed; sort it out group by group

    def _plan(self, outcomes: list[Outcome]) -> dict[str | None, list[tuple[Outcome, Completion]]]:
        """Decide each outcome's completion (quarantines are done at once) and group them by session fence."""
        by_fence: dict[str | None, list[tuple[Outcome, Completion]]] = {}
        for o in outcomes:
            assert o.held is not None
            c = self._decide(o)
            if c.action == "quarantine":
                self._quarantine_held(o, c)
            else:
                by_fence.setdefault(o.held.lease.session_fence, []).append((o, c))
        return by_fence

    def _groups(self, plan: list[tuple[Outcome, Completion]]) -> list[list[Any]]:
        groups = []
        for o, c in plan:
            assert o.held is not None
            core = self._core_ops(o, c)
            groups.append(self._leases.release_group(o.held, core) if c.action == "release"
                          else self._leases.finish_group(o.held, core))
        return groups

    def _commit(self, fence: str | None, plan: list[tuple[Outcome, Completion]], *,
                after_lost_reply: bool = False) -> None:
        """Commit the completions of nodes leased under session fence ``fence`` (a check of it leads each multi).
        ``after_lost_reply``: an earlier send of exactly these may have committed."""
        groups = self._groups(plan)
        helds = [o.held for o, _c in plan if o.held is not None]
        tail, tail_leases = ([], []) if after_lost_reply else self._leases.releases_if_finished(helds)
        if after_lost_reply:
            for o, _c in plan:
                o.ambiguous = True
            if not self._ctx.connection.wait(30.0):
                self._defer([o for o, _c in plan])
                return
        try:
            results, tail_done = commit_with_tail(self._ctx, groups, tail, prefix=self._leases.prefix_for(fence),
                                                  retry_connection=True)
        except PrefixFailedError:
            self._leases.fence_lost(fence)
            for o, _c in plan:
                self._lock_lost(o)
            return
        except Exception as exc:
            log.warning("completing %d item(s) on %s failed (%r); will retry", len(plan), self._ctx.queue_path, exc)
            self._defer([o for o, _c in plan])
            return
        if after_lost_reply:
            tail_done = None  # the lost multi carried the block releases: whether they happened is unknown
        finished: list[Held] = []
        for (o, c), res in zip(plan, results):
            assert o.held is not None
            if res.ok:
                self._succeeded(o, c)
                finished.append(o.held)
            elif isinstance(res.error, CONNECTION_ERRORS):
                self._defer([o])  # outcome unknown: the lease stays until we know
            else:
                if self._failed(o, c, res):
                    finished.append(o.held)
        if tail_done is True:
            # The tail deleted the locks of the leases it was planned for. A lease can also be emptied by this
            # completion without being in its tail: another member was given back on another thread while this
            # multi waited. Its lock is deleted now, or it would hold the rest of its block for the session's life.
            for lease in tail_leases:
                lease.tail = "done"
        self._leases.release_blocks(self._leases.finished(finished), unsure=tail_done is None)

    def _succeeded(self, o: Outcome, c: Completion) -> None:
        o.settled = "released" if c.action == "release" else "done"
        self._count(o, c)
        if c.action == "release":
            with self._deferred_lock:
                self._released.add(o.name)

    def _count(self, o: Outcome, c: Completion) -> None:
        counters = self._ctx.counters
        if c.action == "requeue":
            counters.add("requeued")
        elif c.action == "move":
            counters.add("moved")
        elif c.action == "release":
            counters.add("released")
        elif o.error is not None:
            counters.add("deleted_on_error")

    def _failed(self, o: Outcome, c: Completion, res: GroupOutcome) -> bool:
        """A completion failed for a reason other than the connection. Returns True when the item is finished
        for this consumer (done after all, lost, or released)."""
        h = o.held
        assert h is not None
        err = res.error
        item_lease = h.lease.kind is LeaseKind.ITEM
        if c.action == "release" and isinstance(err, NoNodeError):
            o.settled = "released"
            return True  # nothing left to give back
        if c.action in ("requeue", "move") and isinstance(err, NoNodeError) and res.op == (2 if item_lease else 1):
            prefix = c.prefix if c.prefix is not None else self._requeue_prefix(h.path)
            if c.action == "requeue" and prefix.rsplit("/", 1)[0] != self._ctx.queue_path:
                # A requeue into a time bucket (a parked back-off) whose bucket was moved and deleted meanwhile:
                # its time has come, so the node goes straight into the queue under the same name (never early).
                o.completion = dataclasses.replace(
                    c, prefix=naming.join(self._ctx.queue_path, prefix.rsplit("/", 1)[-1]))
                self._defer([o])
                return False
            # The target's parent is missing: create it and try again on the next pass of the run loop.
            log.warning("%s of %s: %s has no parent node; creating it", c.action, h.path, prefix)
            try:
                self._ctx.client.ensure_path(prefix.rsplit("/", 1)[0] or "/", acl=self._ctx.acl)
            except Exception as exc:
                log.warning("could not create the parent of %s: %r", prefix, exc)
            self._defer([o])
            return False
        # The op that shows whether we still held the item: an item lease's fence delete, else the item delete.
        if isinstance(err, NoNodeError) and res.op == 0:
            ambiguous = o.ambiguous or res.ambiguous
            try:
                (exists,) = self._leases.exist([h.path])
            except QueueStateError:  # no definite answer now: decide on a later pass
                self._defer([o])
                return False
            if ambiguous and not exists:
                o.settled = "done"
                return True  # our own earlier attempt committed
            if item_lease:
                self._lock_lost(o)
                return True
            log.warning("item %s vanished while this consumer held its block (deleted by someone else?)", h.path)
            self._ctx.counters.add("lost_races")
            o.settled = "lost"
            return True
        log.warning("completing %s (%s) failed: %r; releasing it for redelivery", h.path, c.action, err)
        self._ctx.counters.add("loop_errors")
        o.settled = "released"
        self.release([h])
        return False  # release() finished it

    def _lock_lost(self, o: Outcome) -> None:
        assert o.held is not None
        o.settled = "lost"
        self._ctx.counters.add("lock_lost")
        log.warning("%s", LockLostError(
            f"lock on {o.held.path} was lost (session expired?); the ack was refused and the item is left to "
            "its new owner"
        ))

    def _quarantine_held(self, o: Outcome, c: Completion) -> None:
        h = o.held
        assert h is not None
        offset = 1 if h.lease.kind is LeaseKind.ITEM else 0
        target = self._quarantine.target(o.name)
        extra = [*self._blob_ops(o, lambda ref: blobs.quarantined_ops(ref, target)), *c.extra_ops]
        try:
            self._quarantine.move(o.name, o.data, o.version, c.reason or "quarantined by its consumer",
                                  prefix=self._leases.prefix_for(h.lease.session_fence),
                                  wrap=lambda ops: self._leases.finish_group(h, ops), offset=offset, extra_ops=extra)
        except Exception as exc:
            log.warning("quarantining %s failed (%r); releasing it", h.path, exc)
            o.settled = "released"
            self.release([h])
            return
        o.settled = "quarantined"
        self._leases.release_blocks(self._leases.finished([h]))

    # ------------------------------------------------------------------------------------------ release
    def release(self, held: list[Held]) -> None:
        """Give items back untouched. Retried later if the connection is down (the fence makes that safe)."""
        if not held:
            return
        busy = self._leases.begin(held)
        try:
            by_fence: dict[str | None, list[Held]] = {}
            for h in held:
                by_fence.setdefault(h.lease.session_fence, []).append(h)
            for fence, part in by_fence.items():
                self._release(fence, part)
        finally:
            self._leases.end(busy)

    def forget(self, held: list[Held]) -> None:
        """Drop items whose nodes the caller already deleted in a multi of its own (built from the lease's ack
        ops): an item lease's lock went with it; a block lease emptied now has its lock deleted here, unless that
        multi carried the delete (see :func:`zkqueue.engine.held.block_tail`)."""
        if not held:
            return
        # Not "released": their nodes are gone, and a released name is claimed again while a listing shows it.
        self._leases.release_blocks(self._leases.finished(held))

    def _release(self, fence: str | None, held: list[Held]) -> None:
        with self._deferred_lock:
            self._released.update(h.name for h in held)
        groups = [self._leases.release_group(h) for h in held]
        item_groups = [(h, g) for h, g in zip(held, groups) if g]
        finished = [h for h, g in zip(held, groups) if not g]
        if item_groups:
            try:
                results = commit_groups(self._ctx, [g for _h, g in item_groups], prefix=self._leases.prefix_for(fence))
            except PrefixFailedError:
                self._leases.fence_lost(fence)
                return
            except Exception as exc:
                log.warning("releasing %d lock(s) on %s failed (%r); will retry", len(item_groups),
                            self._ctx.queue_path, exc)
                with self._deferred_lock:
                    self._deferred_releases.extend(h for h, _g in item_groups)
                results = []
            for (h, _g), res in zip(item_groups, results):
                if not res.ok and isinstance(res.error, CONNECTION_ERRORS):
                    with self._deferred_lock:
                        self._deferred_releases.append(h)  # the item fence goes first: a repeat is harmless
                    continue
                if not res.ok and not isinstance(res.error, NoNodeError):
                    log.warning("releasing %s: %r", h.path, res.error)
                finished.append(h)
        self._leases.release_blocks(self._leases.finished(finished))

    # ------------------------------------------------------------------------------------------ deferred
    def _defer(self, outcomes: list[Outcome]) -> None:
        for o in outcomes:
            o.ambiguous = True
        with self._deferred_lock:
            self._deferred.extend(outcomes)

    def retry_deferred(self) -> bool:
        """Collect sent completions, and retry those that failed for lack of a connection; True while some
        remain."""
        self.collect()
        blocks_pending = self._leases.retry_releases()
        with self._deferred_lock:
            outcomes, self._deferred = self._deferred, []
            releases, self._deferred_releases = self._deferred_releases, []
        if not outcomes and not releases:
            return blocks_pending
        if not self._ctx.connection.connected.is_set():
            with self._deferred_lock:
                self._deferred[:0] = outcomes
                self._deferred_releases[:0] = releases
            return True
        if outcomes:
            self.complete(outcomes)
        if releases:
            self.release(releases)
        return self.has_deferred() or blocks_pending

    def has_deferred(self) -> bool:
        with self._deferred_lock:
            return bool(self._deferred or self._deferred_releases)
