"""The no-lock taker (Curator's mode without a lock path): read, delete, then deliver (at-most-once).

Every take is one multi that deletes the nodes (version-checked) and creates a *receipt* node under
``<queue>-receipts``. When a reply is lost, the receipt tells exactly whether *this* consumer's multi committed
(the receipt exists) or not: "every node is gone" cannot, since a competing consumer may have taken them. So an
item is delivered only by the consumer whose delete committed: at-most-once, and nothing lost to a lost reply.
Receipts are deleted right after use; one can only be left behind by a crash at that moment.
"""

from __future__ import annotations

import logging
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError

from zkqueue.engine import blobs
from zkqueue.engine.commit import CONNECTION_ERRORS, MAX_OPS_PER_MULTI, create_op, delete_op
from zkqueue.engine.completion import Outcome
from zkqueue.engine.context import QueueContext
from zkqueue.engine.delivery import Delivery, decode_large, decode_node
from zkqueue.engine.quarantine import Quarantine
from zkqueue.engine.steps import StepSizer
from zkqueue.errors import CorruptItemError, QueueStateError
from zkqueue.formats import large_ref, naming
from zkqueue.transport import protocol

log = logging.getLogger("zkqueue.engine.nolock")


class NoLockTaker:
    """Takes nodes by deleting them, then delivers them."""

    def __init__(self, ctx: QueueContext, serializer: Any, delivery: Delivery, quarantine: Quarantine,
                 sizer: StepSizer) -> None:
        self._ctx = ctx
        self._serializer = serializer
        self._delivery = delivery
        self._quarantine = quarantine
        self._sizer = sizer

    def take(self, names: list[str]) -> tuple[list[str], bool]:
        """Take and deliver ``names``; return (names finished for this instance, False).

        Nodes are delivered in order: runs of ordinary nodes are taken together; a large item is taken on its own
        once its blob has been read (its item, chunks and blob are deleted in one multi, then it is delivered).
        """
        ctx = self._ctx
        paths = [ctx.item_path(n) for n in names]
        reads = protocol.multi_read(ctx.client, paths, limit=ctx.jute_max_buffer)
        self._sizer.note_sizes(reads)
        handled: list[str] = []
        run: list[tuple[str, str, Any]] = []
        for name, path, res in zip(names, paths, reads):
            if not isinstance(res, BaseException) and large_ref.is_ref(res[0]):
                self._take_run(run, handled)
                run = []
                self._take_large(name, path, res, handled)
            else:
                run.append((name, path, res))
        self._take_run(run, handled)
        return handled, False

    def _take_run(self, run: list[tuple[str, str, Any]], handled: list[str]) -> None:
        """Take and deliver a run of ordinary nodes (one multi with a receipt, or a few)."""
        ctx = self._ctx
        groups: list[list[Any]] = []
        entries: list[tuple[str, list[Any], bytes, int]] = []
        for name, path, res in run:
            if isinstance(res, BaseException):
                handled.append(name)  # skipped until the name leaves the listing
                if isinstance(res, NoNodeError):
                    ctx.counters.add("lost_races")
                else:
                    log.warning("cannot read %s: %r (skipped)", path, res)
                    ctx.counters.add("loop_errors")
                continue
            data, stat = res
            items, reason = decode_node(self._serializer, data)
            if reason is not None:
                self._quarantine.move(name, data, stat.version, reason)
                handled.append(name)
                continue
            groups.append([delete_op(path, stat.version)])
            entries.append((name, items, data, stat.version))
        self._take_groups(groups, entries, handled)

    def _take_large(self, name: str, path: str, res: tuple[bytes, Any], handled: list[str]) -> None:
        """Read a large item's blob, then take the item with its chunks and blob in one multi, and deliver it."""
        data, stat = res
        ref: large_ref.BlobRef | None = None
        try:
            ref = large_ref.decode_ref(data)
        except CorruptItemError as exc:
            items, reason = [], f"large item: {exc}"
        else:
            items, reason, blob_exists = decode_large(self._ctx, self._serializer, ref, name)
            if not blob_exists:
                ref = None
        if reason is not None:
            extra = [] if ref is None else blobs.quarantined_ops(ref, self._quarantine.target(name))
            self._quarantine.move(name, data, stat.version, reason, extra_ops=extra)
            handled.append(name)
            return
        assert ref is not None
        self._take_groups([[delete_op(path, stat.version), *blobs.removal_ops(ref)]],
                          [(name, items, data, stat.version)], handled)

    def _take_groups(self, groups: list[list[Any]], entries: list[tuple[str, list[Any], bytes, int]],
                     handled: list[str]) -> None:
        if not groups:
            return
        ctx = self._ctx
        results = self._delete_with_receipts(groups)
        deliver: list[Outcome] = []
        for (name, items, data, version), (ok, err) in zip(entries, results):
            handled.append(name)
            if ok:
                deliver.append(Outcome(None, name, data, version, items))
            elif isinstance(err, (NoNodeError, BadVersionError, NotEmptyError)):
                ctx.counters.add("lost_races")  # another consumer got it
            else:
                log.warning("could not take %s/%s: %r", ctx.queue_path, name, err)
                ctx.counters.add("loop_errors")
        self._delivery.deliver_all(deliver, complete=None)

    def _delete_with_receipts(self, groups: list[list[Any]]) -> list[tuple[bool, Any]]:
        """Commit the delete groups of a take; every multi also creates a receipt node (see the module docs)."""
        ctx = self._ctx
        outcome: list[tuple[bool, Any] | None] = [None] * len(groups)
        pending = list(range(len(groups)))
        failures = 0
        while pending:
            # After two contended rounds, one multi per item (pipelined), so one lost race costs one item.
            chunks = [pending[: MAX_OPS_PER_MULTI - 1]] if failures < 2 else [[g] for g in pending]
            sent = []
            for chunk in chunks:
                receipt = naming.join(ctx.receipt_path, "r-" + ctx.tokens.next())
                ops = [create_op(receipt, b"", acl=ctx.acl)] + [op for g in chunk for op in groups[g]]
                sent.append((chunk, receipt, protocol.send_multi(ctx.client, ops, limit=ctx.jute_max_buffer)))
            for chunk, receipt, pending_result in sent:
                try:
                    result = pending_result.result()
                except CONNECTION_ERRORS as exc:
                    if self._receipt_committed(receipt, exc):
                        self._finish_chunk(chunk, receipt, outcome, pending)
                    continue  # not committed: the chunk stays pending and is sent again
                if result.ok:
                    self._finish_chunk(chunk, receipt, outcome, pending)
                    continue
                if result.failed_index == 0:
                    if isinstance(result.failure, NoNodeError):
                        ctx.client.ensure_path(ctx.receipt_path, acl=ctx.acl)
                        continue
                    raise result.failure if result.failure is not None else RuntimeError("receipt create failed")
                if result.failed_index is None:
                    raise result.failure if result.failure is not None else RuntimeError("multi failed")
                g = self._group_at(chunk, groups, result.failed_index - 1)
                outcome[g] = (False, result.failure)
                pending.remove(g)
                failures += 1
        return [o if o is not None else (False, None) for o in outcome]

    @staticmethod
    def _group_at(chunk: list[int], groups: list[list[Any]], op_index: int) -> int:
        """The group of ``chunk`` that holds op ``op_index`` of the chunk's ops (after the receipt)."""
        for g in chunk:
            op_index -= len(groups[g])
            if op_index < 0:
                return g
        return chunk[-1]

    def _finish_chunk(self, chunk: list[int], receipt: str, outcome: list[Any], pending: list[int]) -> None:
        for g in chunk:
            outcome[g] = (True, None)
            pending.remove(g)
        self._ctx.client.delete_async(receipt)  # best effort; a leftover receipt is a few bytes, harmless

    def _receipt_committed(self, receipt: str, first_error: BaseException) -> bool:
        """After a lost reply: did the multi that creates ``receipt`` commit?"""
        ctx = self._ctx
        log.warning("take on %s lost its reply (%r); checking its receipt", ctx.queue_path, first_error)
        for _ in range(5):
            if not ctx.connection.wait(30.0):
                break
            try:
                return ctx.client.exists(receipt) is not None
            except CONNECTION_ERRORS:
                continue
        raise QueueStateError(
            f"could not learn whether a take on {ctx.queue_path} committed (receipt {receipt}); the items of "
            "that take are not delivered if it did (at-most-once)"
        )
