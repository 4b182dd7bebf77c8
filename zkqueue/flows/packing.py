"""Packing groups of ops (each one flow's change: an add, a hand-off) into as few multis as fit, and finding which
group a failed multi's op belongs to: what :mod:`zkqueue.flows.adds` and :meth:`Handoff.end_many
<zkqueue.flows.handoff.Handoff.end_many>` share."""

from __future__ import annotations

from typing import Any, Sequence

from zkqueue.engine import api


def pack(groups: Sequence[Sequence[Any]]) -> list[list[int]]:
    """The indexes of ``groups``, in order, cut into runs whose ops fit one multi each (ZooKeeper's buffer and the
    largest multi; a group too big for a multi of its own still gets one)."""
    budget = api.jute_max_buffer() - api.MULTI_SLACK
    chunks: list[list[int]] = []
    size = count = 0
    for i, ops in enumerate(groups):
        g_size = sum(api.op_cost(op) for op in ops)
        if not chunks or size + g_size > budget or count + len(ops) > api.MAX_MULTI_OPS:
            chunks.append([])
            size = count = 0
        chunks[-1].append(i)
        size += g_size
        count += len(ops)
    return chunks


def merge(groups: Sequence[Sequence[Any]]) -> tuple[list[Any], list[tuple[int, int]]]:
    """The ops of ``groups`` as one multi, a check repeated by later groups sent once (the session fence's check
    leads every fenced ack: ten hand-offs of one worker need it once), and per op of the multi the (group, index in
    it) it came from: a failed op names its group as :func:`owner` does for an unmerged multi (a shared check's
    failure names the first group that had it)."""
    ops: list[Any] = []
    owners: list[tuple[int, int]] = []
    checks: set[tuple[str, int]] = set()
    for k, group in enumerate(groups):
        for i, op in enumerate(group):
            if isinstance(op, api.CheckOp):
                key = (op.path, op.version)
                if key in checks:
                    continue
                checks.add(key)
            ops.append(op)
            owners.append((k, i))
    return ops, owners


def owner(groups: Sequence[Sequence[Any]], failed_index: int | None) -> tuple[int, int] | None:
    """Which of ``groups`` (sent together in one multi, in order) holds the multi's op ``failed_index``: (its
    position, the op's index within it); None when no op was named."""
    at = 0
    for k, ops in enumerate(groups):
        if failed_index is not None and at <= failed_index < at + len(ops):
            return k, failed_index - at
        at += len(ops)
    return None


__all__ = ["merge", "owner", "pack"]
