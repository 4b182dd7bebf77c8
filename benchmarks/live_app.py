"""The app that the ``jobs_live`` section's worker processes run: ``zkqueue worker benchmarks.live_app:app --queues
bench ...``, with ``$ZKQUEUE_CONNECT`` set by the harness to the run's connect string (see
:mod:`benchmarks.live_tasks`), and OpenTelemetry on when ``$ZKQ_BENCH_OTEL`` is 1."""

from __future__ import annotations

import os

from benchmarks.live_tasks import make_app, otel_from_env

otel_from_env()  # the task + otel row's worker: instrumented with OpenTelemetry
app, tasks = make_app(os.environ["ZKQUEUE_CONNECT"])
