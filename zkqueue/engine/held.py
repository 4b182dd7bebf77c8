"""The pull seam's held node: a queue node that :meth:`DistributedQueue.claim_nodes
<zkqueue.engine.queue.DistributedQueue.claim_nodes>` claimed for its caller, held under this process's lease until
the caller ends it.

A :class:`HeldNode` is how the layers above (the job layer's takes and workers, flows, the asyncio queue, Spark's
consumers, the Celery transport) see a claimed node: what it holds (``name``, ``path``, ``version``, ``data``,
``items``) and four ways to end it, each built and fenced by the engine (the session fence's check, the lease's
fence, the node at its version):

- :meth:`HeldNode.finish` commits a :class:`~zkqueue.engine.seams.Completion` (ack, requeue, move, release with
  extra ops); :func:`finish_nodes` finishes many, in as few multis as their queues can pack them;
- :meth:`HeldNode.release` (:func:`release_nodes`) gives it back untouched;
- :meth:`HeldNode.ack_ops` builds the ops of its ack for a multi the caller commits itself (the flows' hand-off),
  after which :meth:`HeldNode.forget` (:func:`forget_nodes`) lets go of it without a request;
- :func:`commit_while_held` commits ops fenced by the lease while the node stays held (a job's attempt counted as
  it starts).

The engine's own record of the node (its lease, blob, completion state) stays inside the engine.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Sequence

from zkqueue.engine.completion import Outcome
from zkqueue.engine.pull import Puller
from zkqueue.engine.seams import ClaimedNode, Completion

log = logging.getLogger("zkqueue.engine.held")

__all__ = ["BlockTail", "HeldNode", "block_tail", "commit_while_held", "finish_nodes", "forget_nodes", "release_nodes"]


class HeldNode:
    """A node claimed by :meth:`DistributedQueue.claim_nodes`, held under this process's lease until it is finished,
    released or forgotten: end it exactly once, by one of them. A lost session ends the lease: the node is then
    someone else's, and its end reports ``settled == "lost"``."""

    __slots__ = ("_outcome", "_puller")

    def __init__(self, outcome: Outcome, puller: Puller) -> None:
        self._outcome = outcome
        self._puller = puller  # the claims of the queue that holds it

    # ------------------------------------------------------------------------------------------ what it holds
    @property
    def name(self) -> str:
        """The node's name in its queue."""
        return self._outcome.name

    @property
    def path(self) -> str:
        """The node's full path."""
        held = self._outcome.held
        return held.path if held is not None else ""

    @property
    def queue_path(self) -> str:
        """The path of the queue that holds it."""
        return self._puller.queue_path

    @property
    def version(self) -> int:
        """The node's data version when it was claimed (its ack is checked against it)."""
        return self._outcome.version

    @property
    def data(self) -> bytes:
        """The node's raw data (a large item's reference, not its blob)."""
        return self._outcome.data

    @property
    def items(self) -> list[Any]:
        """The node's items, decoded (a large item's blob read)."""
        return self._outcome.items

    @property
    def completion(self) -> Completion | None:
        """How :func:`finish_nodes` ends it (None: an ack, or the error mode's choice when :attr:`error` is set)."""
        return self._outcome.completion

    @completion.setter
    def completion(self, completion: Completion | None) -> None:
        self._outcome.completion = completion

    @property
    def error(self) -> BaseException | None:
        """The error its consumer raised, if any: with no :attr:`completion`, the queue's error mode decides."""
        return self._outcome.error

    @error.setter
    def error(self, error: BaseException | None) -> None:
        self._outcome.error = error

    @property
    def settled(self) -> str | None:
        """How its end went, once known: ``"done"`` (committed: acked, requeued or moved), ``"released"`` (given
        back), ``"quarantined"``, ``"lost"`` (the lease was gone; nothing committed); None until it is known (not
        ended yet, or a lost reply whose completion the engine retries, at the latest when the queue closes)."""
        return self._outcome.settled

    def node(self) -> ClaimedNode:
        """The node as a claim hook sees it."""
        return self._outcome.node(self.path)

    def __repr__(self) -> str:
        return f"HeldNode({self.path!r}, version={self.version}, settled={self.settled!r})"

    # ------------------------------------------------------------------------------------------ ending it
    def finish(self, completion: Completion | None = None) -> str | None:
        """End the node by ``completion`` (None: as :attr:`completion` says, an ack by default), committed by the
        engine fenced by the lease; returns :attr:`settled`."""
        if completion is not None:
            self._outcome.completion = completion
        finish_nodes([self])
        return self.settled

    def release(self) -> None:
        """Give the node back untouched: it can be claimed again at once."""
        release_nodes([self])

    def ack_ops(self, extra_ops: Sequence[Any] = ()) -> tuple[list[Any], int]:
        """The ops of this node's ack with ``extra_ops``, fenced exactly as the engine commits them (the session
        fence's check, the item lease's fence child, the node at its version, ``extra_ops``, a large item's blob,
        the lease's lock), and the index of the first extra op: a failure before it means the lease was lost.
        Commit them in a multi of your own, then call :meth:`forget` (or :meth:`release` if it did not commit).
        Under a block lease the ack is the node's delete alone; the block's lock goes once its last member is
        forgotten. From the first call until the node is ended its lease stays as it is (a block lease is not moved
        to item leases meanwhile)."""
        return self._puller.ack_ops(self._outcome, list(extra_ops))

    def forget(self) -> None:
        """After a multi from :meth:`ack_ops` committed: the engine lets go of the node (it is gone, with its
        lease's lock), sending nothing."""
        forget_nodes([self])


