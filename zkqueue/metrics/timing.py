"""Histograms of handler time and put-to-consume latency, and :func:`timed`, the wrapper that fills them."""

from __future__ import annotations

import functools
import threading
import time
from typing import Any, Callable, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Histogram

F = TypeVar("F", bound=Callable[..., Any])

BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

_lock = threading.Lock()
_histograms: dict[int, tuple[Histogram, Histogram]] = {}


def histograms(registry: CollectorRegistry = REGISTRY) -> tuple[Histogram, Histogram]:
    """``zkqueue_handler_seconds`` and ``zkqueue_latency_seconds`` (labels queue, kind) of ``registry``."""
    with _lock:
        pair = _histograms.get(id(registry))
        if pair is None:
            pair = (
                Histogram("zkqueue_handler_seconds", "Time a handler or consumer spent on one item or job.",
                          ["queue", "kind"], buckets=BUCKETS, registry=registry),
                Histogram("zkqueue_latency_seconds", "From put (or due time) to the start of its handling: jobs' "
                          "first attempts.", ["queue", "kind"], buckets=LATENCY_BUCKETS, registry=registry),
            )
            _histograms[id(registry)] = pair
        return pair


def timed(handler: F, queue: str, kind: str = "jobs", registry: CollectorRegistry = REGISTRY) -> F:
    """``handler`` wrapped to observe its time (errors included) in ``zkqueue_handler_seconds``, and, for a job on
    its first attempt, the time since it was added in ``zkqueue_latency_seconds``. Pass the result to
    ``jq.work(...)``, ``flow.step(...)`` or a queue's consumer."""
    handler_seconds, latency = histograms(registry)
    spent = handler_seconds.labels(queue, kind)
    waited = latency.labels(queue, kind)

    @functools.wraps(handler)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        job = args[0] if args else None
        created = getattr(job, "created_at", None)
        if isinstance(created, (int, float)) and getattr(job, "attempts", 1) <= 1:
            waited.observe(max(0.0, time.time() - created))
        start = time.perf_counter()
        try:
            return handler(*args, **kwargs)
        finally:
            spent.observe(time.perf_counter() - start)

    return wrapper  # type: ignore[return-value]
