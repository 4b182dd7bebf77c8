"""Committing groups of ops atomically, in as few ZooKeeper multis as possible, and the op helpers around it.

A *group* is a list of ops that must commit together (an item's delete and its lock's delete, say). Many groups
share one multi; when a multi fails, only the group holding the failed op is given up and the rest is sent
again. A *prefix* (for example a ``check`` of the consumer's fence) leads every multi: if it fails, nothing
commits and :class:`PrefixFailedError` says so.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from kazoo.exceptions import NoAuthError

from zkqueue.errors import QueuePermissionError
from zkqueue.transport import protocol
from zkqueue.transport.requests import CONNECTION_ERRORS

if TYPE_CHECKING:
    from zkqueue.engine.context import QueueContext

log = logging.getLogger("zkqueue.engine.commit")

#: Most ops we put in one multi (ZooKeeper has no op-count limit; this keeps one request's latency sane).
MAX_OPS_PER_MULTI = 1000
#: Room left in a multi for headers beyond what :func:`op_size` counts.
MULTI_SLACK = 4096
#: Bytes an op costs in a multi besides its path and data (op header, flags, version, ACL), at most.
OP_OVERHEAD = 64


def create_op(path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
              acl: Any = None) -> protocol.CreateOp:
    return protocol.CreateOp(path, data, acl, ephemeral, sequence)


def delete_op(path: str, version: int = -1) -> protocol.DeleteOp:
    return protocol.DeleteOp(path, version)


def check_op(path: str, version: int = -1) -> protocol.CheckOp:
    return protocol.CheckOp(path, version)


def node_cost(path: str, data: bytes | None, chroot_len: int = 0) -> int:
    """Upper estimate of the bytes one op on ``path`` adds to a multi (UTF-8 at most 4 bytes a character)."""
    return len(path) * 4 + len(data or b"") + OP_OVERHEAD + chroot_len


def op_size(op: Any, chroot_len: int = 0) -> int:
    """Upper estimate of the bytes one op adds to a multi."""
    return node_cost(op.path, getattr(op, "data", None), chroot_len)


def run_multi_retrying(ctx: Any, ops: list[Any]) -> Any:
    """run_multi, sent again once after reconnecting on a connection error (for multis whose repeat is safe:
    fenced, version-checked, or creating a name of their own). ``ctx``: a queue's context, or anything with its
    ``client``, ``jute_max_buffer`` and ``connection.wait`` (a :class:`~zkqueue.engine.blobs.BlobTarget`)."""
    try:
        return protocol.run_multi(ctx.client, ops, limit=ctx.jute_max_buffer)
    except CONNECTION_ERRORS:
        if not ctx.connection.wait(30.0):
            raise
        return protocol.run_multi(ctx.client, ops, limit=ctx.jute_max_buffer)


def map_error(exc: BaseException) -> BaseException:
    """ZooKeeper's NoAuth as our typed :class:`QueuePermissionError`; anything else unchanged."""
    if isinstance(exc, NoAuthError):
        err = QueuePermissionError(f"ZooKeeper refused the operation for lack of credentials: {exc!r}")
        err.__cause__ = exc
        return err
    return exc


def copy_error(exc: BaseException) -> BaseException:
    """A copy of ``exc`` for one more thread to raise (a shared exception object's traceback would mix)."""
    try:
        dup = copy.copy(exc)
        dup.__traceback__ = None
        return dup
    except Exception:
        return exc


@dataclass
class GroupOutcome:
    """How one group of a :func:`commit_groups` call ended."""

    ok: bool
    results: list[Any] | None = None
    error: BaseException | None = None
    op: int | None = None  # index, within the group, of the op that failed
    ambiguous: bool = False  # the group was sent again after a lost reply: the first send may have committed


class PrefixFailedError(Exception):
    """The prefix of a multi (e.g. the check of a consumer's fence) failed: nothing of that multi committed.
    ``done``: from :func:`commit_groups`, per group its outcome when an earlier multi of the call committed it
    (None: not committed)."""

    def __init__(self, error: BaseException | None, index: int,
                 done: Sequence[GroupOutcome | None] = ()) -> None:
        super().__init__(f"prefix op {index} failed: {error!r}")
        self.error = error
        self.index = index
        self.done = list(done)


def fits_one_multi(ctx: QueueContext, ops: Sequence[Any]) -> bool:
    size = sum(op_size(op, ctx.chroot_len) for op in ops)
    return len(ops) <= MAX_OPS_PER_MULTI and size <= ctx.jute_max_buffer - MULTI_SLACK


def next_chunk(ctx: QueueContext, groups: Sequence[Sequence[Any]], pending: Sequence[int], budget: int,
               ops: list[Any]) -> tuple[list[int], list[Any], list[tuple[int, int]]]:
    """The groups at the head of ``pending`` that fit one multi after ``ops`` (at least one): their indexes, the
    multi's ops (``ops`` extended) and, per added op, its (group, index in group)."""
    chunk: list[int] = []
    owner: list[tuple[int, int]] = []
    size = 0
    for g in pending:
        g_size = sum(op_size(op, ctx.chroot_len) for op in groups[g])
        if chunk and (size + g_size > budget or len(ops) + len(groups[g]) > MAX_OPS_PER_MULTI):
            break
        chunk.append(g)
        for i, op in enumerate(groups[g]):
            ops.append(op)
            owner.append((g, i))
        size += g_size
    return chunk, ops, owner


