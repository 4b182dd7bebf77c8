"""The engine's declared API: the one module of :mod:`zkqueue.engine` and :mod:`zkqueue.transport` that the layers
above (jobs, flows, aio, progress, spark, ops, tasks, runtime, metrics) import. Everything else in those two
packages is private to them; an import-linter contract in the test suite (``.importlinter``) keeps it so.

What is here, by job:

- **Queues and their seams**: :class:`DistributedQueue` (push or pull consumption, puts, parking, large items) and
  :class:`QueueConfig` (its options, frozen and validated),
  :class:`Completion` (how a claimed node ends, with extra ops in the same fenced multi), :class:`ClaimHook` and
  :class:`ClaimedNode` (ops added to a claim), :class:`HeldNode` (a node held by a pull-mode claim, and
  :func:`finish_nodes`, :func:`release_nodes`, :func:`forget_nodes`, :func:`commit_while_held` for many at once).
- **Ops and multis**: :class:`GroupOutcome` (how one group of ops committed together ended: the one group-commit
  result of :meth:`DistributedQueue.commit_groups` and :func:`commit_while_held`), the op constructors
  (:func:`create_op`, :func:`delete_op`, :func:`check_op`, :func:`set_op`), their sizes (:func:`op_size`, exact, as serialized; :func:`op_cost`, a cheap upper estimate)
  and the server's limits, and the requests that send them or read many nodes at once
  (:func:`multi_read`, :func:`run_multi`, ...); :data:`CONNECTION_ERRORS`, the errors after which a request's
  outcome is unknown.
- **Lease layout queries**: :func:`held_items` (which items are leased), :func:`removal_ops` (delete an item unless
  leased); parking queries (:func:`parked_count`, :func:`minute_buckets`).
- **Reads through a failover**: :func:`read_retrying`, :class:`ClientConnection`.
- **Large items**: :class:`LargeItems`, :class:`BlobWriter` and the blob helpers of :mod:`~zkqueue.engine.blobs`.
- **Clients, logs and loops**: :func:`new_client`, :func:`client_kwargs`, :func:`parse_acl`, :class:`RepeatLimiter`,
  :class:`Backoff` (the one pause after errors in a row of every background loop).
"""

from __future__ import annotations

from zkqueue.engine import blobs
from zkqueue.engine.backoff import Backoff
from zkqueue.engine.blobs import DEFAULT_MAX_ITEM_BYTES, BlobTarget, BlobWriter, LargeItems
from zkqueue.engine.commit import (
    CONNECTION_ERRORS,
    MULTI_SLACK,
    OP_OVERHEAD,
    GroupOutcome,
    check_op,
    create_op,
    delete_op,
)
from zkqueue.engine.commit import op_size as op_cost
from zkqueue.engine.config import DEFAULT_BATCH_SIZE, QueueConfig
from zkqueue.engine.context import TokenSource
from zkqueue.engine.held import (
    BlockTail,
    HeldNode,
    block_tail,
    commit_while_held,
    finish_nodes,
    forget_nodes,
    release_nodes,
)
from zkqueue.engine.leases import held_items, removal_ops
from zkqueue.engine.log_limits import DEFAULT_WINDOW, RepeatLimiter, is_connection_error
from zkqueue.engine.parking import minute_buckets, parked_count
from zkqueue.engine.put_markers import DEFAULT_READ_WAIT, ClientConnection, read_retrying, wait_connected
from zkqueue.engine.queue import DistributedQueue
from zkqueue.engine.seams import ClaimedNode, ClaimHook, Completion
from zkqueue.engine.shared import ClientServices
from zkqueue.engine.stats import Counters
from zkqueue.transport.handler import new_client
from zkqueue.transport.protocol import (
    MAX_MULTI_BYTES,
    MAX_MULTI_OPS,
    MULTI_HEADER_BYTES,
    REQUEST_HEADER_BYTES,
    op_size,
    CheckOp,
    CreateOp,
    DeleteOp,
    SetDataOp,
    delete_many,
    jute_max_buffer,
    multi_read,
    run_multi,
    run_multi_async,
    send_multi,
    send_multi_read,
)
from zkqueue.transport.reads import multi_read_async
from zkqueue.transport.security import client_kwargs, parse_acl


def set_op(path: str, data: bytes, version: int = -1) -> SetDataOp:
    """An op that sets ``path``'s data (version-checked unless ``version`` is -1)."""
    return SetDataOp(path, data, version)


__all__ = [
    "ClientServices",
    "CONNECTION_ERRORS",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_ITEM_BYTES",
    "DEFAULT_READ_WAIT",
    "DEFAULT_WINDOW",
    "MAX_MULTI_BYTES",
    "MAX_MULTI_OPS",
    "MULTI_HEADER_BYTES",
    "MULTI_SLACK",
    "OP_OVERHEAD",
    "REQUEST_HEADER_BYTES",
    "Backoff",
    "BlobTarget",
    "BlockTail",
    "BlobWriter",
    "CheckOp",
    "ClaimHook",
    "ClaimedNode",
    "ClientConnection",
    "Completion",
    "Counters",
    "CreateOp",
    "DeleteOp",
    "DistributedQueue",
    "LargeItems",
    "GroupOutcome",
    "HeldNode",
    "QueueConfig",
    "RepeatLimiter",
    "SetDataOp",
    "TokenSource",
    "blobs",
    "block_tail",
    "check_op",
    "commit_while_held",
    "finish_nodes",
    "forget_nodes",
    "client_kwargs",
    "create_op",
    "delete_many",
    "delete_op",
    "held_items",
    "is_connection_error",
    "jute_max_buffer",
    "minute_buckets",
    "multi_read",
    "multi_read_async",
    "new_client",
    "op_cost",
    "op_size",
    "parked_count",
    "parse_acl",
    "read_retrying",
    "release_nodes",
    "removal_ops",
    "run_multi",
    "run_multi_async",
    "send_multi",
    "send_multi_read",
    "set_op",
    "wait_connected",
]
