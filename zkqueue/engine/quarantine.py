"""Quarantine: a node that cannot be decoded (or that a node consumer gives up on) is moved aside to the
quarantine path in one transaction, never deleted silently. Curator logs such items and drops them."""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from kazoo.exceptions import NodeExistsError, NoNodeError

from zkqueue.engine.commit import create_op, delete_op, run_multi_retrying
from zkqueue.engine.context import QueueContext
from zkqueue.formats import naming

log = logging.getLogger("zkqueue.engine.quarantine")


class Quarantine:
    """Moves nodes of one queue to its quarantine path."""

    def __init__(self, ctx: QueueContext) -> None:
        self._ctx = ctx

    def target(self, name: str) -> str:
        """Where node ``name`` goes (unless a node of that name is there already: then a sequential sibling)."""
        return naming.join(self._ctx.quarantine_path, name)

    def move(
        self,
        name: str,
        data: bytes,
        version: int,
        reason: str,
        *,
        prefix: Sequence[Any] = (),
        wrap: Callable[[list[Any]], list[Any]] | None = None,
        offset: int = 0,
        extra_ops: Sequence[Any] = (),
    ) -> bool:
        """Move node ``name`` (at ``version``) to the quarantine path; True if it moved.

        ``wrap`` turns the move's ops into the held item's group (adding a lease's fence and lock deletes) and
        ``offset`` is where the quarantine create lands in it; ``prefix`` leads the multi (a fence check).
        """
        ctx = self._ctx
        target = self.target(name)
        lead = len(prefix)
        for sequence in (False, True):
            core = [
                create_op(target + ("-" if sequence else ""), data or b"", sequence=sequence, acl=ctx.acl),
                delete_op(ctx.item_path(name), version),
                *extra_ops,
            ]
            group = wrap(core) if wrap is not None else core
            result = run_multi_retrying(ctx, list(prefix) + group)
            if result.ok:
                ctx.counters.add("corrupt_quarantined")
                log.error("Corrupted queue item %s/%s moved to %s: %s", ctx.queue_path, name,
                          result.results[lead + offset], reason)
                return True
            at = None if result.failed_index is None else result.failed_index - lead - offset
            if isinstance(result.failure, NodeExistsError) and at == 0 and not sequence:
                continue
            if isinstance(result.failure, NoNodeError) and at == 0:
                ctx.client.ensure_path(ctx.quarantine_path, acl=ctx.acl)
                continue
            log.warning("could not quarantine %s/%s (%s): %r", ctx.queue_path, name, reason, result.failure)
            ctx.counters.add("lost_races")
            return False
        return False
