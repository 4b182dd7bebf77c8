"""Merging hand-off groups into one multi (zkqueue.flows.packing.merge): a check repeated by later groups goes
once, and every op of the multi still names its group and its index in it."""

from __future__ import annotations

from zkqueue.engine.api import check_op, create_op, delete_op
from zkqueue.flows import packing


def test_a_repeated_check_goes_once_and_every_op_names_its_group() -> None:
    fence = check_op("/q/locks/fence-1", -1)
    groups = [
        [fence, delete_op("/q/queue/a", 0), create_op("/q/next/a", b"")],
        [check_op("/q/locks/fence-1", -1), delete_op("/q/queue/b", 0)],
        [check_op("/q/locks/fence-1", 3), delete_op("/q/queue/c", 0)],  # another version: not the same check
    ]
    ops, owners = packing.merge(groups)
    assert [getattr(op, "path", None) for op in ops] == [
        "/q/locks/fence-1", "/q/queue/a", "/q/next/a", "/q/queue/b", "/q/locks/fence-1", "/q/queue/c"]
    assert owners == [(0, 0), (0, 1), (0, 2), (1, 1), (2, 0), (2, 1)]
    assert packing.merge([]) == ([], [])
