"""Pure parts of the run loop: how consumers split a queue's blocks, step sizes, block-aligned steps."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from zkqueue.engine.run_loop import _block_end, share_first
from zkqueue.engine.steps import FIRST_STEP, HOLD_SECONDS, StepSizer
from zkqueue.formats import naming


def names(seqs) -> list[str]:
    return [f"queue-{s:010d}" for s in seqs]


@given(st.lists(st.integers(0, 5000), unique=True, max_size=300).map(sorted), st.integers(1, 6))
def test_every_consumer_gets_every_name_once_and_its_own_blocks_first(seqs, count) -> None:
    listing = names(seqs)
    owned = set()
    for rank in range(count):
        ordered, own_end = share_first(listing, rank, count)
        assert sorted(ordered) == sorted(listing)  # nothing dropped, nothing twice
        own = ordered[:own_end]
        assert own == [n for n in listing if (naming.block_of(n) // naming.BLOCK_SPAN) % count == rank]  # FIFO
        assert not owned & set(own)  # shares never overlap
        owned |= set(own)
    assert owned == set(listing)


def test_helpers_start_at_the_next_owner_and_go_backwards() -> None:
    listing = names(range(0, 64 * 9, 32))  # blocks 0..8, two names each
    ordered, own_end = share_first(listing, 1, 3)  # own blocks 1, 4, 7
    blocks = [naming.block_of(n) // naming.BLOCK_SPAN for n in ordered]
    assert blocks[:own_end] == [1, 1, 4, 4, 7, 7]
    assert blocks[own_end:] == [8, 8, 5, 5, 2, 2, 6, 6, 3, 3, 0, 0]  # owner 2 from its end, then owner 0


def test_a_step_ends_on_a_block_boundary_when_its_last_block_goes_on() -> None:
    listing = names(range(200))  # blocks start at 0, 64, 128, 192
    assert _block_end(listing, 0, 100) == 64  # pulled back to the start of block 64
    assert _block_end(listing, 64, 128) == 128  # already on a boundary
    assert _block_end(listing, 0, 30) == 30  # within the first block: unchanged (never below one block)
    assert _block_end(listing, 0, 200) == 200


def test_step_sizes_grow_until_a_node_is_read_then_follow_size_and_pace() -> None:
    pace = [None]
    sizer = StepSizer(4 * 1024 * 1024, lambda: pace[0])
    assert [sizer.size(300) for _ in range(4)] == [FIRST_STEP, 2 * FIRST_STEP, 4 * FIRST_STEP, 8 * FIRST_STEP]
    sizer.note_sizes([(b"x" * 100, None), KeyError("gone")])
    assert sizer.size(300) == 300
    pace[0] = 0.1  # 0.1 s a node: a step holds about HOLD_SECONDS of work
    assert sizer.size(300) == int(HOLD_SECONDS / 0.1)
