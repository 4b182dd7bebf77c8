"""What a queue consumer sees: the consumer interface, connection states and the error mode."""

from __future__ import annotations

import enum
import logging
from abc import ABC, abstractmethod
from typing import Any, Callable, Generic, TypeVar

log = logging.getLogger("zkqueue.consumer")

T = TypeVar("T")


class ConnectionState(enum.Enum):
    """Connection states delivered to ``QueueConsumer.state_changed`` (Curator's ConnectionState subset).

    SUSPENDED: the connection dropped; assume no updates until RECONNECTED.
    RECONNECTED: connected again (same or new session) after SUSPENDED or LOST.
    LOST: the session expired or the client closed; locks held by this consumer are gone.
    """

    SUSPENDED = "SUSPENDED"
    RECONNECTED = "RECONNECTED"
    LOST = "LOST"


class ErrorMode(enum.Enum):
    """What a lock-safe queue does with an item whose consumer raised.

    REQUEUE (default): put the item back at the tail of the queue, same name kind.
    DELETE: log, count and delete the item.
    """

    REQUEUE = "REQUEUE"
    DELETE = "DELETE"


class QueueConsumer(ABC, Generic[T]):
    """Receives queue items. ``consume_message`` raising is logged and counted; with a lock path, the
    error mode decides what happens to the item."""

    @abstractmethod
    def consume_message(self, item: T) -> None:
        """Process one item."""

    def state_changed(self, state: ConnectionState) -> None:  # noqa: B027 - optional hook
        """Called on a zkqueue thread (never kazoo's) when the connection state changes."""


class _CallableConsumer(QueueConsumer[Any]):
    """Adapts a plain callable ``fn(item)`` to the QueueConsumer interface."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self._fn = fn

    def consume_message(self, item: Any) -> None:
        self._fn(item)

    def __repr__(self) -> str:
        return f"CallableConsumer({self._fn!r})"


def as_consumer(consumer: Any) -> QueueConsumer[Any] | None:
    """Return a QueueConsumer for ``consumer`` (a QueueConsumer, any object with ``consume_message`` or
    ``consume_node`` (a node consumer, see :mod:`zkqueue.engine.seams`), a callable, or None for a producer-only
    queue)."""
    from zkqueue.errors import ConfigurationError

    if consumer is None or isinstance(consumer, QueueConsumer):
        return consumer
    if callable(getattr(consumer, "consume_message", None)) or callable(getattr(consumer, "consume_node", None)):
        return consumer  # duck-typed consumer; state_changed is optional
    if callable(consumer):
        return _CallableConsumer(consumer)
    raise ConfigurationError(
        "consumer must be a QueueConsumer, an object with consume_message(item) or consume_node(node), a callable "
        f"or None; got {consumer!r}"
    )
