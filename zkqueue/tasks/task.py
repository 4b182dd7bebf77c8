"""A task: a function registered with an app (``@app.task``) that can be called here, or enqueued as a job that a
worker runs. See :mod:`zkqueue.tasks`."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Generic, ParamSpec, TypeVar

from zkqueue.jobs.model import Job
from zkqueue.jobs.retry import RetryPolicy
from zkqueue.tasks.params import from_params

if TYPE_CHECKING:  # pragma: no cover
    from zkqueue.flows.canvas import Signature
    from zkqueue.tasks.app import App
    from zkqueue.tasks.handle import JobHandle

log = logging.getLogger("zkqueue.tasks.task")

P = ParamSpec("P")
R = TypeVar("R")


class Task(Generic[P, R]):
    """A function of an app under a name, with the queue its jobs go to, its :class:`~zkqueue.jobs.RetryPolicy`
    (None: the app's) and its default ``timeout`` (seconds an attempt may run; None: no limit).

    ``task(...)`` calls the function here; ``task.enqueue(...)`` queues a job that calls it in a worker and
    returns a :class:`~zkqueue.tasks.JobHandle` at once. A task pickles by reference (module and name), so a
    module-level task can be sent to another process.
    """

    def __init__(self, app: App, fn: Callable[P, R], *, name: str, queue: str, retry: RetryPolicy | None,
                 timeout: float | None) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.queue = queue
        self.retry = retry
        self.timeout = timeout
        #: True for a coroutine function: :meth:`call` returns a coroutine the worker awaits on its loop.
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]  # __name__, __doc__, __wrapped__, ...

    @property
    def options(self) -> tuple[str, RetryPolicy | None, float | None]:
        """What, besides the function, makes two registrations of a name the same task."""
        return (self.queue, self.retry, self.timeout)

    @property
    def max_attempts(self) -> int | None:
        """The most attempts its jobs carry in their records (its own policy's), or None (the queue's)."""
        return self.retry.max_attempts if self.retry is not None else None

    # ------------------------------------------------------------------------------------------ running here
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here, now (as Celery does): no job, no queue."""
        return self.fn(*args, **kwargs)

    def call(self, job: Job) -> R:
        """Run the function with the arguments in ``job``'s params and return what it returns (a coroutine for an
        async task: the worker awaits it). :class:`~zkqueue.errors.TaskParamsError` for params of another shape."""
        args, kwargs = from_params(job.params)
        return self.fn(*args, **kwargs)  # type: ignore[arg-type]

    # ------------------------------------------------------------------------------------------ enqueueing
    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Queue a job that calls the task with these arguments; its handle at once. Every keyword is the
        task's: options (job id, delay, ...) go through :meth:`enqueue_with`."""
        return self.app.enqueue_with(self.name, args=args, kwargs=kwargs)

    def enqueue_with(self, *, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                     job_id: str | None = None, delay: float | None = None, run_at: datetime | None = None,
                     priority: int = 0, timeout: float | None = None, queue: str | None = None) -> JobHandle:
        """Queue a job with options: ``job_id`` (default: a new uuid; an id that is unfinished gives a handle of
        that job with ``created`` False), ``delay`` seconds or ``run_at`` (a timezone-aware datetime),
        ``priority`` (lower runs first), ``timeout`` (seconds one attempt may run; default: the task's),
        ``queue`` (default: the task's). See :meth:`JobQueue.add <zkqueue.jobs.JobQueue.add>`."""
        return self.app.enqueue_with(self.name, args=args, kwargs=kwargs, job_id=job_id, delay=delay,
                                     run_at=run_at, priority=priority, timeout=timeout, queue=queue)

    def enqueue_many(self, items: Iterable[Any], *, delay: float | None = None, run_at: datetime | None = None,
                     priority: int = 0, timeout: float | None = None, queue: str | None = None) -> list[JobHandle]:
        """Queue one job per item in one ``JobQueue.add_all`` (as few multis as fit: hundreds of jobs each); their
        handles in item order. An item is a tuple (or list) of positional arguments, or a
        :class:`~zkqueue.tasks.Call` (``Call(args=..., kwargs=..., job_id=...)``). Every item is checked and
        serialized before anything is sent. The options apply to every job, as in :meth:`enqueue_with`."""
        return self.app.enqueue_many(self.name, items, delay=delay, run_at=run_at, priority=priority,
                                     timeout=timeout, queue=queue)

    # ------------------------------------------------------------------------------------------ canvases
    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature of a call of this task, for a canvas (``chain``, ``group``, ``chord``): in a chain or as a
        chord's body, the result before it comes first, before ``args``."""
        from zkqueue.flows.canvas import Signature

        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable signature: called with exactly ``args`` and ``kwargs``, whatever ran before it."""
        from zkqueue.flows.canvas import Signature

        return Signature(self, args, kwargs, immutable=True)

    # ------------------------------------------------------------------------------------------ identity
    def __reduce__(self) -> str:
        return self.__qualname__  # pickled as a reference to the module attribute, like a function

    def __repr__(self) -> str:
        kind = "async task" if self.is_async else "task"
        return f"<{kind} {self.name} queue={self.queue!r}>"
