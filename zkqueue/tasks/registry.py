"""The tasks of one app by name: registered by ``@app.task``, looked up by workers through ``app.resolve(job)``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from zkqueue.errors import DuplicateTaskError

if TYPE_CHECKING:  # pragma: no cover
    from zkqueue.tasks.task import Task

log = logging.getLogger("zkqueue.tasks.registry")


class Registry:
    """Task name -> :class:`~zkqueue.tasks.Task`. Names are unique: the same function with the same options may be
    registered again (a module imported twice); anything else under a name already taken is refused."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task[Any, Any]] = {}
        self._lock = threading.Lock()
        #: A read-only, live view of the tasks by name.
        self.view: Mapping[str, Task[Any, Any]] = MappingProxyType(self._tasks)

    def add(self, task: Task[Any, Any]) -> Task[Any, Any]:
        """Register ``task``; return the task now under its name (an equal one registered before wins)."""
        with self._lock:
            known = self._tasks.get(task.name)
            if known is None:
                self._tasks[task.name] = task
                log.debug("task %s registered (queue %s)", task.name, task.queue)
                return task
        if known.fn is task.fn and known.options == task.options:
            return known
        what = "another function" if known.fn is not task.fn else "the same function with other options"
        raise DuplicateTaskError(f"task name {task.name!r} is taken by {known!r}; {what} cannot be registered "
                                 f"under it: give one of them name=...")

    def get(self, name: str | None) -> Task[Any, Any] | None:
        return self._tasks.get(name) if name is not None else None

    def queues(self) -> set[str]:
        """The queues of the registered tasks."""
        return {task.queue for task in list(self._tasks.values())}
