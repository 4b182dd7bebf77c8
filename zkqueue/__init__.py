"""zkqueue: Apache Curator's ZooKeeper queue recipes for Python, on kazoo.

Public names are imported lazily, so ``import zkqueue.embedded`` (used by tooling before kazoo is installed)
stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0.dev0"

_EXPORTS = {
    "QueueBuilder": "zkqueue.builder",
    "DistributedQueue": "zkqueue.queue",
    "QueueStats": "zkqueue.queue",
    "QueueConsumer": "zkqueue.consumer",
    "ConnectionState": "zkqueue.consumer",
    "ErrorMode": "zkqueue.consumer",
    "QueuePutListener": "zkqueue.listeners",
    "BytesSerializer": "zkqueue.serializers",
    "StrSerializer": "zkqueue.serializers",
    "JsonSerializer": "zkqueue.serializers",
    "QueueSerializer": "zkqueue.serializers",
    "ZooKeeperEnsemble": "zkqueue.embedded",
    "DistributedPriorityQueue": "zkqueue.priority",
    "DistributedDelayQueue": "zkqueue.delay",
    "DistributedIdQueue": "zkqueue.ids",
    "SimpleDistributedQueue": "zkqueue.simple",
    "NoSuchElementError": "zkqueue.errors",
    "BlockingQueueConsumer": "zkqueue.blocking",
    "QueueSharder": "zkqueue.sharder",
    "QueueSharderPolicies": "zkqueue.sharder",
    "QueueAllocator": "zkqueue.sharder",
    "LeaderLatch": "zkqueue.sharder",
    "PollingHandler": "zkqueue.handler",
    "new_client": "zkqueue.handler",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from zkqueue.builder import QueueBuilder
    from zkqueue.consumer import ConnectionState, ErrorMode, QueueConsumer
    from zkqueue.embedded import ZooKeeperEnsemble
    from zkqueue.handler import PollingHandler, new_client
    from zkqueue.listeners import QueuePutListener
    from zkqueue.queue import DistributedQueue, QueueStats
    from zkqueue.serializers import BytesSerializer, JsonSerializer, QueueSerializer, StrSerializer
    from zkqueue.blocking import BlockingQueueConsumer
    from zkqueue.delay import DistributedDelayQueue
    from zkqueue.ids import DistributedIdQueue
    from zkqueue.priority import DistributedPriorityQueue
    from zkqueue.sharder import LeaderLatch, QueueAllocator, QueueSharder, QueueSharderPolicies
    from zkqueue.errors import NoSuchElementError
    from zkqueue.simple import SimpleDistributedQueue


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'zkqueue' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
