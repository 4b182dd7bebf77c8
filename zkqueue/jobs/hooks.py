"""Job hooks: one seam around the adds and the attempts of every job queue, for instrumentation (``zkqueue.otel``).

At most one hook is installed per process (:func:`install`; installing another replaces it). With none, the job
layer and the worker runtime pay one module-level ``None`` check per add and per attempt, nothing else.

- **Adding**: :meth:`JobHooks.adding` wraps each add (``JobQueue.add`` / ``add_all``, ``Flow.add``): it gets the
  queue's path, the job ids and the headers the caller passed, and calls ``add(headers)`` with the headers to
  store (a copy with a ``traceparent`` injected, say), around the add's multis: what the add raises goes through
  it.
- **Attempts**: :meth:`JobHooks.attempt` is asked as the worker runtime launches each attempt of a job
  (:meth:`Worker._launch <zkqueue.runtime.Worker>`); the :class:`AttemptHook` it returns (or None) is told when
  the handler begins (:meth:`AttemptHook.begin`, on the driver's thread, just before the call) and when the
  attempt is settled (:meth:`AttemptHook.end`, with the handler's error, a timeout's, or None; once, whoever
  settles it). On the thread and asyncio drivers :meth:`AttemptHook.activate` is entered around the handler's call
  on its own thread or task (a sync handler, a coroutine, or a sync call that returns an awaitable), so the hook
  can make its span the current one there. The process driver pickles the call to a child: there the hook sees
  only ``begin`` and ``end``, in the parent.

What a hook raises is logged and ignored: a broken hook never fails a job (its ``adding`` must call ``add``
once, and what ``add`` raises is the add's error).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from typing import Any, Callable, ContextManager, Sequence, TypeVar

log = logging.getLogger("zkqueue.jobs.hooks")

R = TypeVar("R")


class AttemptHook:
    """Follows one attempt of one job (see the module docs). The defaults do nothing."""

    def begin(self) -> None:
        """The handler is about to be called (on the driver's thread)."""

    def activate(self) -> ContextManager[Any]:
        """A context entered around the handler's call, on its thread or in its task (not for a child process)."""
        return contextlib.nullcontext()

    def end(self, error: BaseException | None, how: str) -> None:
        """The attempt is settled: ``how`` is ``"ran"`` (the handler returned or raised), ``"timed_out"`` or
        ``"given_back"`` (a cold stop); ``error`` is what failed it, or None. Called once, also for an attempt
        given back before :meth:`begin` (its handler never ran)."""


class JobHooks:
    """What a job hook may do (see the module docs). The defaults do nothing."""

    def adding(self, queue: str, job_ids: Sequence[str], headers: dict[str, Any] | None,
               add: Callable[[dict[str, Any] | None], R]) -> R:
        """Around one add of ``job_ids`` to the job queue at ``queue``: return ``add(headers_to_store)``."""
        return add(headers)

    def attempt(self, queue: str, job: Any) -> AttemptHook | None:
        """An :class:`AttemptHook` to follow the attempt of ``job`` (a :class:`~zkqueue.jobs.Job`, its
        ``attempts`` counting this one) of the job queue at ``queue`` that starts now, or None."""
        return None


#: The installed hook, or None (read it once per add or attempt: ``hooks.installed``).
installed: JobHooks | None = None


def install(hook: JobHooks) -> None:
    """Install ``hook`` for every job queue and worker of this process (replacing the one installed)."""
    global installed
    if not isinstance(hook, JobHooks):
        raise TypeError(f"a job hook must be a JobHooks, got {hook!r}")
    installed = hook


def uninstall(hook: JobHooks | None = None) -> None:
    """Remove ``hook`` (None: whatever is installed). Attempts already followed are still ended."""
    global installed
    if hook is None or installed is hook:
        installed = None


def is_async(call: Any) -> bool:
    """Whether ``call`` is a coroutine function (or an object whose ``__call__`` is)."""
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(getattr(call, "__call__", None))


def follow(attempt: Any, queue: str, driver: str) -> None:
    """Let the installed hook follow ``attempt`` (a :class:`zkqueue.runtime.Attempt`, not yet submitted) of the job
    queue at ``queue`` on a driver named ``driver`` (``"thread"``, ``"asyncio"``, ``"process"``...): its
    ``on_begin`` and ``on_settled`` are wrapped, and, unless the call goes to a child process, its ``call``."""
    hook = installed
    if hook is None:
        return
    try:
        watch = hook.attempt(queue, attempt.job)
    except Exception:
        log.warning("the job hook %r failed on an attempt of job %s", hook, attempt.label, exc_info=True)
        return
    if watch is None:
        return
    on_begin, on_settled = attempt.on_begin, attempt.on_settled

    def begin(a: Any) -> None:
        try:
            watch.begin()
        except Exception:
            log.warning("the job hook %r failed as job %s began", hook, a.label, exc_info=True)
        if on_begin is not None:
            on_begin(a)

    def settled(a: Any) -> None:
        try:
            watch.end(a.error, a.how)
        except Exception:
            log.warning("the job hook %r failed as job %s ended", hook, a.label, exc_info=True)
        on_settled(a)

    attempt.on_begin, attempt.on_settled = begin, settled
    if driver != "process":  # a child process gets the pickled call itself
        attempt.call = _activated(attempt.call, watch, awaits=driver == "asyncio")


def _activated(call: Callable[[Any], Any], watch: AttemptHook, *, awaits: bool) -> Callable[[Any], Any]:
    """``call`` run inside ``watch.activate()``: awaited inside it for a coroutine function, or (``awaits``: on an
    event loop) for the awaitable a sync call returns."""
    if is_async(call):
        async def activated_async(job: Any) -> Any:
            with watch.activate():
                return await call(job)

        return activated_async

    def activated(job: Any) -> Any:
        with watch.activate():
            value = call(job)
        if awaits and inspect.isawaitable(value):
            return _awaited(value, watch)
        return value

    return activated


async def _awaited(value: Any, watch: AttemptHook) -> Any:
    with watch.activate():
        return await value


__all__ = ["AttemptHook", "JobHooks", "follow", "install", "installed", "is_async", "uninstall"]
