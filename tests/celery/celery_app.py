"""The Celery app of the worker processes the end-to-end tests start (``celery -A tests.celery.celery_app``).

Broker and result backend: ``$ZKQ_CELERY_URL`` (a ``zkqueue://`` URL); where tasks note their runs:
``$ZKQ_CELERY_RUNS``.
"""

from __future__ import annotations

import os

import zkqueue.celery  # noqa: F401  (registers zkqueue:// as broker transport and result backend)
from celery import Celery


def configure(app: Celery) -> Celery:
    """The settings the worker and the test's client share."""
    app.conf.update(
        worker_prefetch_multiplier=1,
        result_expires=3600,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_default_queue="celery",
        result_chord_join_timeout=30,
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    return app


URL = os.environ.get("ZKQ_CELERY_URL", "zkqueue://127.0.0.1:2181/celery")
app = configure(Celery("zkq_e2e", broker=URL, backend=URL, include=["tests.celery.celery_tasks"]))
