"""The consumption order of a queue's children, kept from one listing to the next.

Pull-mode claims (:mod:`zkqueue.engine.pull`) look at the whole listing on every claim. Sorting it and asking
``get_delay`` of every name each time costs O(n log n) name parses per claim: with thousands of jobs waiting, more
than the claim's own round trips. A queue whose order is a key per name (its ``order_key`` hook) gets a
:class:`KeptOrder` instead: a new listing only drops the names that went and merges in the new ones, each parsed
once, and each name's due time is remembered as a wall-clock instant (``now + get_delay(name)`` is the instant
written in the name, so it stays right whatever the clock does later; it is compared with the clock of each scan).
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Any, Callable, Iterable, Iterator

class KeptOrder:
    """The names of the latest listing in ``order_key`` order, with their due times (see the module docs).

    ``get_delay(name)`` must be "the name's due instant minus now" (as in every recipe), so that it can be kept as
    an instant.
    """

    def __init__(self, order_key: Callable[[str], Any], get_delay: Callable[[str], float]) -> None:
        self._order_key = order_key
        self._get_delay = get_delay
        self._keys: dict[str, Any] = {}
        self._due: dict[str, float] = {}
        self._order: list[str] = []
        self._names: frozenset[str] = frozenset()

    def due(self, present: Iterable[str], excluded: Callable[[str], bool]) -> DueScan:
        """The names of ``present`` that are due and not ``excluded``, in order, found as they are taken (a claim
        that gets its nodes from the head of a long queue does not look at the rest)."""
        self._update(present)
        scan = DueScan(())
        scan.feed(self._scan(scan, excluded))
        return scan

    def _scan(self, scan: DueScan, excluded: Callable[[str], bool]) -> Iterator[str]:
        now = time.time()
        mono = time.monotonic()
        due_at = self._due
        for name in self._order:
            at = due_at[name]
            if at > now:
                scan.note_wait(at - now, mono)
            elif not excluded(name):
                yield name

    def _update(self, present: Iterable[str]) -> None:
        names = frozenset(present)  # the same object when given a frozenset
        if names is self._names or names == self._names:  # the same listing's set: no O(n) comparison
            return
        keys = self._keys
        kept = [n for n in self._order if n in names]
        new = list(names - self._names)
        for n in new:
            if n not in keys:
                keys[n] = self._order_key(n)
            self._due[n] = self._get_delay(n) + time.time()  # the clock read after the delay: never early
        new.sort(key=keys.__getitem__)
        self._order = list(heapq.merge(kept, new, key=keys.__getitem__)) if kept and new else kept or new
        if len(keys) > 2 * len(names) + 1024:  # forget names long gone
            self._keys = {n: keys[n] for n in self._order}
            self._due = {n: self._due[n] for n in self._order}
        self._names = names


class DueScan:
    """Due names in consumption order, handed out in batches (:meth:`take`). :attr:`next_due` (the monotonic
    instant the first name not due yet will be, None: none waits) is complete once :meth:`take` has returned an
    empty batch."""

    def __init__(self, names: Iterable[str], wait: float | None = None) -> None:
        self._names: Iterator[str] = iter(names)
        self._back: list[str] = []
        self.next_due: float | None = None
        if wait is not None:
            self.note_wait(wait, time.monotonic())

    def note_wait(self, seconds: float, since: float) -> None:
        """A name will be due ``seconds`` after the monotonic instant ``since``."""
        at = since + seconds
        self.next_due = at if self.next_due is None else min(self.next_due, at)

    def feed(self, names: Iterator[str]) -> None:
        self._names = names

    def take(self, count: int) -> list[str]:
        """The next ``count`` due names (fewer at the end)."""
        out, self._back = self._back[:count], self._back[count:]
        if len(out) < count:
            out.extend(itertools.islice(self._names, count - len(out)))
        return out

    def give_back(self, names: list[str]) -> None:
        """Names taken but not tried: the next :meth:`take` starts with them."""
        self._back = names + self._back

    def any_due(self) -> bool:
        """Whether a :meth:`take` now would hand out a name (none is taken)."""
        self._back.extend(() if self._back else itertools.islice(self._names, 1))
        return bool(self._back)
