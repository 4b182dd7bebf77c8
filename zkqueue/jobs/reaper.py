"""Keeping finished records in bounds: at most ``count`` completed (or dead) records, none older than ``age``
seconds. The reaper wakes every ``interval`` seconds and only lists a tree when its child count says it is over
the count, or when an age bound is set; it deletes the oldest first, in batched multis."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from kazoo.protocol.states import KeeperState

from zkqueue.engine import api
from zkqueue.engine.api import ClientServices, delete_op
from zkqueue.errors import ConfigurationError
from zkqueue.jobs.model import now_ms

log = logging.getLogger("zkqueue.jobs.reaper")


@dataclass(frozen=True)
class Keep:
    """How many finished records to keep, and for how long (None: no bound)."""

    count: int | None = 10_000
    age: float | None = 7 * 24 * 3600.0

    def __post_init__(self) -> None:
        if self.count is not None and (isinstance(self.count, bool) or not isinstance(self.count, int)
                                       or self.count < 0):
            raise ConfigurationError(f"Keep.count must be None or an int >= 0, got {self.count!r}")
        if self.age is not None and (isinstance(self.age, bool) or not isinstance(self.age, (int, float))
                                     or self.age < 0):
            raise ConfigurationError(f"Keep.age must be None or seconds >= 0, got {self.age!r}")


def reap(client: Any, parent: str, keep: Keep) -> int:
    """Delete the records under ``parent`` beyond ``keep``; return how many were deleted."""
    stat = client.exists(parent)
    if stat is None or stat.numChildren == 0:
        return 0
    if keep.age is None and (keep.count is None or stat.numChildren <= keep.count):
        return 0
    names = client.get_children(parent)
    paths = [f"{parent}/{n}" for n in names]
    stats = api.multi_read(client, paths)
    aged = sorted((res[1].mtime, path, res[1].version) for path, res in zip(paths, stats)
                  if not isinstance(res, BaseException))
    doomed: list[tuple[str, int]] = []
    if keep.age is not None:
        cutoff = now_ms() - int(keep.age * 1000)
        doomed = [(path, version) for mtime, path, version in aged if mtime < cutoff]
    if keep.count is not None and len(aged) - len(doomed) > keep.count:
        kept = [(path, version) for mtime, path, version in aged[len(doomed):]]
        doomed += kept[: len(kept) - keep.count]
    deleted = 0
    for start in range(0, len(doomed), 500):
        chunk = doomed[start : start + 500]
        replies = [api.send_multi(client, [delete_op(path, version)]) for path, version in chunk]
        deleted += sum(1 for r in replies if r.result().ok)  # a record redriven or re-added meanwhile stays
    if deleted:
        log.info("reaped %d finished record(s) under %s", deleted, parent)
    return deleted


class Reaper:
    """Runs :func:`reap` over ``(parent, keep)`` pairs every ``interval`` seconds, and each of ``chores`` (more
    clean-ups of the same kind: ``chore() -> how many nodes it deleted``), as a chore on the shared thread of its
    client (:class:`zkqueue.engine.api.ClientServices`), with every job queue and flow on that client."""

    def __init__(self, client: Any, targets: list[tuple[str, Keep]], interval: float, name: str,
                 chores: Sequence[Callable[[], int]] = ()) -> None:
        self._client = client
        self._targets = targets
        self._chores = list(chores)
        self._interval = interval
        self._name = name
        self._cancel: Callable[[], None] | None = None
        self._client_closed = False  # said once: the client was closed under a running reaper

    def start(self) -> None:
        self._cancel = ClientServices.of(self._client).every(self._interval, self._pass)

    def stop(self) -> None:
        cancel, self._cancel = self._cancel, None
        if cancel is not None:
            cancel()

    def _pass(self) -> None:
        if self._client.client_state == KeeperState.CLOSED:
            # Closed by its owner while a queue on it is still open: every request would fail, and a warning with
            # its traceback every interval would say nothing new. Said once; the passes resume if it is started
            # again.
            if not self._client_closed:
                self._client_closed = True
                log.warning("%s: its ZooKeeper client was closed before the queue; reaping waits until the client "
                            "is started again (close the queue, or its app, before the client)", self._name)
            return
        self._client_closed = False
        for parent, keep in self._targets:
            try:
                reap(self._client, parent, keep)
            except Exception:  # never dies; tried again next interval
                log.warning("reaping %s failed (tried again in %.0fs)", parent, self._interval, exc_info=True)
        for chore in self._chores:
            try:
                chore()
            except Exception:  # never dies; tried again next interval
                log.warning("a clean-up of the reaper failed (tried again in %.0fs)", self._interval,
                            exc_info=True)
