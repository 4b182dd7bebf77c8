"""The names of an app: its namespace, its queues and its tasks. Pure, no I/O.

A task's name defaults to ``module.qualname`` of its function; the job's record keeps it (``Job.task``), so a
worker finds the function by name. Queues live at ``/<namespace>/queues/<queue>`` and the worker registry at
``/<namespace>/workers``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from zkqueue.errors import ConfigurationError, InvalidPathError
from zkqueue.formats import naming
from zkqueue.jobs.model import check_task

log = logging.getLogger("zkqueue.tasks.naming")

#: The queue of tasks declared without one, and of jobs enqueued by the name of a task not registered here.
DEFAULT_QUEUE = "default"
#: The app's root node (``App(namespace=...)``).
DEFAULT_NAMESPACE = "zkqueue"


def check_namespace(namespace: Any) -> str:
    """An app's namespace: one or more node names joined by ``/`` (``"zkqueue"``, ``"apps/mail"``), without a
    leading or trailing ``/`` and without ``|``."""
    if not isinstance(namespace, str) or not namespace or namespace.startswith("/") or namespace.endswith("/"):
        raise ConfigurationError(f"a namespace must be a non-empty str of node names joined by '/', without a "
                                 f"leading or trailing '/', got {namespace!r}")
    try:
        naming.validate_queue_path("/" + namespace)
    except InvalidPathError as exc:
        raise ConfigurationError(f"bad namespace {namespace!r}: {exc}") from exc
    return namespace


def check_queue_name(queue: Any) -> str:
    """A queue name: one node name (no ``/`` or ``|``, not ``.`` or ``..``, no control characters)."""
    if not isinstance(queue, str) or not queue or "/" in queue:
        raise ConfigurationError(f"a queue name must be a non-empty str without '/', got {queue!r}")
    try:
        naming.validate_queue_path("/" + queue)
    except InvalidPathError as exc:
        raise ConfigurationError(f"bad queue name {queue!r}: {exc}") from exc
    return queue


def check_task_name(name: Any) -> str:
    """A task name (see :func:`zkqueue.jobs.model.check_task`): any non-empty str without surrounding whitespace or
    control characters."""
    if name is None:
        raise ConfigurationError("a task name is required, got None")
    return check_task(name)  # type: ignore[return-value]


def default_task_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of ``fn`` (what a worker that imports the module finds it as)."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not module or not qualname:
        raise ConfigurationError(f"{fn!r} has no __module__ and __qualname__: give the task a name (name=...)")
    if module == "__main__":
        log.warning("task %s is defined in __main__: a worker that imports your module knows it under another "
                    "name; define tasks in an importable module or give them name=...", qualname)
    return f"{module}.{qualname}"


def queues_path(namespace: str) -> str:
    return f"/{namespace}/queues"


def queue_path(namespace: str, queue: str) -> str:
    return f"/{namespace}/queues/{queue}"


def workers_path(namespace: str) -> str:
    return f"/{namespace}/workers"


def queue_of_path(namespace: str, path: str | None) -> str | None:
    """The queue name of a job queue path of this namespace, else the path itself (None stays None)."""
    prefix = queues_path(namespace) + "/"
    if path is not None and path.startswith(prefix) and "/" not in path[len(prefix):]:
        return path[len(prefix):]
    return path
