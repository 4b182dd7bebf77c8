"""QoS of a ``zkqueue://`` channel: delivered messages stay held under their ZooKeeper lease until acked.

kombu's virtual QoS keeps a copy of each unacked message and, to requeue one, puts that copy back as a new message
(at the tail, or lost if the process dies first). Here the message never leaves ZooKeeper before its ack:

- ``ack`` deletes the node in a fenced multi (refused if the lease was lost with the session: the message was
  given back and another consumer gets it). The acks of the process are committed together by one thread
  (:mod:`.acks`): ``ack`` returns at once, and the message counts against the prefetch until its ack committed;
- ``reject(requeue=False)`` is an ack (no dead-letter queue);
- ``reject(requeue=True)``, ``basic_recover`` and closing the channel release the lease: the same node, with its
  priority and its place in the queue, is delivered again;
- a consumer process that dies holds nothing once its session ends: its messages come back by themselves.

``prefetch_count`` bounds the messages held by the channel (delivered, and not acked, or acked and the ack not
committed yet): slots open when a group of acks commits, so the next claim takes several messages at once.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from zkqueue.engine.api import Completion

log = logging.getLogger("zkqueue.celery.qos")


class Held:
    """One delivered message: its queue, the engine's held node, kombu's message object once appended, and whether
    its ack ops went to the task with it (the result's write may commit the ack: :mod:`.late_acks`)."""

    __slots__ = ("queue", "node", "message", "acked_with_result")

    def __init__(self, queue: str, node: Any) -> None:
        self.queue = queue
        self.node = node
        self.message: Any = None
        self.acked_with_result = False


class QoS:
    """kombu's QoS contract (``can_consume``, ``append``, ``ack``, ``reject``, ``restore_unacked`` ...) on leases."""

    #: Whether unacked messages are released when the channel closes (they would come back with the session
    #: anyway; releasing gives them back at once).
    restore_at_shutdown = True

    def __init__(self, channel: Any, prefetch_count: int = 0) -> None:
        self.channel = channel
        self.prefetch_count = prefetch_count or 0
        self._lock = threading.Lock()
        self._held: dict[str, Held] = {}
        self._acking: dict[str, Held] = {}  # acked, the ack not committed yet (still held in ZooKeeper)
        self._restored = False

    # ------------------------------------------------------------------------------------------ limits
    def can_consume(self) -> bool:
        count = self.prefetch_count
        return not count or self.held_count < count

    def can_consume_max_estimate(self) -> int | None:
        count = self.prefetch_count
        return max(count - self.held_count, 0) if count else None

    @property
    def held_count(self) -> int:
        """Messages this channel holds in ZooKeeper: delivered and not acked, or acked and not committed yet."""
        return len(self._held) + len(self._acking)

    @property
    def acking_count(self) -> int:
        """Acks handed to the group commit and not committed yet."""
        return len(self._acking)

    # ------------------------------------------------------------------------------------------ delivery
    def append(self, message: Any, delivery_tag: str) -> None:
        """kombu calls this for each message delivered to an acking consumer: the lease now waits for its ack."""
        held = self.channel.take_pending(delivery_tag)
        if held is None:
            log.warning("delivery tag %s has no held message (already settled?)", delivery_tag)
            return
        held.message = message
        with self._lock:
            self._held[delivery_tag] = held

    def get(self, delivery_tag: str) -> Any:
        return self._held[delivery_tag].message

    def _pop(self, delivery_tag: str) -> Held | None:
        with self._lock:
            return self._held.pop(delivery_tag, None)

    def ack(self, delivery_tag: str) -> None:
        """Hand the ack to the group commit (:mod:`.acks`) and return; the prefetch slot opens once it committed."""
        with self._lock:
            held = self._held.pop(delivery_tag, None)
            if held is None:
                return
            self._acking[delivery_tag] = held
        self.channel.ack_later(held, lambda _node: self._committed(delivery_tag))

    def _committed(self, delivery_tag: str) -> None:
        with self._lock:
            self._acking.pop(delivery_tag, None)
        self.channel.slot_opened()

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if not requeue:
            self.ack(delivery_tag)  # no dead-letter queue: deleted
            return
        held = self._pop(delivery_tag)
        if held is not None:
            self.channel.finish(held, Completion.release())

    # ------------------------------------------------------------------------------------------ give back
    def restore_unacked(self) -> list[tuple[BaseException, Any]]:
        """Give back every held message (``basic_recover(requeue=True)``); the errors, as kombu expects."""
        with self._lock:
            held, self._held = list(self._held.values()), {}
        if not held:
            return []
        try:
            self.channel.release(held)
        except Exception as exc:  # their leases end with the session anyway
            log.warning("could not give back %d messages: %s", len(held), exc)
            return [(exc, h.message) for h in held]
        return []

    def restore_unacked_once(self, stderr: Any = None) -> None:
        if self._restored:
            return
        self._restored = True
        if self.restore_at_shutdown and self.channel.do_restore:
            self.restore_unacked()

    def restore_visible(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to do: there is no visibility timeout, a lease lasts as long as the consumer's session."""
