"""A task job's params: ``{"args": [...], "kwargs": {...}}``, through the queue's serializer (JSON by default).
:class:`Call` is one item of ``Task.enqueue_many`` when it needs keyword arguments or its own job id."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from zkqueue.errors import ConfigurationError, TaskParamsError

log = logging.getLogger("zkqueue.tasks.params")


@dataclass(frozen=True)
class Call:
    """One call of a task in ``enqueue_many``: ``Call(args=("a@b",), kwargs={"subject": "hi"}, job_id="w-1")``.
    A plain tuple (or list) item is ``Call(args=item)``."""

    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    job_id: str | None = None

    @classmethod
    def of(cls, item: Any) -> Call:
        """``item`` (a tuple or list of positional arguments, or a Call) as a Call."""
        if isinstance(item, Call):
            return item
        if isinstance(item, (tuple, list)):
            return cls(args=tuple(item))
        raise ConfigurationError(f"an enqueue_many item is a tuple of positional arguments or a Call(args=..., "
                                 f"kwargs=..., job_id=...), got {type(item).__name__}: {item!r}")


def to_params(args: Any, kwargs: Any) -> dict[str, Any]:
    """The params of a job that calls its task with ``args`` (a tuple or list) and ``kwargs`` (str keys)."""
    if not isinstance(args, (tuple, list)):
        raise ConfigurationError(f"args must be a tuple or list, got {type(args).__name__}: {args!r}")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping):
        raise ConfigurationError(f"kwargs must be a mapping, got {type(kwargs).__name__}: {kwargs!r}")
    bad = [k for k in kwargs if not isinstance(k, str)]
    if bad:
        raise ConfigurationError(f"kwargs keys must be str, got {bad!r}")
    return {"args": list(args), "kwargs": dict(kwargs)}


def from_params(params: Any) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments in a job's params; :class:`~zkqueue.errors.TaskParamsError` (never
    retried) for params of another shape (e.g. a job added by ``JobQueue.add`` with a task name)."""
    if isinstance(params, Mapping) and set(params) == {"args", "kwargs"}:
        args, kwargs = params["args"], params["kwargs"]
        if isinstance(args, (list, tuple)) and isinstance(kwargs, Mapping) and all(isinstance(k, str) for k in kwargs):
            return list(args), dict(kwargs)
    raise TaskParamsError(f"a task's params are {{'args': [...], 'kwargs': {{...}}}}, got {params!r}")
