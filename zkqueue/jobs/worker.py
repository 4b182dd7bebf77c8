"""``JobWorker``: the name :meth:`JobQueue.work <zkqueue.jobs.JobQueue.work>`'s workers had before the one worker
runtime; they are :class:`zkqueue.runtime.Worker` now (imported on first use: the runtime is the layer above)."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "JobWorker":
        from zkqueue.runtime.worker import Worker  # noqa: PLC0415

        return Worker
    raise AttributeError(f"module 'zkqueue.jobs.worker' has no attribute {name!r}")
