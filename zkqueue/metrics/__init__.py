"""Prometheus metrics of queues, job queues and flows (``pip install 'zkqueue[metrics]'``).

```python
from zkqueue import metrics

metrics.instrument(queue)                 # a DistributedQueue, a JobQueue or a Flow: counters and gauges
worker = jq.work(metrics.timed(handle, "/jobs/mail"))   # handler time and put-to-consume latency histograms
metrics.serve(9464)                       # http://host:9464/metrics
```

Counters (this process's work, read from ``stats()`` at each scrape; labels ``queue``, ``kind``):
``zkqueue_puts_total``, ``zkqueue_consumed_total``, ``zkqueue_errors_total``, ``zkqueue_requeues_total``,
``zkqueue_retries_total``, ``zkqueue_dead_lettered_total``, ``zkqueue_quarantined_total``.
Gauges (the queue's state in ZooKeeper, from child counts): ``zkqueue_pending``, ``zkqueue_in_flight``,
``zkqueue_retrying``, ``zkqueue_dead``, ``zkqueue_completed``, ``zkqueue_quarantine``, ``zkqueue_consumers``,
``zkqueue_flow_jobs``. Histograms: ``zkqueue_handler_seconds``, ``zkqueue_latency_seconds``.

``zkqueue metrics --port 9464 PATH...`` serves the gauges alone, for queues whose processes export nothing. A
Grafana dashboard over these metrics ships as ``zkqueue/ops/grafana/zkqueue.json`` (:func:`grafana_dashboard`).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from zkqueue._extras import require

require("prometheus_client", what="zkqueue.metrics")

from prometheus_client import REGISTRY, CollectorRegistry  # noqa: E402

from zkqueue.metrics.collectors import InstrumentedCollector
from zkqueue.metrics.exporter import depth_registry, run_exporter, serve
from zkqueue.metrics.timing import histograms, timed

__all__ = ["InstrumentedCollector", "depth_registry", "grafana_dashboard", "histograms", "instrument",
           "run_exporter", "serve", "timed"]


def instrument(target: Any, name: str | None = None, registry: CollectorRegistry = REGISTRY) -> InstrumentedCollector:
    """Register the counters and gauges of ``target`` (a :class:`~zkqueue.engine.queue.DistributedQueue`, a
    :class:`~zkqueue.jobs.JobQueue` or a :class:`~zkqueue.flows.Flow`) in ``registry``, labelled ``queue=name``
    (default: its path). ``registry.unregister(collector)`` undoes it."""
    collector = InstrumentedCollector(target, name)
    registry.register(collector)
    return collector


def grafana_dashboard() -> dict[str, Any]:
    """The Grafana dashboard (JSON model) shipped with zkqueue, over the metrics above."""
    text = resources.files("zkqueue.ops").joinpath("grafana/zkqueue.json").read_text(encoding="utf-8")
    return json.loads(text)
