"""Celery on ZooKeeper: the ``zkqueue://`` kombu transport.

Importing this package registers the transport with kombu::

    import zkqueue.celery  # noqa: F401  (registers zkqueue://)
    app = Celery("proj", broker="zkqueue://zk1:2181,zk2:2181,zk3:2181/celery")

kombu has no entry point (plugin hook) for transports: it resolves a URL's scheme through its alias table,
``kombu.transport.TRANSPORT_ALIASES``, so this import adds ``"zkqueue"`` to that table. Without the import,
``transport="zkqueue.celery.transport:Transport"`` (the class's full path) works as well.

Modules: :mod:`.url` (broker URLs), :mod:`.client` (one kazoo client per process), :mod:`.queues` (queue
layout and engine queues), :mod:`.routing` (exchange bindings in ZooKeeper), :mod:`.qos` (acks on leases),
:mod:`.transport` (kombu's Channel and Transport). See docs/celery.md.
"""

from __future__ import annotations

from kombu.transport import TRANSPORT_ALIASES

#: The kombu alias of the transport (the URL scheme).
ALIAS = "zkqueue"
TRANSPORT_PATH = "zkqueue.celery.transport:Transport"


def register() -> None:
    """Add ``zkqueue`` to kombu's transport aliases (done on import; idempotent)."""
    TRANSPORT_ALIASES[ALIAS] = TRANSPORT_PATH


register()

__all__ = ["ALIAS", "TRANSPORT_PATH", "register"]
