"""A late ack committed with the task's result: one multi, so a finished task is never delivered again.

With ``acks_late`` a task's message is acked after the task ran: Celery's pool process stores the result, reports
to the worker's main process, and that process acks. A worker killed between the two leaves a stored result and an
unacked message, which is delivered again and runs a second time. When the broker and the result backend are both
``zkqueue://`` on the same servers and chroot, the two commit together instead:

- at delivery, in the worker's main process, the transport asks :func:`expected` whether the message's task will
  store its result in a ``zkqueue://`` backend there and ack late; if so it puts the message's fenced ack ops (the
  engine's :meth:`HeldNode.ack_ops <zkqueue.engine.api.HeldNode.ack_ops>`: the consumer's session fence checked, the
  node deleted at its version, its lease's nodes and a large message's blob with it) in the message's properties,
  which Celery hands to the pool process with the task's request (:func:`describe`);
- the backend, storing a SUCCESS (or a FAILURE the task raised) in the pool process, adds those ops to the multi
  that writes the result (:func:`ack_ops_of`). If they fail (the lease ended with the main process's session) the
  result is written alone and the message comes back, as any unacked one does;
- the main process's ack then finds the node gone and lets go of it without a request of its own
  (:meth:`zkqueue.celery.acks.Acker.submit`, ``acked_with_result``); a node still there (the result was not stored:
  ``ignore_result``, a chord's part, a large result, another backend) is acked as before.

The ack is then the result's write: what the task does after it (``on_success``, the ``task_success`` and
``task_postrun`` signals) does not run again if the worker is killed in between, as it would with Celery's own ack
after them. The main process tells the transport which tasks ack late through :func:`register`, which the backend
calls for its app.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from zkqueue.engine.api import CheckOp, DeleteOp, HeldNode, check_op, delete_op

log = logging.getLogger("zkqueue.celery.late_acks")

#: The key of a message's properties that carries its ack ops (Celery passes a message's properties to the pool
#: process as ``task.request.properties``).
PROPERTY = "zkqueue_ack"

_apps: dict[str, weakref.ref[Any]] = {}  # connect string -> the Celery app whose backend stores results there
_lock = threading.Lock()


def register(connect_string: str, app: Any) -> None:
    """``app``'s result backend stores results on ``connect_string`` (``hosts/chroot``): a transport there may give
    its late-acked tasks' messages their ack ops (see the module docs)."""
    with _lock:
        _apps[connect_string] = weakref.ref(app)


def expected(connect_string: str, headers: Mapping[str, Any] | None) -> bool:
    """Whether the task message with ``headers`` will have its ack committed with its result by a backend of a
    registered app on ``connect_string``: a task of that app that acks late and stores its result."""
    ref = _apps.get(connect_string)
    app = ref() if ref is not None else None
    if app is None or not headers:
        return False
    name = headers.get("task")
    if not name or headers.get("ignore_result"):
        return False
    try:
        task = app.tasks.get(name)
    except Exception:  # noqa: BLE001 - an app not finalized yet, or broken: the ack stays the main process's
        log.debug("could not look task %r up", name, exc_info=True)
        return False
    return acks_with_result(task)


def acks_with_result(task: Any) -> bool:
    """Whether Celery task ``task`` (None: unknown) acks late and stores its result, so its ack can be written with
    the result: what the main process asks at delivery and the pool process again as it stores the result."""
    return bool(task is not None and task.acks_late and not task.ignore_result)


def describe(node: HeldNode, connect_string: str) -> dict[str, Any] | None:
    """The ops of ``node``'s fenced ack as message properties carry them (JSON: ``[kind, path, version]`` each);
    None when they hold an op that is not a check or a delete (not expected)."""
    wire: list[list[Any]] = []
    ops, _first_extra = node.ack_ops()
    for op in ops:
        if isinstance(op, CheckOp):
            wire.append(["check", op.path, op.version])
        elif isinstance(op, DeleteOp):
            wire.append(["delete", op.path, op.version])
        else:
            return None
    return {"zk": connect_string, "ops": wire}


def ack_ops_of(request: Any, connect_string: str) -> list[Any]:
    """The ack ops a task's ``request`` carries for a backend on ``connect_string`` (none: empty)."""
    properties = getattr(request, "properties", None) if request is not None else None
    found = properties.get(PROPERTY) if isinstance(properties, Mapping) else None
    if not isinstance(found, Mapping) or found.get("zk") != connect_string:
        return []
    ops: list[Any] = []
    try:
        for kind, path, version in found["ops"]:
            if kind == "check":
                ops.append(check_op(path, version))
            elif kind == "delete":
                ops.append(delete_op(path, version))
            else:
                return []
    except (KeyError, TypeError, ValueError):
        log.warning("task %s carries ack ops that cannot be read; it is acked by the worker's main process",
                    getattr(request, "id", "?"))
        return []
    return ops


__all__ = ["PROPERTY", "ack_ops_of", "acks_with_result", "describe", "expected", "register"]
