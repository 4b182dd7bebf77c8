"""The app that the ``jobs_live`` section's worker processes run: ``zkqueue worker benchmarks.live_app:app --queues
bench ...``, with ``$ZKQUEUE_CONNECT`` set by the harness to the run's connect string (see
:mod:`benchmarks.live_tasks`)."""

from __future__ import annotations

import os

from benchmarks.live_tasks import make_app

app, tasks = make_app(os.environ["ZKQUEUE_CONNECT"])
