"""Step sizing: how many nodes the run loop takes at once.

A step takes ``batch_size`` nodes at most; fewer when nodes are big, so one step reads about ``max_batch_bytes``
(a small first step while the node size is unknown); and fewer when the consumer is slow, so one step holds about
:data:`HOLD_SECONDS` of its work and idle consumers are not kept off work a slow one has taken.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from zkqueue.formats.large_ref import node_bytes

#: A consumer takes (leases, or removes in no-lock mode) at most about this many seconds of work per step.
HOLD_SECONDS = 0.5
#: Nodes in the first step, before their size is known.
FIRST_STEP = 16


class StepSizer:
    """Sizes steps from the nodes' measured size and the consumer's measured pace."""

    def __init__(self, max_batch_bytes: int, pace: Callable[[], float | None]) -> None:
        self._max_batch_bytes = max_batch_bytes
        self._pace = pace
        self.avg_node_bytes: float | None = None
        self._blind_steps = 0  # steps sized before any node was read (they found nothing: taken by others)

    def note_sizes(self, reads: Sequence[Any]) -> None:
        """Learn node sizes from a multiRead's results (``(data, stat)`` or an exception each); a large item's
        reference counts as the bytes it refers to, so steps of large items are small."""
        sizes = [node_bytes(r[0]) for r in reads if not isinstance(r, BaseException)]
        if sizes:
            mean = sum(sizes) / len(sizes)
            self.avg_node_bytes = mean if self.avg_node_bytes is None else (self.avg_node_bytes + mean) / 2

    def size(self, step: int) -> int:
        """Nodes for the next step, at most ``step``."""
        avg = self.avg_node_bytes
        if avg is None:
            # Still no node read (other consumers took what we tried): grow, so we do not crawl.
            self._blind_steps += 1
            return min(step, FIRST_STEP << min(self._blind_steps - 1, 8))
        n = max(1, min(step, self._max_batch_bytes // max(1, int(avg))))
        pace = self._pace()
        if pace is not None and pace * n > HOLD_SECONDS:
            n = max(1, int(HOLD_SECONDS / pace))
        return n
