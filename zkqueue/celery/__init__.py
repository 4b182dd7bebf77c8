"""Celery on ZooKeeper: the ``zkqueue://`` kombu transport and the ``zkqueue://`` Celery result backend.

Importing this package registers both::

    import zkqueue.celery  # noqa: F401  (registers zkqueue://)
    app = Celery("proj", broker="zkqueue://zk1:2181,zk2:2181,zk3:2181/celery",
                 backend="zkqueue://zk1:2181,zk2:2181,zk3:2181/celery")

- Transport: kombu has no entry point (plugin hook) for transports: it resolves a URL's scheme through its alias
  table, ``kombu.transport.TRANSPORT_ALIASES``, so this import adds ``"zkqueue"`` to that table. Without the
  import, ``transport="zkqueue.celery.transport:Transport"`` (the class's full path) works as well.
- Result backend: Celery looks a ``result_backend`` URL's scheme up in ``celery.app.backends.BACKEND_ALIASES``,
  read afresh on every lookup, together with the ``celery.result_backends`` entry points. The entry point would
  work without this import, but only once the distribution is installed with it (the project's packaging
  declares it, if at all, outside this package); the alias works wherever ``zkqueue.celery`` is imported, e.g. in
  the module that builds the Celery app, so this import adds ``"zkqueue"`` to that table too.
  ``backend="zkqueue.celery.backend:ZkQueueBackend"`` does not work for URLs (Celery takes the class from the
  scheme), so the import is the way.

Modules: :mod:`.url` (URLs), :mod:`.client` (one kazoo client per process), :mod:`.queues` (queue layout and
engine queues), :mod:`.routing` (exchange bindings in ZooKeeper), :mod:`.qos` (acks on leases),
:mod:`.transport` (kombu's Channel and Transport), :mod:`.late_acks` (a late ack committed with the task's
result); for results :mod:`.result_store` (result nodes, large
values), :mod:`.waiting` (waits on watches), :mod:`.chords` (exact chord counters), :mod:`.expiry` (the
``result_expires`` sweep), :mod:`.backend` (Celery's backend class). See docs/celery.md.
"""

from __future__ import annotations

from typing import Any

from zkqueue._extras import require

require("kombu", what="zkqueue.celery (the zkqueue:// transport)")

from kombu.transport import TRANSPORT_ALIASES  # noqa: E402

#: The kombu alias of the transport (the URL scheme).
ALIAS = "zkqueue"
TRANSPORT_PATH = "zkqueue.celery.transport:Transport"
BACKEND_PATH = "zkqueue.celery.backend:ZkQueueBackend"


def register() -> None:
    """Add ``zkqueue`` to kombu's transport aliases and, when Celery is installed, to Celery's result backend
    aliases (done on import; idempotent)."""
    TRANSPORT_ALIASES[ALIAS] = TRANSPORT_PATH
    try:  # a kombu user without Celery needs no result backend
        from celery import signals
        from celery.app.backends import BACKEND_ALIASES
    except ImportError:
        return
    BACKEND_ALIASES[ALIAS] = BACKEND_PATH
    signals.worker_init.connect(_build_backend, weak=False, dispatch_uid="zkqueue-late-acks")


def _build_backend(sender: Any = None, **_kwargs: Any) -> None:
    """Celery's ``worker_init`` (the worker's main process, before it consumes): build the app's result backend now,
    so a ``zkqueue://`` one tells the transport which tasks ack with their results (:mod:`.late_acks`)."""
    app = getattr(sender, "app", None)
    if app is not None and str(app.conf.result_backend or "").startswith(f"{ALIAS}://"):
        app.backend  # noqa: B018 - built for its registration


register()

__all__ = ["ALIAS", "BACKEND_PATH", "TRANSPORT_PATH", "register"]
