"""The one backoff of the background loops (zkqueue.engine.api.Backoff): doubling pauses up to a maximum, added
jitter, full jitter, and the count of errors in a row."""

from __future__ import annotations

import pytest

from zkqueue.engine.api import Backoff


def test_pauses_double_per_error_in_a_row_up_to_the_maximum_and_reset_after_a_success() -> None:
    b = Backoff(0.1, 1.0)
    assert [b.failed() for _ in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert b.failures == 6
    b.succeeded()
    assert b.failures == 0 and b.failed() == pytest.approx(0.1)


def test_added_jitter_stays_within_its_bound() -> None:
    b = Backoff(0.1, 1.0, jitter=0.05)
    pauses = [b.delay(2) for _ in range(500)]
    assert all(0.2 <= p <= 0.25 for p in pauses) and max(pauses) > min(pauses)


def test_full_jitter_draws_between_zero_and_the_doubling_bound() -> None:
    b = Backoff(0.002, 0.2, full_jitter=True)
    for failures, bound in [(1, 0.002), (4, 0.016), (9, 0.2), (30, 0.2)]:
        pauses = [b.delay(failures) for _ in range(500)]
        assert all(0 <= p <= bound + 1e-12 for p in pauses), failures
        assert max(pauses) > bound / 2  # spread over the range, not pinned at its floor


def test_a_backoff_needs_a_positive_start_below_its_maximum() -> None:
    for initial, maximum in [(0, 1.0), (2.0, 1.0), (-1, 1.0)]:
        with pytest.raises(ValueError):
            Backoff(initial, maximum)
