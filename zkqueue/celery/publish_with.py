"""Ops that commit in the same multi as the next message published on this thread (the chord body's seam).

The backend that fires a chord's body publishes it with Celery's own ``signature.delay`` (kombu's producer, retry
policy and routing), which ends in the transport's ``_put`` on the same thread. Around that call the backend
attaches the ops that mark the body sent (:func:`publish_with`); the transport, when its client is the one those ops
are meant for, stores the message and the ops in ONE multi (:meth:`.queues.QueueStore.put_with`), so the body is
sent exactly when the chord is marked sent: a worker that dies at any point either sent both or neither, and the
part delivered again sends the body only if it was not sent. When the broker is not zkqueue, or not on the same
client, nobody takes the ops and the backend marks the body sent after the publish, as before.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: Nothing taken yet (or the broker is not zkqueue on the same client).
PENDING = "pending"
#: The message and the ops committed together.
COMMITTED = "committed"
#: The ops failed (e.g. another process marked the body sent first): the message was not stored.
REFUSED = "refused"


@dataclass
class AttachedOps:
    """Ops for the multi of the next message published in this context, and how that went (:data:`PENDING`,
    :data:`COMMITTED` or :data:`REFUSED`)."""

    client: Any  # the kazoo client the ops are for: only a transport on that client takes them
    ops: list[Any]
    task_id: str | None  # the message they go with: the one whose ``id`` header this is
    state: str = PENDING


_attached: contextvars.ContextVar[AttachedOps | None] = contextvars.ContextVar("zkqueue_publish_with", default=None)


@contextlib.contextmanager
def publish_with(client: Any, ops: list[Any], task_id: str | None) -> Iterator[AttachedOps]:
    """Attach ``ops`` (for ``client``) to the message of task ``task_id`` when it is published in this context (a
    transport stores it with them when it goes to exactly one queue); see the module doc."""
    attached = AttachedOps(client, list(ops), task_id)
    token = _attached.set(attached)
    try:
        yield attached
    finally:
        _attached.reset(token)


def take(client: Any, task_id: str | None) -> AttachedOps | None:
    """For the transport's publish on ``client`` of the message of ``task_id``: the ops to commit with it, or None
    (none attached, meant for another client or another message, or settled by an earlier publish)."""
    attached = _attached.get()
    if attached is None or attached.client is not client or attached.state != PENDING or not task_id \
            or attached.task_id != task_id:
        return None
    return attached
