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

from zkqueue.engine.commit import CONNECTION_ERRORS, MAX_OPS_PER_MULTI, create_op, delete_op
from zkqueue.engine.completion import Outcome
from zkqueue.engine.context import QueueContext
from zkqueue.engine.delivery import Delivery, decode_node
from zkqueue.engine.quarantine import Quarantine
from zkqueue.engine.steps import StepSizer
from zkqueue.errors import QueueStateError
from zkqueue.formats import naming
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
        """Take and deliver ``names``; return (names finished for this instance, False)."""
        ctx = self._ctx
        paths = [ctx.item_path(n) for n in names]
        reads = protocol.multi_read(ctx.client, paths, limit=ctx.jute_max_buffer)
        self._sizer.note_sizes(reads)
        handled: list[str] = []
        groups: list[list[Any]] = []
        entries: list[tuple[str, list[Any], bytes, int]] = []
        for name, path, res in zip(names, paths, reads):
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
        if not groups:
            return handled, False
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
        return handled, False

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
                g = chunk[result.failed_index - 1]
                outcome[g] = (False, result.failure)
                pending.remove(g)
                failures += 1
        return [o if o is not None else (False, None) for o in outcome]

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
