"""How work travels to ZooKeeper: batched reads, checked multi transactions, pipelined async calls.

kazoo pays a large fixed cost per request, so the queue engine moves items in batches. This module is the one
import path for all of it (``from zkqueue.transport import protocol``); the code lives in one module per job:

* :mod:`zkqueue.transport.ops`: the write ops (:class:`CreateOp`, :class:`DeleteOp`, :class:`SetDataOp`,
  :class:`CheckOp`) and the packet limits (:func:`jute_max_buffer`, :func:`op_size`,
  :func:`multi_request_size`, :func:`max_create_data`, :func:`split_ops`).
* :mod:`zkqueue.transport.multi`: checked multi transactions (:func:`run_multi`, :func:`run_multi_async`,
  :func:`send_multi`, :func:`send_creates`, :func:`multi_body`, :class:`MultiResult`, :class:`PendingMulti`).
* :mod:`zkqueue.transport.reads`: multiRead, opcode 22 (:func:`multi_read`, :func:`send_multi_read`, :func:`multi_read_async`,
  :class:`MultiRead`).
* :mod:`zkqueue.transport.requests`: direct synchronous requests (:func:`call`, :func:`create`), and a children
  listing applied as its reply is read (:func:`send_get_children`).
* :mod:`zkqueue.transport.pipeline`: pipelined async calls (:func:`gather`, :func:`pipeline`,
  :func:`get_many`, :func:`create_many`, :func:`delete_many`).

Call through this module (``protocol.run_multi(...)``) to go where tests replace functions: a
``protocol.send_multi`` put in place here is what :func:`run_multi` sends through.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zkqueue.transport.multi import (
    PrebuiltTransaction,  # noqa: F401 - imported from here by tests
    MultiResult,
    PendingMulti,
    multi_body,
    run_multi_async,
    send_creates,
    send_multi,
)
from zkqueue.transport.ops import (
    DEFAULT_JUTE_MAXBUFFER,
    JUTE_MAXBUFFER_ENV,
    MAX_MULTI_BYTES,
    MAX_MULTI_OPS,
    MULTI_HEADER_BYTES,  # noqa: F401 - used through this module by zkqueue.spark.sink
    REQUEST_HEADER_BYTES,  # noqa: F401 - used through this module by zkqueue.spark.sink
    CheckOp,
    CreateOp,
    DeleteOp,
    Op,
    SetDataOp,
    full_path,  # noqa: F401 - imported from here by tests
    to_request,  # noqa: F401 - imported from here by tests
    jute_max_buffer,
    max_create_data,
    multi_request_size,
    op_size,
    split_ops,
)
from zkqueue.transport.pipeline import (
    Call,  # noqa: F401 - the type of a pipeline() call, public as it was here
    create_many,
    delete_many,
    gather,
    get_many,
    pipeline,
)
from zkqueue.transport.reads import (
    MULTI_READ_OPCODE,
    MultiRead,
    PendingRead,
    multi_read,
    multi_read_async,
    send_multi_read,
)
from zkqueue.transport.requests import call, create, send_create, send_get_children


def run_multi(
    client: Any, ops: Iterable[Op], *, limit: int | None = None, timeout: float | None = None
) -> MultiResult:
    """Commit ``ops`` in ONE all-or-nothing multi transaction and return what happened to each op.

    Op failures (node exists, no node, bad version, no auth...) come back in the MultiResult, never hidden.
    Errors of the whole request are raised; after ConnectionLoss the outcome is unknown. It sends through this
    module's :func:`send_multi`, so a stand-in put there (the fault-injection tests do) sees these multis too.
    """
    return send_multi(client, ops, limit=limit).result(timeout)

__all__ = [
    "DEFAULT_JUTE_MAXBUFFER",
    "JUTE_MAXBUFFER_ENV",
    "MAX_MULTI_BYTES",
    "MAX_MULTI_OPS",
    "MULTI_READ_OPCODE",
    "CheckOp",
    "CreateOp",
    "DeleteOp",
    "MultiRead",
    "MultiResult",
    "PendingMulti",
    "Op",
    "SetDataOp",
    "call",
    "create",
    "send_create",
    "send_get_children",
    "create_many",
    "delete_many",
    "gather",
    "get_many",
    "jute_max_buffer",
    "max_create_data",
    "multi_body",
    "multi_read",
    "multi_read_async",
    "PendingRead",
    "send_multi_read",
    "multi_request_size",
    "op_size",
    "pipeline",
    "run_multi",
    "run_multi_async",
    "send_creates",
    "send_multi",
    "split_ops",
]
