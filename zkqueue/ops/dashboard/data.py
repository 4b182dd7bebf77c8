"""What the dashboard shows, read from ZooKeeper through the public APIs: the queues under the root with their
depths and rates, a queue's head items and quarantine, a job queue's queued, running and dead jobs, whether it is
paused, and one job's record; and the actions (retry, purge dead letters, redrive the quarantine, pause and resume a
job queue, cancel a job)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict
from typing import Any

from zkqueue.errors import ZkQueueError
from zkqueue.formats import naming
from zkqueue.ops import items
from zkqueue.ops.depth import find_queues, job_paused, kind_of
from zkqueue.ops.history import History, Sample

log = logging.getLogger("zkqueue.ops.dashboard.data")


def job_dict(job: Any) -> dict[str, Any]:
    """A job (of a job queue) or a flow job as plain data for the page."""
    out = {"id": job.id, "state": job.state.value, "params": job.params}
    for key in ("attempts", "result", "priority", "progress", "headers", "run", "pending", "steps", "results",
                "data"):
        if hasattr(job, key):
            out[key] = getattr(job, key)
    out["created_at"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.created_at))
    out["updated_at"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.updated_at))
    out["errors"] = [{"attempt": e.attempt, "error": e.error, "step": getattr(e, "step", None),
                      "traceback": getattr(e, "traceback", None)} for e in job.errors]
    return out


class DashboardData:
    """Reads (and, when allowed, changes) what is under ``root``; keeps the depth history for the charts."""

    def __init__(self, client: Any, root: str, keep: float = 600.0, find_every: float = 10.0) -> None:
        self.client = client
        self.root = root
        self._found: list[tuple[str, str]] = []
        self._found_at = 0.0
        self._find_every = find_every
        self._lock = threading.Lock()
        self.history = History(client, find=self.queues, keep=keep)

    def queues(self) -> list[tuple[str, str]]:
        """(path, kind) of the queues under the root (looked for again every ``find_every`` seconds)."""
        with self._lock:
            if not self._found or time.monotonic() - self._found_at > self._find_every:
                self._found = find_queues(self.client, self.root)
                self._found_at = time.monotonic()
            return list(self._found)

    def overview(self) -> list[Sample]:
        """A fresh sample of every queue."""
        return self.history.sample()

    def workers(self) -> list[dict[str, Any]]:
        """The live task workers (``zkqueue worker``) registered next to the root's queues: under
        ``<root>/workers`` and, for a root that is an app's ``/<namespace>/queues``, ``/<namespace>/workers``."""
        from zkqueue.tasks.live import live_workers  # noqa: PLC0415 - only the dashboard's workers table needs it

        parent = self.root.rsplit("/", 1)[0] or "/"
        paths = dict.fromkeys([naming.join(self.root, "workers"), naming.join(parent, "workers")])
        return [{**asdict(w), "path": path, "running_count": len(w.running),
                 "started_at": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(w.started))}
                for path in paths for w in live_workers(self.client, path)]

    def under_root(self, path: str) -> bool:
        """True if ``path`` is a valid path at or under the root (``..`` and such are refused by the check)."""
        try:
            naming.validate_path(path)
        except ZkQueueError:
            return False
        root = self.root.rstrip("/")
        return path == self.root or path.startswith(root + "/")

    def kind(self, path: str) -> str | None:
        return kind_of(self.client, path)

    # ------------------------------------------------------------------------------------ one queue
    def peek(self, path: str, n: int, serializer: str) -> list[items.Peeked]:
        target = path + "/queue" if self.kind(path) == "jobs" else path
        return items.peek(self.client, target, n, serializer)

    def quarantine(self, path: str, serializer: str) -> list[items.Peeked]:
        target = path + "/queue" if self.kind(path) == "jobs" else path
        return items.quarantined(self.client, target, 100, serializer)

    def job_queue(self, path: str) -> Any:
        from zkqueue.jobs import JobQueue  # noqa: PLC0415

        return JobQueue(self.client, path)

    def dead_letters(self, path: str, limit: int = 50) -> list[dict[str, Any]]:
        return [job_dict(j) for j in self.job_queue(path).dead_letters(limit)]

    def job_counts(self, path: str) -> dict[str, int]:
        return self.job_queue(path).counts()

    def paused(self, path: str) -> bool:
        """Whether the job queue at ``path`` is paused (read from its control node: no queue is started here)."""
        return job_paused(self.client, path)

    def queued(self, path: str, limit: int = 50) -> list[dict[str, Any]]:
        """The first ``limit`` jobs waiting to run, in run order."""
        return [job_dict(j) for j in self.job_queue(path).queued(limit)]

    def running(self, path: str) -> list[dict[str, Any]]:
        """The jobs held by workers now, with their progress."""
        return [job_dict(j) for j in self.job_queue(path).in_progress()]

    def flow_counts(self, path: str) -> dict[str, Any]:
        from zkqueue.flows import Flow  # noqa: PLC0415

        with Flow(self.client, path) as flow:
            return flow.counts()

    def job(self, path: str, job_id: str) -> dict[str, Any] | None:
        if self.kind(path) == "flow":
            from zkqueue.flows import Flow  # noqa: PLC0415
            from zkqueue.flows.canvas_handoff import describe  # noqa: PLC0415

            with Flow(self.client, path) as flow:
                job = flow.get(job_id)
            canvas = describe(self.client, job) if job is not None else None
            if canvas is not None:  # a canvas (chain, group, chord) of tasks: its graph with each node's status
                return {**job_dict(job), "canvas": canvas}
        else:
            job = self.job_queue(path).get(job_id)
        return None if job is None else job_dict(job)

    # ------------------------------------------------------------------------------------ actions
    def _existing_job_queue(self, path: str) -> Any:
        """The job queue at ``path``, refused unless one is there (starting one elsewhere would create nodes)."""
        if not self.under_root(path) or self.kind(path) != "jobs":
            raise ZkQueueError(f"no job queue at {path} under {self.root}")
        return self.job_queue(path)

    def retry_dead(self, path: str, job_ids: list[str] | None) -> int:
        with self._existing_job_queue(path) as jq:
            return jq.retry_dead(job_ids)

    def purge_dead(self, path: str) -> int:
        with self._existing_job_queue(path) as jq:
            return jq.purge_dead(None)

    def pause(self, path: str) -> str:
        with self._existing_job_queue(path) as jq:
            jq.pause()
        return "paused"

    def resume(self, path: str) -> str:
        with self._existing_job_queue(path) as jq:
            jq.resume()
        return "resumed"

    def cancel(self, path: str, job_id: str) -> str:
        """Cancel job ``job_id``: "cancelled" (it was waiting), "cancel requested (running)" or "not found or
        finished". On a flow: its running flow job ends CANCELLED ("cancelled") or "not found or finished"."""
        from zkqueue.jobs import JobState  # noqa: PLC0415

        if self.under_root(path) and self.kind(path) == "flow":
            from zkqueue.flows import Flow  # noqa: PLC0415

            from zkqueue.flows.canvas_handoff import cancel_at  # noqa: PLC0415

            flow = Flow.open_existing(self.client, path)
            try:
                as_canvas = cancel_at(self.client, path, job_id)  # a canvas is cancelled as one (its jobs swept)
                cancelled = flow.cancel(job_id) if as_canvas is None else as_canvas
                return "cancelled" if cancelled else "not found or finished"
            finally:
                flow.close()

        with self._existing_job_queue(path) as jq:
            if not jq.cancel(job_id):
                return "not found or finished"
            job = jq.get(job_id)
        return "cancelled" if job is not None and job.state is JobState.CANCELLED else "cancel requested (running)"

    def redrive(self, path: str) -> int:
        target = path + "/queue" if self.kind(path) == "jobs" else path
        return items.redrive(self.client, target)
