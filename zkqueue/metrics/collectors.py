"""Prometheus collectors: counters and gauges of a running queue, job queue or flow (read at each scrape from its
``stats()`` and cheap depths), and of queue depths alone for the standalone exporter."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from kazoo.exceptions import ConnectionLoss
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from zkqueue.engine.api import DEFAULT_WINDOW, RepeatLimiter, is_connection_error
from zkqueue.ops.depth import Depth, depths, flow_depth, job_depth, queue_depth

log = logging.getLogger("zkqueue.metrics.collectors")

#: Scrape errors: each distinct error (type and raise site, per queue) is logged with its traceback once a minute,
#: the repeats are counted. A connection error is expected during a failover: WARNING.
SCRAPE_ERRORS = RepeatLimiter()
_warned: dict[str, float] = {}  # queue -> when its connection error was last logged at WARNING
_warned_lock = threading.Lock()

LABELS = ["queue", "kind"]

#: Counter name -> help. Each is ``zkqueue_<name>_total`` on the wire.
COUNTERS = {
    "puts": "Items put (queues) or jobs added (job queues) by this process.",
    "consumed": "Items consumed (queues) or jobs completed (job queues) by this process.",
    "errors": "Consumer errors (queues) or failed job attempts (job queues) in this process.",
    "requeues": "Items requeued after a consumer error by this process.",
    "retries": "Failed job attempts that will be retried, decided by this process.",
    "dead_lettered": "Jobs sent to the dead letters by this process.",
    "quarantined": "Corrupt items moved to the quarantine by this process.",
}

#: Gauge name -> (Depth field, help). Each is ``zkqueue_<name>``.
GAUGES = {
    "pending": ("pending", "Items (or queued jobs) waiting to be taken."),
    "in_flight": ("in_flight", "Items held by lock-safe consumers (leased or locked; active jobs)."),
    "retrying": ("retrying", "Jobs waiting for their next attempt."),
    "dead": ("dead", "Dead jobs (dead letters) kept."),
    "completed": ("completed", "Completed jobs kept."),
    "cancelled": ("cancelled", "Cancelled jobs kept."),
    "paused": ("paused", "1 while the job queue is paused (no job starts), else 0."),
    "quarantine": ("quarantined", "Nodes in the queue's quarantine."),
    "consumers": ("consumers", "Live lock-safe consumers (session fences)."),
    "flow_jobs": ("jobs", "Flow jobs kept (running and finished)."),
}


def gauge_families(rows: Iterable[Depth]) -> list[Metric]:
    """The gauges of some depths (a field that is None for a row is left out for it)."""
    families = {name: GaugeMetricFamily(f"zkqueue_{name}", doc, labels=LABELS)
                for name, (_field, doc) in GAUGES.items()}
    for row in rows:
        for name, (field, _doc) in GAUGES.items():
            value = getattr(row, field)
            if value is not None and not (row.kind == "flow" and field != "jobs"):
                families[name].add_metric([row.path, row.kind], int(value) if isinstance(value, bool) else value)
    return list(families.values())


def counter_families(rows: Iterable[tuple[str, str, dict[str, int]]]) -> list[Metric]:
    """The counters of (queue, kind, {counter name: value}) rows."""
    families = {name: CounterMetricFamily(f"zkqueue_{name}", doc, labels=LABELS) for name, doc in COUNTERS.items()}
    for path, kind, values in rows:
        for name, value in values.items():
            families[name].add_metric([path, kind], value)
    return list(families.values())


def scrape_failed(name: str, exc: BaseException) -> None:
    """Log a failed read of ``name`` during a scrape: a connection error (expected during a failover) as one
    WARNING line without traceback at most once per window, anything else with its traceback once per window
    (both counted by the caller in ``zkqueue_scrape_errors_total``)."""
    if not is_connection_error(exc):
        SCRAPE_ERRORS.error(log, exc, "metrics of %s: cannot read it (%s: %s); its gauges are left out of this "
                            "scrape", name, type(exc).__name__, exc, level=logging.WARNING, scope=name)
        return
    now = time.monotonic()
    with _warned_lock:
        shown = now - _warned.get(name, -DEFAULT_WINDOW) >= DEFAULT_WINDOW
        if shown:
            _warned[name] = now
    if shown:
        log.warning("metrics of %s: ZooKeeper cannot be reached (%s); its gauges are left out of the scrapes until "
                    "it can (repeats within %.0f s logged at DEBUG)", name, type(exc).__name__, DEFAULT_WINDOW)
    else:
        log.debug("metrics of %s: ZooKeeper cannot be reached (%s)", name, type(exc).__name__)


def scrape_errors_family(rows: Iterable[tuple[str, str, int]]) -> Metric:
    """``zkqueue_scrape_errors_total`` of (queue, kind, failed scrapes) rows."""
    family = CounterMetricFamily("zkqueue_scrape_errors", "Scrapes that could not read a queue from ZooKeeper "
                                 "(its other metrics were left out of them).", labels=LABELS)
    for path, kind, value in rows:
        family.add_metric([path, kind], value)
    return family


def queue_counters(stats: Any) -> dict[str, int]:
    """Counter values of a :class:`~zkqueue.engine.stats.QueueStats`."""
    return {"puts": stats.put_ok, "consumed": stats.consumed, "errors": stats.consumer_errors,
            "requeues": stats.requeued, "quarantined": stats.corrupt_quarantined}


def job_counters(stats: dict[str, int]) -> dict[str, int]:
    """Counter values of a :meth:`JobQueue.stats() <zkqueue.jobs.JobQueue.stats>`."""
    return {"puts": stats["added"], "consumed": stats["completed"],
            "errors": stats["retried"] + stats["dead_lettered"], "retries": stats["retried"],
            "dead_lettered": stats["dead_lettered"]}


class InstrumentedCollector(Collector):
    """Counters and gauges of one running queue, job queue or flow, read at each scrape."""

    def __init__(self, target: Any, name: str | None = None) -> None:
        self.target = target
        self.kind = _kind(target)
        self.name = name or (target.queue_path if self.kind == "queue" else target.paths.root)
        #: Scrapes of this target that failed to read ZooKeeper (``zkqueue_scrape_errors_total``).
        self.scrape_errors = 0

    def describe(self) -> list[Metric]:
        return []  # nothing at registration: no scrape then, and several queues may share the metric names

    def collect(self) -> Iterator[Metric]:
        """The target's counters and gauges; if ZooKeeper cannot be read (a ConnectionLoss during a failover, a
        NoAuth), the error is logged (rate-limited) and counted in ``zkqueue_scrape_errors_total``, this target's
        gauges are left out of this scrape (its own counters still shown), and the registry's other metrics are
        still served."""
        try:
            if not self.target.client.connected:  # fail fast: a scrape must not wait for the client to reconnect
                raise ConnectionLoss("the client is not connected to ZooKeeper")
            families = list(self._families())
        except Exception as exc:  # noqa: BLE001 - one unreadable target must not fail the whole /metrics page
            self.scrape_errors += 1
            scrape_failed(self.name, exc)
            families = self._own_counters()
        yield from families
        yield scrape_errors_family([(self.name, self.kind, self.scrape_errors)])

    def _own_counters(self) -> list[Metric]:
        """This process's counters of a queue or job queue (from its ``stats()``, no ZooKeeper read): what a scrape
        can still show while ZooKeeper cannot be read. None for a flow (its counters are per step, found in
        ZooKeeper)."""
        try:
            if self.kind == "queue":
                return counter_families([(self.name, "queue", queue_counters(self.target.stats()))])
            if self.kind == "jobs":
                return counter_families([(self.name, "jobs", job_counters(self.target.stats()))])
        except Exception as exc:  # noqa: BLE001 - as above
            log.debug("metrics of %s: no counters either: %r", self.name, exc)
        return []

    def _families(self) -> Iterator[Metric]:
        target = self.target
        if self.kind == "queue":
            rows = [queue_depth(target.client, target.queue_path, lock_path=target.lock_path,
                                quarantine_path=target.quarantine_path)]
            counters = [(self.name, "queue", queue_counters(target.stats()))]
        elif self.kind == "jobs":
            rows = [job_depth(target.client, target.paths.root)]
            counters = [(self.name, "jobs", job_counters(target.stats()))]
        else:
            rows = flow_depth(target.client, target.paths.root)
            stats = target.stats()  # per step, counted by this Flow: no step queue is made (or started) here
            zero = {"added": 0, "completed": 0, "retried": 0, "dead_lettered": 0}
            counters = [(row.path, "jobs", job_counters(stats.get(row.path.rsplit("/", 1)[-1], zero)))
                        for row in rows if row.kind == "jobs"]
        if self.kind != "flow":
            rows[0].path = self.name
        yield from counter_families(counters)
        yield from gauge_families(rows)


def _kind(target: Any) -> str:
    from zkqueue.engine.api import DistributedQueue  # noqa: PLC0415
    from zkqueue.flows import Flow  # noqa: PLC0415
    from zkqueue.jobs import JobQueue  # noqa: PLC0415

    if isinstance(target, DistributedQueue):
        return "queue"
    if isinstance(target, JobQueue):
        return "jobs"
    if isinstance(target, Flow):
        return "flow"
    raise TypeError(f"instrument() takes a DistributedQueue, JobQueue or Flow, got {type(target).__name__}")


class DepthCollector(Collector):
    """Depth gauges of the queues, job queues and flows at ``paths`` (found by their layout), for the standalone
    exporter: child counts and small listings only, never an item read."""

    def __init__(self, client: Any, paths: Sequence[str]) -> None:
        self.client = client
        self.paths = list(paths)
        self.scrape_errors: dict[str, int] = {}

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        rows: list[Depth] = []
        for path in self.paths:
            try:
                if not self.client.connected:  # fail fast: a scrape must not wait for the client to reconnect
                    raise ConnectionLoss("the client is not connected to ZooKeeper")
                rows.extend(depths(self.client, path))
            except Exception as exc:  # noqa: BLE001 - one bad path must not end the scrape
                self.scrape_errors[path] = self.scrape_errors.get(path, 0) + 1
                scrape_failed(path, exc)
        yield from gauge_families(rows)
        yield scrape_errors_family([(path, "", self.scrape_errors.get(path, 0)) for path in self.paths])
