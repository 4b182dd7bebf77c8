"""OpenTelemetry traces of jobs, by the messaging semantic conventions: ``pip install 'zkqueue[otel]'``.

```python
import zkqueue.otel
zkqueue.otel.instrument()          # the global TracerProvider, or instrument(tracer_provider=provider)
jq.add({"to": "a@b"})              # a PRODUCER span "send /jobs/mail"; its W3C trace context goes in the headers
# in the worker's process, instrumented too: a CONSUMER span "process /jobs/mail" around each attempt, a child
# of the context in the job's headers, current in a thread or async handler (the handler's spans are its children)
zkqueue.otel.uninstrument()
```

Spans (see :mod:`zkqueue.jobs.hooks`, the seam they hang on):

- ``send <queue>`` (``SpanKind.PRODUCER``) around each ``JobQueue.add`` / ``add_all`` and ``Flow.add`` (``<queue>``:
  the job queue's path; a flow's first step's queue): the current context is injected into a copy of the headers
  the caller passed (``opentelemetry.propagate.inject``: ``traceparent`` and ``tracestate`` with the default
  propagator), which are stored with the job. Attributes: ``messaging.system="zkqueue"``,
  ``messaging.destination.name``, ``messaging.operation.type`` / ``messaging.operation.name`` ``"send"``, and
  ``messaging.message.id`` for one job or ``messaging.batch.message_count`` for several (an ``add_all``);
  ``zkqueue.job.rejected``: ids refused as duplicates, when any.
- ``process <queue>`` (``SpanKind.CONSUMER``) from the moment a worker calls a job's handler until the attempt is
  settled, a child of the context extracted from ``job.headers`` (a new trace when they carry none). Attributes:
  as above with ``"process"``, ``messaging.message.id``, ``zkqueue.job.attempt`` (1 for the first attempt),
  ``zkqueue.job.task`` for a task's job; ``zkqueue.attempt.ended`` when the attempt timed out or was given back.
  The thread and asyncio drivers make it the current span inside the handler; for the process pool it is a span of
  the parent (the handler runs in a child process).

An exception out of an add or a handler (a timeout's :class:`~zkqueue.errors.JobTimeoutError` too) is recorded on
the span and sets its status to ERROR. A flow's hand-off copies the finishing step's headers into the next steps'
jobs, so every step of a flow job is a child of the ``send`` span of its ``Flow.add``: one trace.
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager, Sequence

from zkqueue._extras import require

require("opentelemetry.trace", what="zkqueue.otel")

from opentelemetry import propagate, trace  # noqa: E402
from opentelemetry.trace import SpanKind, Status, StatusCode  # noqa: E402

from zkqueue.jobs import hooks

SYSTEM = "zkqueue"
#: The attribute that holds the attempt's number (1 for the first attempt).
ATTEMPT = "zkqueue.job.attempt"

_SYSTEM = "messaging.system"
_DESTINATION = "messaging.destination.name"
_MESSAGE_ID = "messaging.message.id"
_BATCH = "messaging.batch.message_count"
_OPERATION_TYPE = "messaging.operation.type"
_OPERATION_NAME = "messaging.operation.name"
_RAN = "ran"


def _version() -> str:
    try:
        from importlib.metadata import version  # noqa: PLC0415

        return version("zkqueue")
    except Exception:  # noqa: BLE001 - a source checkout
        return "0"


class _Process(hooks.AttemptHook):
    """The ``process <queue>`` span of one attempt."""

    __slots__ = ("_job", "_queue", "_span", "_tracer")

    def __init__(self, tracer: trace.Tracer, queue: str, job: Any) -> None:
        self._tracer = tracer
        self._queue = queue
        self._job = job
        self._span: trace.Span | None = None

    def begin(self) -> None:
        job = self._job
        attributes: dict[str, Any] = {_SYSTEM: SYSTEM, _DESTINATION: self._queue, _MESSAGE_ID: str(job.id),
                                      _OPERATION_TYPE: "process", _OPERATION_NAME: "process",
                                      ATTEMPT: int(job.attempts)}
        if getattr(job, "task", None):
            attributes["zkqueue.job.task"] = job.task
        headers = getattr(job, "headers", None)
        carrier = {k: v for k, v in headers.items() if isinstance(v, str)} if isinstance(headers, dict) else {}
        parent = propagate.extract(carrier)  # an empty context (a new trace) when the headers carry none
        self._span = self._tracer.start_span(f"process {self._queue}", context=parent, kind=SpanKind.CONSUMER,
                                             attributes=attributes)

    def activate(self) -> ContextManager[Any]:
        if self._span is None:
            return super().activate()
        return trace.use_span(self._span, end_on_exit=False, record_exception=False,
                              set_status_on_exception=False)

    def end(self, error: BaseException | None, how: str) -> None:
        span, self._span = self._span, None
        if span is None:  # given back before its handler began: no span
            return
        if how != _RAN:
            span.set_attribute("zkqueue.attempt.ended", how)
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()


class _Tracing(hooks.JobHooks):
    """The job hook :func:`instrument` installs."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def adding(self, queue: str, job_ids: Sequence[str], headers: dict[str, Any] | None,
               add: Callable[[dict[str, Any] | None], Any]) -> Any:
        attributes: dict[str, Any] = {_SYSTEM: SYSTEM, _DESTINATION: queue, _OPERATION_TYPE: "send",
                                      _OPERATION_NAME: "send"}
        if len(job_ids) == 1:
            attributes[_MESSAGE_ID] = str(job_ids[0])
        else:
            attributes[_BATCH] = len(job_ids)
        with self.tracer.start_as_current_span(f"send {queue}", kind=SpanKind.PRODUCER,
                                               attributes=attributes) as span:
            stored = headers
            if headers is None or isinstance(headers, dict):  # else the add refuses them (ConfigurationError)
                carrier = dict(headers) if headers else {}
                propagate.inject(carrier)
                stored = carrier or headers
            rejected = add(stored)
            if isinstance(rejected, list) and rejected:
                span.set_attribute("zkqueue.job.rejected", len(rejected))
            return rejected

    def attempt(self, queue: str, job: Any) -> hooks.AttemptHook:
        return _Process(self.tracer, queue, job)


def instrument(tracer_provider: trace.TracerProvider | None = None) -> None:
    """Trace every add and every attempt of this process's job queues, flows and workers with spans of
    ``tracer_provider`` (default: the global one, ``opentelemetry.trace.get_tracer_provider()``). Calling it again
    replaces the provider."""
    tracer = trace.get_tracer("zkqueue", _version(), tracer_provider=tracer_provider)
    hooks.install(_Tracing(tracer))


def uninstrument() -> None:
    """Stop tracing (spans of attempts under way still end)."""
    if isinstance(hooks.installed, _Tracing):
        hooks.uninstall()


def instrumented() -> bool:
    """Whether :func:`instrument` is in effect."""
    return isinstance(hooks.installed, _Tracing)


__all__ = ["ATTEMPT", "SYSTEM", "instrument", "instrumented", "uninstrument"]
