"""The jobs of the ``jobs_live`` section (:mod:`benchmarks.jobs_live`), and its task app.

Every worker of the section runs one of two jobs:

- :func:`double`: trivial; returns a small dict, which the queue system stores as the job's result;
- :func:`burn`: about 20 ms of pure-Python CPU (:func:`spin`, ``iters`` from :func:`calibrate`), for the CPU-bound
  row (thread pool against process pool).

:func:`make_app` registers both as tasks of a :class:`zkqueue.App` on queue ``bench`` under fixed names, so the
producer (in the harness's process) and the ``zkqueue worker benchmarks.live_app:app`` process (its app is
:mod:`benchmarks.live_app`, built from ``$ZKQUEUE_CONNECT``) agree on them. Importing this module needs no ``zkqueue.App``: the task rows are
skipped while it does not exist.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any, Iterator

log = logging.getLogger("zkqueue.benchmarks.live_tasks")

#: The queue every task of the section runs on (the worker's ``--queues bench``).
QUEUE = "bench"
#: Set to 1, the ``jobs_live`` section adds the zkqueue rows with OpenTelemetry on (``raw_otel``, ``task_otel``):
#: :func:`otel_tracing` in the producer and in the worker processes (the harness sets it for the otel rows' workers).
OTEL_ENV = "ZKQ_BENCH_OTEL"
#: Task names, fixed so that the harness's app and the worker's app name the same tasks.
DOUBLE = "benchmarks.live_tasks.double"
BURN = "benchmarks.live_tasks.burn"


def double(n: int) -> dict[str, int]:
    """The trivial job: a small dict for the queue system to store."""
    return {"n": n, "double": n * 2}


def spin(iters: int) -> int:
    """A pure-Python loop of ``iters`` steps (holds the GIL throughout: no I/O, no C call that releases it)."""
    acc = 0
    for i in range(iters):
        acc = (acc + i * i) % 1_000_003
    return acc


def burn(n: int, iters: int) -> dict[str, Any]:
    """The CPU-bound job: :func:`spin` ``iters`` steps; returns ``n`` and the CPU milliseconds this thread spent."""
    started = time.thread_time()
    spin(iters)
    return {"n": n, "cpu_ms": round((time.thread_time() - started) * 1000, 3)}


def calibrate(ms: float = 20.0, sample: int = 100_000, tries: int = 5) -> int:
    """Steps of :func:`spin` that take about ``ms`` of CPU on this machine: the fastest of ``tries`` timings of
    ``sample`` steps, by this thread's CPU time (so other processes on the cores do not inflate it)."""
    if ms <= 0 or sample < 1 or tries < 1:
        raise ValueError(f"calibrate needs ms > 0, sample >= 1 and tries >= 1, got {ms}, {sample}, {tries}")
    best = float("inf")
    for _ in range(tries):
        started = time.thread_time()
        spin(sample)
        best = min(best, time.thread_time() - started)
    iters = max(1, int(sample * ms / 1000 / max(best, 1e-9)))
    log.debug("calibrated: %d steps of spin per %.1f ms (best %.2f ms per %d)", iters, ms, best * 1000, sample)
    return iters


def make_app(connect: str) -> tuple[Any, dict[str, Any]]:
    """A :class:`zkqueue.App` on ``connect`` with :func:`double` and :func:`burn` as tasks on :data:`QUEUE`:
    ``(app, {"double": task, "burn": task})``."""
    import zkqueue  # noqa: PLC0415

    app = zkqueue.App(connect)
    tasks = {"double": app.task(queue=QUEUE, name=DOUBLE)(double), "burn": app.task(queue=QUEUE, name=BURN)(burn)}
    return app, tasks


def otel_missing() -> str | None:
    """Why the OpenTelemetry rows cannot run here (None when they can)."""
    try:
        import opentelemetry.sdk.trace  # noqa: F401, PLC0415

        import zkqueue.otel  # noqa: F401, PLC0415
    except ImportError as exc:
        return f"OpenTelemetry is not installed: pip install 'zkqueue[otel]' ({exc})"
    return None


@contextlib.contextmanager
def otel_tracing() -> Iterator[Any]:
    """``zkqueue.otel.instrument()`` with an SDK ``TracerProvider`` whose ``BatchSpanProcessor`` exports to an
    exporter that drops the spans (counted): the cost of making and batching the spans, not of shipping them."""
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: PLC0415

    import zkqueue.otel  # noqa: PLC0415

    class Dropped(SpanExporter):
        def __init__(self) -> None:
            self.count = 0

        def export(self, spans: Any) -> SpanExportResult:
            self.count += len(spans)
            return SpanExportResult.SUCCESS

    exporter = Dropped()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    zkqueue.otel.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        zkqueue.otel.uninstrument()
        provider.shutdown()
        log.debug("OpenTelemetry: %d spans made and dropped", exporter.count)


def otel_from_env() -> None:
    """In a worker process: instrument for the rest of the process when ``$ZKQ_BENCH_OTEL`` is 1."""
    if os.environ.get(OTEL_ENV) == "1":
        otel_tracing().__enter__()  # for the process's life (its provider flushes at exit)
