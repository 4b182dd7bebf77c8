"""The engine's seams: how the layers above (jobs, flows) hook into lock-safe consumption without forking it.

Three seams, all fenced by the consumer's lease, so a consumer whose session expired can never apply them:

- **Node consumers.** A consumer with a ``consume_node(node: ClaimedNode) -> Completion | None`` method gets each
  claimed node whole (name, version, raw data, decoded items) instead of one ``consume_message`` call per item,
  and says how the node ends by returning a :class:`Completion` (``None`` means :meth:`Completion.ack`).
- **Fenced completion with extra ops.** Every :class:`Completion` carries ``extra_ops`` (``zkqueue.transport``
  ops: creates, deletes, set_data, checks) that commit in the SAME multi as the node's ack, requeue, move or
  quarantine, or not at all.
- **Move to another queue.** :meth:`Completion.move_to` deletes the node and creates a node with its data (or
  new data) at another queue's prefix in one multi: a hand-off that cannot run twice or get lost.
- **Claim hooks.** A :class:`ClaimHook` adds ops to the claim of each node: they commit, fenced by the lease,
  after the node is leased and read and before any consumer sees it (e.g. counting a job's attempt, so the
  count survives a consumer that crashes mid-job). A node whose claim ops fail is not delivered; the hook's
  ``claim_failed`` says what happens to it. ``claim_ops`` may instead return a :class:`Completion`: the node is
  then finished at once and never delivered.
- **Admission.** Before a claim, :meth:`ClaimHook.admit` says how many of the due nodes may be claimed now (it may
  wait, e.g. at a rate limit, and must return 0 soon once the queue closes); :meth:`ClaimHook.unused` gets back
  the admitted ones that were not delivered (lost races, claim ops that failed). The engine claims the admitted
  prefix of what is due and leaves the rest for later: it knows nothing of what the hook counts.

Completions other than a plain ack need a lock path (lock-safe mode): without one, items are deleted before
delivery (Curator's at-most-once mode) and a returned completion is ignored with a warning.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class ClaimedNode:
    """One queue node held by this consumer: what a node consumer and a claim hook see."""

    name: str
    path: str
    version: int
    data: bytes
    items: list[Any]


@dataclass(frozen=True)
class Completion:
    """How a claimed node ends, committed in one fenced multi together with ``extra_ops``.

    Build one with the class methods. ``action`` is ``"ack"`` (delete the node), ``"requeue"`` (delete it and
    create it again at ``prefix`` in the same queue, by default the queue's own requeue prefix), ``"move"``
    (delete it and create it at ``prefix`` in another queue), ``"release"`` (leave it untouched for the next
    consumer; ``extra_ops`` still commit) or ``"quarantine"`` (move it to the quarantine path).
    """

    action: str
    prefix: str | None = None
    data: bytes | None = None
    extra_ops: tuple[Any, ...] = field(default=())
    reason: str | None = None

    @classmethod
    def ack(cls, extra_ops: Sequence[Any] = ()) -> Completion:
        return cls("ack", extra_ops=tuple(extra_ops))

    @classmethod
    def requeue(cls, prefix: str | None = None, data: bytes | None = None,
                extra_ops: Sequence[Any] = ()) -> Completion:
        """Back into this queue: at ``prefix`` (a full sequential prefix such as ``/q/queue-|<epoch hex>|``) or
        the queue's own requeue prefix; with ``data`` instead of the node's own bytes."""
        return cls("requeue", prefix=prefix, data=data, extra_ops=tuple(extra_ops))

    @classmethod
    def move_to(cls, prefix: str, data: bytes | None = None, extra_ops: Sequence[Any] = ()) -> Completion:
        """Into another queue: a sequential node at ``prefix`` (e.g. ``/queues/next/queue-``)."""
        return cls("move", prefix=prefix, data=data, extra_ops=tuple(extra_ops))

    @classmethod
    def release(cls, extra_ops: Sequence[Any] = ()) -> Completion:
        return cls("release", extra_ops=tuple(extra_ops))

    @classmethod
    def quarantine(cls, reason: str, extra_ops: Sequence[Any] = ()) -> Completion:
        return cls("quarantine", extra_ops=tuple(extra_ops), reason=reason)


@runtime_checkable
class NodeConsumer(Protocol):
    """A consumer that takes whole claimed nodes and decides how each ends."""

    def consume_node(self, node: ClaimedNode) -> Completion | None: ...


class ClaimHook:
    """Ops committed with the claim of each node (see the module docs). Subclass and override."""

    def prepare(self, nodes: Sequence[ClaimedNode]) -> None:
        """Called once per step with every node just claimed, before :meth:`claim_ops` is asked for each (e.g. to
        read records for all of them in one request)."""

    def claim_ops(self, node: ClaimedNode) -> Sequence[Any] | Completion:
        """Ops to commit, fenced, before ``node`` is delivered (none by default); or a :class:`Completion` to
        finish the node at once without delivering it (e.g. a job out of attempts goes to the dead letters)."""
        return ()

    def claim_failed(self, node: ClaimedNode, error: BaseException | None) -> Completion:
        """``node``'s claim ops failed with ``error``: what to do with it (default: release it untouched; it
        is tried again after the usual retry delay)."""
        return Completion.release()

    def admit(self, count: int, closing: threading.Event, timeout: float | None = None) -> int:
        """How many of ``count`` due nodes may be claimed now (default: all). It may wait (e.g. for a rate limit's
        budget) but returns 0 at once when ``closing`` is set, and 0 after ``timeout`` seconds (a pull's timeout;
        None: no limit) if it cannot admit any. Called on the claiming thread, before the claim."""
        return count

    def unused(self, count: int) -> None:
        """``count`` nodes the last :meth:`admit` on this thread let through were not delivered (taken by others,
        held, their claim failed or finished them at once): a budget may use them again. Called on the same
        thread, after the claim."""
