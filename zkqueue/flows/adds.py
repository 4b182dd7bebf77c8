"""Group commit of flow adds: the multis of :meth:`Flow.add <zkqueue.flows.Flow.add>` calls made at the same time
(from many threads) go to ZooKeeper together, many per multi, instead of one multi each.

A caller hands its ops to :meth:`AddCommits.commit` and blocks; the first caller with nothing under way leads: it
sends every add waiting then (packed into multis that fit), and sends again whatever came meanwhile, while the
others wait for their part. Each caller gets what its own multi would have got: a multi that fails is split, the
add whose op failed gets the failure (its index within its own ops), the others are sent again; a lost reply is
raised to every caller of that multi (each then reads its flow record, as after a lost reply of its own).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from zkqueue.flows import packing

log = logging.getLogger("zkqueue.flows.adds")


@dataclass
class Part:
    """One add's share of a multi's outcome (as a multi of its own would end)."""

    ok: bool
    results: list[Any] = field(default_factory=list)
    failed_index: int | None = None
    failure: BaseException | None = None


class _Waiting:
    __slots__ = ("done", "error", "ops", "result")

    def __init__(self, ops: list[Any]) -> None:
        self.ops = ops
        self.done = threading.Event()
        self.result: Part | None = None
        self.error: BaseException | None = None


class AddCommits:
    """Commits the adds of one flow, many per multi (see the module docs). ``send(ops)`` commits one multi (the
    flow's :func:`~zkqueue.flows.flow.commit` seam)."""

    def __init__(self, send: Callable[[list[Any]], Any]) -> None:
        self._send = send
        self._lock = threading.Lock()
        self._waiting: list[_Waiting] = []
        self._leading = False
        #: Multis sent and adds committed through them (for benchmarks and tests).
        self.multis = 0
        self.adds = 0

    def commit(self, ops: list[Any]) -> Part:
        """Commit ``ops`` (one add), with the adds of other threads waiting now; raises what lost the reply."""
        me = _Waiting(ops)
        with self._lock:
            self._waiting.append(me)
            lead = not self._leading
            if lead:
                self._leading = True
        if lead:
            self._lead()
        me.done.wait()
        if me.error is not None:
            raise me.error
        assert me.result is not None
        return me.result

    def _lead(self) -> None:
        while True:
            with self._lock:
                batch, self._waiting = self._waiting, []
                if not batch:
                    self._leading = False
                    return
            try:
                self._commit(batch)
            except BaseException as exc:  # noqa: BLE001 - every waiter of the batch learns it
                for w in batch:
                    if not w.done.is_set():
                        w.error = exc
                        w.done.set()

    def _commit(self, batch: list[_Waiting]) -> None:
        pending = batch
        while pending:
            chunk = [pending[i] for i in packing.pack([w.ops for w in pending])[0]]
            pending = pending[len(chunk):]
            try:
                result = self._send([op for w in chunk for op in w.ops])
            except BaseException as exc:  # noqa: BLE001 - a lost reply: the chunk's callers check their records
                for w in chunk:
                    w.error = exc
                    w.done.set()
                continue
            self.multis += 1
            if result.ok:
                at = 0
                for w in chunk:
                    w.result = Part(True, list(result.results[at:at + len(w.ops)]))
                    at += len(w.ops)
                    w.done.set()
                self.adds += len(chunk)
                continue
            found = packing.owner([w.ops for w in chunk], result.failed_index)
            if found is None:  # no op named: each goes alone
                self._commit_each(chunk + pending)
                return
            k, index = found
            chunk[k].result = Part(False, failed_index=index, failure=result.failure)
            chunk[k].done.set()
            pending = chunk[:k] + chunk[k + 1:] + pending

    def _commit_each(self, pending: list[_Waiting]) -> None:
        for w in pending:
            try:
                result = self._send(list(w.ops))
            except BaseException as exc:  # noqa: BLE001
                w.error = exc
                w.done.set()
                continue
            w.result = Part(result.ok, list(result.results or []), result.failed_index, result.failure)
            w.done.set()


__all__ = ["AddCommits", "Part"]
