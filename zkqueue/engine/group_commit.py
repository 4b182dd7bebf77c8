"""Group commit for foreground puts: concurrent callers share one multi instead of a round trip each.

A caller finding no group in flight leads at once (a lone thread pays no added latency: a batch of one is a plain
create). Callers arriving meanwhile queue up, each blocked on its own lock. When the leader's request completes
it wakes exactly the callers of its batch and hands the lead to the first caller still waiting, who sends
everything waiting (within one multi's size budget) as ONE multi: no thundering herd of waiters. Each caller
still blocks until its own node is committed and gets its own result or error.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Callable, Protocol

from zkqueue.engine.commit import CONNECTION_ERRORS, copy_error
from zkqueue.errors import PutOutcomeUnknown, QueueStateError


class PutRequest(Protocol):
    """What a grouped put needs of a request: where its node goes (the producer's requests carry more)."""

    prefix: str

log = logging.getLogger("zkqueue.engine.group_commit")


class _Slot:
    """One foreground put waiting in a group."""

    __slots__ = ("req", "done", "created", "error", "wake")

    def __init__(self, req: PutRequest) -> None:
        self.req = req
        self.done = False
        self.wake = threading.Lock()  # held until the slot is done or handed the lead
        self.wake.acquire()
        self.created: str | None = None
        self.error: BaseException | None = None


class GroupCommit:
    """Commits foreground puts in groups.

    ``send_batch(reqs)`` sends several puts as one multi and returns its pending reply; ``create_one(req)``
    creates one put's node; ``take(waiting, batch, req_of)`` moves puts that fit one multi from ``waiting`` to
    ``batch``.
    """

    def __init__(
        self,
        send_batch: Callable[[list[PutRequest]], Any],
        create_one: Callable[[PutRequest], str | None],
        take: Callable[[deque[Any], list[Any], Callable[[Any], PutRequest]], None],
        name: str,
    ) -> None:
        self._send_batch = send_batch
        self._create_one = create_one
        self._take = take
        self._name = name
        self._lock = threading.Lock()
        self._waiting: deque[_Slot] = deque()
        self._leading = False

    @property
    def waiting(self) -> int:
        """Callers queued behind the group in flight."""
        with self._lock:
            return len(self._waiting)

    def put(self, req: PutRequest) -> str | None:
        """Create ``req``'s node, grouped with concurrent callers; return its path (None when a lost reply was
        settled as committed) or raise its error."""
        slot = _Slot(req)
        with self._lock:
            follow = self._leading
            if follow:
                self._waiting.append(slot)
            else:
                self._leading = True
        if follow:
            slot.wake.acquire()  # our batch is done, or we were handed the lead
        if not slot.done:
            self._lead(slot)
        if slot.error is not None:
            raise slot.error
        return slot.created

    def _lead(self, slot: _Slot) -> None:
        """Commit ``slot`` and whoever waits behind it, then wake them and hand the lead on."""
        batch = [slot]
        successor: _Slot | None = None
        try:
            with self._lock:
                self._take(self._waiting, batch, lambda s: s.req)
            self._commit(batch)
        finally:
            for s in batch:
                if not s.done:  # only when something escaped _commit (e.g. KeyboardInterrupt)
                    s.error = QueueStateError(f"put to {s.req.prefix} was interrupted; outcome unknown")
                    s.done = True
            with self._lock:
                if self._waiting:
                    successor = self._waiting.popleft()
                else:
                    self._leading = False
            for s in batch[1:]:
                s.wake.release()
            if successor is not None:
                successor.wake.release()

    def _commit(self, batch: list[_Slot]) -> None:
        """Create the nodes of ``batch`` (in order) and record each slot's outcome; never raises for an op."""
        if len(batch) > 1:
            result = None
            try:
                result = self._send_batch([s.req for s in batch]).result()
            except (*CONNECTION_ERRORS, PutOutcomeUnknown) as exc:
                # Nothing sent (the marker could not be read), or ZooKeeper stayed unreachable after a lost reply:
                # every caller of the group gets the error.
                for s in batch:
                    s.error = copy_error(exc)
                    s.done = True
                return
            except Exception:
                log.debug("group put multi of %d on %s failed to send; creating one by one", len(batch),
                          self._name, exc_info=True)
            if result is not None and result.ok:
                for s, created in zip(batch, result.results):
                    s.created = created
                    s.done = True
                return
            # All-or-nothing: one bad op failed the multi; create one by one so each caller gets its own outcome.
        for s in batch:
            try:
                s.created = self._create_one(s.req)
            except Exception as exc:
                s.error = exc
            s.done = True