def commit_groups(
    ctx: QueueContext,
    groups: Sequence[Sequence[Any]],
    *,
    prefix: Sequence[Any] = (),
    retry_connection: bool = False,
) -> list[GroupOutcome]:
    """Commit each group of ops atomically, in as few multis as possible, ``prefix`` leading each multi.

    All groups go into one multi (split by size and op count); when it fails, the group owning the failed op is
    marked failed and the rest is sent again. After two failures the remaining groups go one multi each,
    pipelined, so contention costs one round. With ``retry_connection`` a multi whose reply was lost is sent
    again once connected (safe only for fenced ops); its groups are then marked ``ambiguous``.
    """
    prefix = list(prefix)
    outcome: list[GroupOutcome | None] = [None] * len(groups)
    pending = list(range(len(groups)))
    failures = 0
    ambiguous = False
    budget = ctx.jute_max_buffer - MULTI_SLACK - sum(op_size(op, ctx.chroot_len) for op in prefix)
    while pending:
        if failures >= 2 and len(pending) > 1:
            _commit_each(ctx, groups, pending, outcome, prefix, ambiguous)
            break
        chunk, ops, owner = next_chunk(ctx, groups, pending, budget, list(prefix))
        try:
            result = protocol.run_multi(ctx.client, ops, limit=ctx.jute_max_buffer)
        except CONNECTION_ERRORS:
            if not retry_connection or not ctx.connection.wait(30.0):
                raise
            ambiguous = True
            continue
        if result.ok:
            offset = len(prefix)
            for g in chunk:
                n = len(groups[g])
                outcome[g] = GroupOutcome(True, result.results[offset : offset + n], ambiguous=ambiguous)
                offset += n
            pending = pending[len(chunk) :]
            continue
        if result.failed_index is None:
            raise result.failure if result.failure is not None else RuntimeError("multi failed")
        if result.failed_index < len(prefix):
            raise PrefixFailedError(result.failure, result.failed_index,
                                    [o if o is not None and o.ok else None for o in outcome])
        g, i = owner[result.failed_index - len(prefix)]
        outcome[g] = GroupOutcome(False, error=result.failure, op=i, ambiguous=ambiguous)
        pending.remove(g)
        failures += 1
    return [o if o is not None else GroupOutcome(False) for o in outcome]


def _commit_each(
    ctx: QueueContext,
    groups: Sequence[Sequence[Any]],
    pending: list[int],
    outcome: list[GroupOutcome | None],
    prefix: list[Any],
    ambiguous: bool,
) -> None:
    sent = [(g, protocol.send_multi(ctx.client, prefix + list(groups[g]), limit=ctx.jute_max_buffer))
            for g in pending]
    prefix_error: PrefixFailedError | None = None
    for g, reply in sent:
        try:
            result = reply.result()
        except Exception as exc:
            outcome[g] = GroupOutcome(False, error=exc, ambiguous=ambiguous)
            continue
        if result.ok:
            outcome[g] = GroupOutcome(True, result.results[len(prefix):], ambiguous=ambiguous)
        elif result.failed_index is not None and result.failed_index < len(prefix):
            prefix_error = PrefixFailedError(result.failure, result.failed_index)
            outcome[g] = GroupOutcome(False, error=result.failure, ambiguous=ambiguous)
        else:
            op = None if result.failed_index is None else result.failed_index - len(prefix)
            outcome[g] = GroupOutcome(False, error=result.failure, op=op, ambiguous=ambiguous)
    if prefix_error is not None and not any(o is not None and o.ok for o in outcome):
        raise prefix_error


def commit_with_tail(
    ctx: QueueContext,
    groups: Sequence[Sequence[Any]],
    tail: Sequence[Any],
    *,
    prefix: Sequence[Any] = (),
    retry_connection: bool = False,
) -> tuple[list[GroupOutcome], bool | None]:
    """Commit ``groups``, and ``tail`` in the same multi when everything fits one multi and commits.

    Returns the groups' outcomes and whether ``tail`` committed: True, False, or None when a lost reply leaves
    it unknown. When it did not commit (too big, or a group failed), the caller decides what to do with
    ``tail`` once the groups' outcomes are known: this is how releases that must follow acks still cost no
    extra round trip in the common case.
    """
    if tail and groups:
        ops = list(prefix) + [op for g in groups for op in g] + list(tail)
        if fits_one_multi(ctx, ops):
            try:
                result = protocol.run_multi(ctx.client, ops, limit=ctx.jute_max_buffer)
            except CONNECTION_ERRORS:
                if not retry_connection or not ctx.connection.wait(30.0):
                    raise
                outcomes = commit_groups(ctx, groups, prefix=prefix, retry_connection=True)
                for o in outcomes:
                    o.ambiguous = True
                return outcomes, None
            if result.ok:
                out, offset = [], len(prefix)
                for g in groups:
                    out.append(GroupOutcome(True, result.results[offset : offset + len(g)]))
                    offset += len(g)
                return out, True
            if result.failed_index is not None and result.failed_index < len(prefix):
                raise PrefixFailedError(result.failure, result.failed_index)
    return commit_groups(ctx, groups, prefix=prefix, retry_connection=retry_connection), not tail
