"""Taking expired tokens out of a rate limit's grant log: each returned token comes out of one grant only."""

from __future__ import annotations

from zkqueue.jobs.rate import _without


def test_returns_come_out_of_their_buckets_and_no_more() -> None:
    grants = [(1000, 3), (1010, 2), (1020, 6)]
    assert _without(grants, {1000: 2, 1020: 6}) == ([(1000, 1), (1010, 2)], 8)
    assert _without(grants, {}) == (grants, 0)
    assert _without(grants, {990: 4}) == (grants, 0)  # that grant left the log: nothing to take out


def test_a_bucket_with_two_pairs_gives_each_returned_token_once() -> None:
    # Two workers whose clocks are a bucket apart can leave two pairs with one bucket in the log.
    grants = [(1000, 3), (1000, 4), (1010, 2)]
    kept, returned = _without(grants, {1000: 3})
    assert returned == 3 and sum(n for _t, n in kept) == 9 - 3
    assert _without(grants, {1000: 10}) == ([(1010, 2)], 7)  # never more than the bucket holds
