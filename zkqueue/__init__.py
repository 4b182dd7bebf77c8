"""zkqueue: durable jobs and tasks on the ZooKeeper you already run, with Curator-compatible queues beneath (kazoo).

Public names are imported lazily, so ``import zkqueue.server.embedded`` (used by tooling before kazoo is installed)
stays light.

Start with the task API: ``app = zkqueue.App("zk1:2181/myapp")``, ``@app.task``, ``task.enqueue(...)``,
``handle.result(timeout=30)`` (see :mod:`zkqueue.tasks`).

Layers, bottom up (each a subpackage):

- ``formats``: item framing, node names, serializers. Pure, no I/O.
- ``transport``: ZooKeeper requests beyond kazoo's API (multis, multiRead, pipelining), the poll(2) handler, TLS
  and ACL settings.
- ``engine``: :class:`DistributedQueue` and the parts it is made of (producer, run loop, takers, leases,
  completion, delivery), with the seams the layers above build on.
- ``recipes``: priority, delay, id and simple queues, the sharder, the blocking consumer.
- ``jobs``: job queues (records, attempts, retries, dead letters, results); ``tasks``: the App and its tasks on them.
- ``spark``: the PySpark data source and executor consumers.
- ``ops``: the command line, queue counts, the demo.
- ``server``: the embedded ZooKeeper ensemble, its jars and the test kit.

``pip install zkqueue`` brings the core; the dashboard, metrics, Spark, Celery, OpenTelemetry, the rich CLI views and
the embedded server's jars come with extras (:mod:`zkqueue._extras` lists them; a missing one raises
:class:`~zkqueue.errors.MissingExtraError`, which names it).

The layers above the engine import it only through :mod:`zkqueue.engine.api` (checked by an import-linter contract).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "QueueBuilder": "zkqueue.builder",
    "DistributedQueue": "zkqueue.engine.queue",
    "QueueStats": "zkqueue.engine.queue",
    "QueueConfig": "zkqueue.engine.config",
    "QueueConsumer": "zkqueue.consumer",
    "ConnectionState": "zkqueue.consumer",
    "ErrorMode": "zkqueue.consumer",
    "QueuePutListener": "zkqueue.listeners",
    "BytesSerializer": "zkqueue.formats.serializers",
    "StrSerializer": "zkqueue.formats.serializers",
    "JsonSerializer": "zkqueue.formats.serializers",
    "QueueSerializer": "zkqueue.formats.serializers",
    "ZooKeeperEnsemble": "zkqueue.server.embedded",
    "DistributedPriorityQueue": "zkqueue.recipes.priority",
    "DistributedDelayQueue": "zkqueue.recipes.delay",
    "DistributedIdQueue": "zkqueue.recipes.ids",
    "SimpleDistributedQueue": "zkqueue.recipes.simple",
    "NoSuchElementError": "zkqueue.errors",
    "PutOutcomeUnknown": "zkqueue.errors",
    "BlockingQueueConsumer": "zkqueue.recipes.blocking",
    "QueueSharder": "zkqueue.recipes.sharder",
    "QueueSharderPolicies": "zkqueue.recipes.sharder",
    "QueueAllocator": "zkqueue.recipes.sharder",
    "LeaderLatch": "zkqueue.recipes.sharder",
    "PollingHandler": "zkqueue.transport.handler",
    "new_client": "zkqueue.transport.handler",
    "LargeItems": "zkqueue.engine.blobs",
    "App": "zkqueue.tasks.app",
    "chain": "zkqueue.flows.canvas",
    "group": "zkqueue.flows.canvas",
    "chord": "zkqueue.flows.canvas",
    "Signature": "zkqueue.flows.canvas",
    "CanvasHandle": "zkqueue.flows.canvas",
    "CanvasFailedError": "zkqueue.errors",
    "CanvasCancelledError": "zkqueue.errors",
    "Task": "zkqueue.tasks.task",
    "JobHandle": "zkqueue.tasks.handle",
    "Call": "zkqueue.tasks.params",
    "JobQueue": "zkqueue.jobs.queue",
    "RetryPolicy": "zkqueue.jobs.retry",
    "JobState": "zkqueue.jobs.model",
    "Job": "zkqueue.jobs.model",
    "ZkQueueError": "zkqueue.errors",
    "ConfigurationError": "zkqueue.errors",
    "MissingExtraError": "zkqueue.errors",
    "JobFailedError": "zkqueue.errors",
    "JobDeadError": "zkqueue.errors",
    "JobCancelledError": "zkqueue.errors",
    "JobNotFoundError": "zkqueue.errors",
    "JobTimeoutError": "zkqueue.errors",
    "WaitTimeoutError": "zkqueue.errors",
    "SessionLostError": "zkqueue.errors",
    "NonRetryableError": "zkqueue.errors",
    "UnknownTaskError": "zkqueue.errors",
    "TaskParamsError": "zkqueue.errors",
    "UndecodableParamsError": "zkqueue.errors",
    "DuplicateTaskError": "zkqueue.errors",
    "ConnectFailedError": "zkqueue.errors",
    "ConnectionLostError": "zkqueue.errors",
    "BrokerConnectionError": "zkqueue.errors",
}

__all__ = sorted(_EXPORTS)


if TYPE_CHECKING:  # pragma: no cover
    from zkqueue.builder import QueueBuilder
    from zkqueue.consumer import ConnectionState, ErrorMode, QueueConsumer
    from zkqueue.server.embedded import ZooKeeperEnsemble
    from zkqueue.engine.blobs import LargeItems
    from zkqueue.transport.handler import PollingHandler, new_client
    from zkqueue.listeners import QueuePutListener
    from zkqueue.engine.config import QueueConfig
    from zkqueue.engine.queue import DistributedQueue, QueueStats
    from zkqueue.formats.serializers import BytesSerializer, JsonSerializer, QueueSerializer, StrSerializer
    from zkqueue.recipes.blocking import BlockingQueueConsumer
    from zkqueue.recipes.delay import DistributedDelayQueue
    from zkqueue.recipes.ids import DistributedIdQueue
    from zkqueue.recipes.priority import DistributedPriorityQueue
    from zkqueue.recipes.sharder import LeaderLatch, QueueAllocator, QueueSharder, QueueSharderPolicies
    from zkqueue.flows.canvas import CanvasHandle, Signature, chain, chord, group
    from zkqueue.errors import (
        CanvasCancelledError,
        CanvasFailedError,
        ConfigurationError,
        ConnectFailedError,
        ConnectionLostError,
        DuplicateTaskError,
        JobCancelledError,
        JobDeadError,
        JobFailedError,
        JobNotFoundError,
        JobTimeoutError,
        MissingExtraError,
        NonRetryableError,
        NoSuchElementError,
        SessionLostError,
        BrokerConnectionError,
        TaskParamsError,
        UndecodableParamsError,
        UnknownTaskError,
        WaitTimeoutError,
        ZkQueueError,
    )
    from zkqueue.jobs.model import Job, JobState
    from zkqueue.jobs.queue import JobQueue
    from zkqueue.jobs.retry import RetryPolicy
    from zkqueue.tasks.app import App
    from zkqueue.tasks.handle import JobHandle
    from zkqueue.tasks.params import Call
    from zkqueue.tasks.task import Task
    from zkqueue.recipes.simple import SimpleDistributedQueue


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'zkqueue' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
