"""Canvases of tasks: chain, group and chord, on the flows' atomic hand-off.

```python
from zkqueue import chain, group, chord

h = chain(fetch.s(url), parse.s(), store.s(table="pages")).enqueue()    # each result feeds the next call
h = group(fetch.s(u) for u in urls).enqueue()                           # h.result() -> list, in order
h = chord((fetch.s(u) for u in urls), merge.s()).enqueue()              # merge(results) runs exactly once
h.result(timeout=60); h.state; h.cancel(); app.canvas(h.id)             # a handle again, by id
```

``task.s(*args, **kwargs)`` is a signature: a call of the task whose first argument, in a chain or as a chord's
body, is the result before it; ``task.si(...)`` an immutable one that takes no input. A canvas is added in one
multi (several, committed in order, when it does not fit one), runs as jobs of its tasks' queues in ``zkqueue
worker`` processes, and hands off in ONE fenced multi per node (see :mod:`zkqueue.flows.canvas_handoff`).
``on_failure="fail"`` (the default): a node that is dead after its task's retries fails the canvas and drops what
was queued; ``"continue"``: its result is recorded as an error value (:func:`~zkqueue.flows.canvas_graph.is_error`)
and what follows still runs, so a chord never waits for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NoNodeError

from zkqueue.errors import CanvasCancelledError, CanvasFailedError, ConfigurationError, QueueStateError, WaitTimeoutError
from zkqueue.flows.canvas_graph import compile_canvas, parts_of, resolve
from zkqueue.flows.definition import FAIL
from zkqueue.flows.model import FlowJob, FlowRecord, FlowState

if TYPE_CHECKING:  # pragma: no cover
    from zkqueue.tasks.app import App

log = logging.getLogger("zkqueue.flows.canvas")


class Canvas:
    """A signature, chain, group or chord: what :meth:`enqueue` adds as one canvas."""

    def _app(self) -> App:
        found = {id(a): a for a in self._all_apps()}
        if len(found) != 1:
            raise ConfigurationError("every signature of a canvas must come from the same App")
        return next(iter(found.values()))

    def _all_apps(self) -> list[App]:
        raise NotImplementedError

    def enqueue(self, *, canvas_id: str | None = None, on_failure: str = FAIL) -> CanvasHandle:
        """Add the canvas; its :class:`CanvasHandle` at once. ``canvas_id``: default a new uuid (a running canvas
        with that id: the handle points at it, ``created`` False); ``on_failure``: ``"fail"`` or ``"continue"``."""
        app = self._app()
        graph = compile_canvas(self, on_failure)
        canvas_id = uuid.uuid4().hex if canvas_id is None else canvas_id
        if not isinstance(canvas_id, str) or not canvas_id:
            raise ConfigurationError(f"canvas_id must be a non-empty str, got {canvas_id!r}")
        created = app.canvases().add(graph, canvas_id)
        return CanvasHandle(app, canvas_id, created=created)

    def __or__(self, other: Canvas) -> Chain:
        return Chain(self, other)


class Signature(Canvas):
    """A call of a task: ``task.s(*args, **kwargs)`` (the input comes first) or ``task.si(...)`` (no input)."""

    def __init__(self, task: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, immutable: bool = False) -> None:
        bad = [k for k in kwargs if not isinstance(k, str)]
        if bad:
            raise ConfigurationError(f"kwargs keys must be str, got {bad!r}")
        self.app: App = task.app
        self.task: str = task.name
        self.queue: str = task.queue
        self.max_attempts: int | None = task.max_attempts
        self.timeout: float | None = task.timeout
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.immutable = immutable

    def _all_apps(self) -> list[App]:
        return [self.app]

    def __repr__(self) -> str:
        call = ", ".join([*map(repr, self.args), *(f"{k}={v!r}" for k, v in self.kwargs.items())])
        return f"{self.task}.{'si' if self.immutable else 's'}({call})"


class Chain(Canvas):
    """Parts run one after another, each result the next part's input."""

    def __init__(self, *parts: Any) -> None:
        self.parts = parts_of(parts, "chain")

    def _all_apps(self) -> list[App]:
        return [a for p in self.parts for a in p._all_apps()]

    def __repr__(self) -> str:
        return f"chain({', '.join(map(repr, self.parts))})"


class Group(Canvas):
    """Members that run at once; their results, a list in member order."""

    def __init__(self, *members: Any) -> None:
        self.members = parts_of(members, "group")

    def _all_apps(self) -> list[App]:
        return [a for p in self.members for a in p._all_apps()]

    def __repr__(self) -> str:
        return f"group({len(self.members)} members)"


class Chord(Canvas):
    """A group (the header) and a body that runs once with the list of the header's results."""

    def __init__(self, header: Any, body: Canvas) -> None:
        self.header = header if isinstance(header, Group) else Group(*parts_of((header,), "chord"))
        if not isinstance(body, Canvas):
            raise ConfigurationError(f"a chord's body is a signature (task.s(...)) or canvas, got {body!r}")
        self.body = body

    def _all_apps(self) -> list[App]:
        return [*self.header._all_apps(), *self.body._all_apps()]

    def __repr__(self) -> str:
        return f"chord({self.header!r}, {self.body!r})"