def _by_puller(nodes: Iterable[HeldNode]) -> dict[Puller, list[Outcome]]:
    grouped: dict[Puller, list[Outcome]] = {}
    for node in nodes:
        grouped.setdefault(node._puller, []).append(node._outcome)
    return grouped


def finish_nodes(nodes: Iterable[HeldNode]) -> None:
    """End ``nodes`` (of one queue or several), each by its :attr:`~HeldNode.completion`, in as few fenced multis
    as each queue can pack them; then each node's :attr:`~HeldNode.settled` says how it went. Never raises for a
    single node: its failure is logged, and retried or released by the engine."""
    for puller, outcomes in _by_puller(nodes).items():
        puller.complete(outcomes)


def release_nodes(nodes: Iterable[HeldNode]) -> None:
    """Give ``nodes`` back untouched (retried later if the connection is down; the fence makes that safe)."""
    for puller, outcomes in _by_puller(nodes).items():
        puller.release(outcomes)


def forget_nodes(nodes: Iterable[HeldNode]) -> None:
    """Let go of ``nodes`` that the caller ended in a multi of its own built from :meth:`HeldNode.ack_ops`."""
    for puller, outcomes in _by_puller(nodes).items():
        puller.forget(outcomes)


class BlockTail:
    """The block locks a caller's own multi gives up with the acks of a batch of nodes (see :func:`block_tail`):
    ``ops`` go at the end of that multi; once its outcome is known, say so with :meth:`committed` (or
    :meth:`unsure` after a lost reply) BEFORE forgetting the nodes, so the engine does not delete those locks again.
    A multi that failed needs nothing: the locks go as the nodes are forgotten."""

    __slots__ = ("_leases", "ops")

    def __init__(self, ops: list[Any], leases: list[Any]) -> None:
        self.ops = ops
        self._leases = leases

    def committed(self) -> None:
        """The multi with :attr:`ops` committed: those locks are gone."""
        for lease in self._leases:
            lease.tail = "done"

    def unsure(self) -> None:
        """The multi's reply was lost: those locks are deleted later only if they are still this consumer's."""
        for lease in self._leases:
            if lease.tail is None:
                lease.tail = "unsure"


def block_tail(nodes: Iterable[HeldNode]) -> BlockTail:
    """The block leases that ``nodes`` empty if every one of them is acked now (their :meth:`HeldNode.ack_ops`
    built first): their locks' deletes, to commit in the same multi as those acks, so a batch of ends built from
    ``ack_ops`` gives its blocks back with no round trip of its own. Without them, :meth:`HeldNode.forget` of a
    block's last member deletes its lock in a request of its own."""
    ops: list[Any] = []
    leases: list[Any] = []
    for puller, outcomes in _by_puller(nodes).items():
        part_ops, part_leases = puller.block_tail(outcomes)
        ops += part_ops
        leases += part_leases
    return BlockTail(ops, leases)


def commit_while_held(nodes: Sequence[HeldNode], ops_of: Sequence[Sequence[Any]],
                      checks: Sequence[Any] = ()) -> list[Any]:
    """Commit ``ops_of[i]`` on ``nodes[i]`` while it stays held, fenced by its lease (the session fence, and an
    item lease's fence child), many groups per multi. Per node: None (no ops), False (its lease is gone with its
    session) or the group's :class:`~zkqueue.engine.api.GroupOutcome`. Connection errors propagate: whether the
    ops committed is then unknown. ``checks``: ops every group depends on (e.g. a check that its queue is not
    paused), sent once per multi: when one fails, every group fails with it, its ``op`` the check's index."""
    results: list[Any] = [None] * len(nodes)
    by_puller: dict[Puller, list[int]] = {}
    for i, node in enumerate(nodes):
        by_puller.setdefault(node._puller, []).append(i)
    for puller, indexes in by_puller.items():
        part = puller.commit_held([nodes[i]._outcome for i in indexes], [list(ops_of[i]) for i in indexes],
                                  list(checks))
        for i, res in zip(indexes, part):
            results[i] = res
    return results


def wrap(outcomes: Iterable[Outcome], puller: Puller) -> list[HeldNode]:
    """The engine's claimed outcomes as the held nodes it hands out (for :meth:`DistributedQueue.claim_nodes`)."""
    return [HeldNode(o, puller) for o in outcomes]


def outcomes_of(nodes: Iterable[HeldNode]) -> list[Outcome]:
    """The engine's records of ``nodes`` (for the queue's batch methods)."""
    return [node._outcome for node in nodes]
