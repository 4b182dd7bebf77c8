"""The consumer's in-memory window over job indexes (no I/O): which indexes run, which finished, and the
processed index, which only moves over consecutive finished jobs."""

from __future__ import annotations


class Window:
    """``processed``: every index up to it finished. ``next_index``: the lowest index not yet dispatched.
    An index may be dispatched while fewer than ``max_processing`` run and it is at most ``max_search_ahead``
    past ``processed``."""

    def __init__(self, processed: int, max_processing: int, max_search_ahead: int) -> None:
        self.processed = processed
        self.next_index = processed + 1
        self.max_processing = max_processing
        self.max_search_ahead = max_search_ahead
        self.running: set[int] = set()
        self.finished: set[int] = set()  # above processed

    def limit(self) -> int:
        """The highest index that may be dispatched now (by search-ahead)."""
        return self.processed + self.max_search_ahead

    def free(self) -> int:
        """How many more jobs may start now."""
        room = self.max_processing - len(self.running)
        ahead = self.limit() - self.next_index + 1
        return max(0, min(room, ahead))

    def start(self, index: int) -> None:
        if index != self.next_index:
            raise ValueError(f"dispatch out of order: {index}, expected {self.next_index}")
        if len(self.running) >= self.max_processing or index > self.limit():
            raise ValueError(f"no room for {index}")
        self.running.add(index)
        self.next_index += 1

    def skip(self, index: int) -> bool:
        """Count ``index`` as finished without running it (a hand-off marker says it finished before)."""
        if index != self.next_index:
            raise ValueError(f"skip out of order: {index}, expected {self.next_index}")
        self.next_index += 1
        return self.finish(index, was_running=False)

    def finish(self, index: int, was_running: bool = True) -> bool:
        """Mark ``index`` finished; whether ``processed`` moved."""
        if was_running:
            if index not in self.running:
                raise ValueError(f"{index} is not running")
            self.running.discard(index)
        if index <= self.processed:
            return False
        self.finished.add(index)
        moved = False
        while self.processed + 1 in self.finished:
            self.finished.discard(self.processed + 1)
            self.processed += 1
            moved = True
        return moved