def chain(*parts: Any) -> Chain:
    """``chain(a.s(x), b.s(), c.s(k=1))``: ``c(b(a(x)), k=1)``, one after another."""
    return Chain(*parts)


def group(*members: Any) -> Group:
    """``group(a.s(x) for x in xs)`` (or ``group(a.s(1), a.s(2))``): at once; the result is the list in order."""
    return Group(*members)


def chord(header: Any, body: Canvas) -> Chord:
    """``chord((a.s(x) for x in xs), merge.s())``: ``merge([a(x) for x in xs])``, the body run exactly once."""
    return Chord(header, body)


class CanvasHandle:
    """A canvas of an app: ``id``, its record read on demand (:meth:`get`, :attr:`state`), :meth:`result` on a
    watch, :meth:`cancel`. ``created`` is False when the add found that id running."""

    def __init__(self, app: App, canvas_id: str, *, created: bool = True) -> None:
        self.app = app
        self.id = canvas_id
        self.created = created

    def get(self) -> FlowJob | None:
        """The canvas's record as a :class:`~zkqueue.flows.FlowJob` (``steps``, ``results`` by node name; ``params``
        a summary), or None."""
        return self.app.canvas_flow().get(self.id)

    @property
    def state(self) -> FlowState | None:
        """RUNNING, COMPLETED, FAILED or CANCELLED, or None if unknown."""
        job = self.get()
        return job.state if job is not None else None

    def wait(self, timeout: float | None = None) -> FlowJob:
        """The canvas once finished, on a watch of its record (:meth:`Flow.wait <zkqueue.flows.Flow.wait>`)."""
        return self.app.canvas_flow().wait(self.id, timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The canvas's result once it completes: a chain's last result, a group's list (in member order), a
        chord's body's result. :class:`~zkqueue.errors.CanvasFailedError` when it failed,
        :class:`~zkqueue.errors.CanvasCancelledError` when cancelled, :class:`~zkqueue.errors.WaitTimeoutError`
        after ``timeout`` seconds."""
        job = self.wait(timeout)
        if job.state is FlowState.COMPLETED:
            return resolve(self.app.canvases().graph(self.id)[0].out, job.results)
        if job.state is FlowState.CANCELLED:
            raise CanvasCancelledError(job)
        raise CanvasFailedError(job)

    async def wait_async(self, timeout: float | None = None) -> FlowJob:
        """:meth:`wait` for an event loop: reads through kazoo's async calls and one watch of the record whose
        events are posted to the loop (:mod:`zkqueue.aio.bridge`); no thread is taken."""
        from kazoo.recipe.watchers import DataWatch

        from zkqueue.aio.bridge import from_kazoo, to_loop

        loop = asyncio.get_running_loop()
        canvases = self.app.canvases()
        path = canvases._paths.flow(self.id)
        changed = asyncio.Event()
        wake = to_loop(loop, changed.set)
        stopped = [False]

        def on_change(_data: Any, _stat: Any) -> bool:  # on kazoo's thread; False ends the watch
            if stopped[0]:
                return False
            wake()
            return True

        DataWatch(self.app.client, path, on_change)
        deadline = None if timeout is None else loop.time() + timeout
        try:
            while True:
                changed.clear()
                try:
                    data, _stat = await from_kazoo(self.app.client.get_async(path), loop)
                except NoNodeError:
                    raise QueueStateError(f"no canvas {self.id!r}") from None
                job = FlowJob.of(FlowRecord.decode(data))
                if job.state.finished:
                    return job
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    raise WaitTimeoutError(f"canvas {self.id!r} still running after {timeout}s")
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), left)
        finally:
            stopped[0] = True

    async def result_async(self, timeout: float | None = None) -> Any:
        """:meth:`result` for an event loop (see :meth:`wait_async`)."""
        job = await self.wait_async(timeout)
        if job.state is FlowState.COMPLETED:
            graph = await asyncio.get_running_loop().run_in_executor(None, self.app.canvases().graph, self.id)
            return resolve(graph[0].out, job.results)
        if job.state is FlowState.CANCELLED:
            raise CanvasCancelledError(job)
        raise CanvasFailedError(job)

    def cancel(self) -> bool:
        """Cancel it: it ends CANCELLED and its waiting jobs are removed; a node running now finishes, and nothing
        after it starts. True if it was running."""
        return self.app.canvases().cancel(self.id)

    def __repr__(self) -> str:
        return f"<CanvasHandle {self.id!r} created={self.created}>"


__all__ = ["Canvas", "CanvasHandle", "Chain", "Chord", "Group", "Signature", "chain", "chord", "group"]
