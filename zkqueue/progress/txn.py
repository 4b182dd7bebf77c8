"""One ZooKeeper multi from plain op tuples, and the connection errors whose outcome is unknown.

Ops: ``("create", path, data, sequence)``, ``("set", path, data, version)``, ``("check", path, version)``,
``("delete", path, version)``. :func:`commit` returns the results (created paths, stats) or raises
:class:`MultiFailed` naming the first op that failed."""

from __future__ import annotations

import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, RolledBackError, SessionExpiredError

from zkqueue.jobs.retry import RetryPolicy

Op = tuple[Any, ...]

#: Tries of a compare-and-set loop (appends, hand-offs) before it gives up with nothing written.
CAS_TRIES = 50
#: Waits between those tries after a lost race: the job layer's jittered exponential backoff, 2 ms doubling up to
#: 250 ms (about 6 s over all the tries at worst).
CAS_BACKOFF = RetryPolicy(max_attempts=CAS_TRIES, backoff=0.002, max_backoff=0.25)

#: Errors after which a request may or may not have been applied.
UNKNOWN_OUTCOME = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)


class MultiFailed(Exception):
    """A multi was rolled back: ``index`` is the first op that failed, ``error`` its error."""

    def __init__(self, index: int, error: BaseException, op: Op) -> None:
        super().__init__(f"op {index} {op[0]} {op[1]} failed: {type(error).__name__}")
        self.index = index
        self.error = error
        self.op = op


def commit(client: KazooClient, ops: list[Op]) -> list[Any]:
    """Send ``ops`` as one multi; the results in op order, or :class:`MultiFailed`."""
    t = client.transaction()
    for op in ops:
        kind = op[0]
        if kind == "create":
            t.create(op[1], op[2], sequence=op[3])
        elif kind == "set":
            t.set_data(op[1], op[2], version=op[3])
        elif kind == "check":
            t.check(op[1], op[2])
        elif kind == "delete":
            t.delete(op[1], version=op[2])
        else:  # pragma: no cover - programming error
            raise ValueError(f"unknown op {kind!r}")
    results = t.commit()
    for i, result in enumerate(results):
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            raise MultiFailed(i, result, ops[i])
    if any(isinstance(r, Exception) for r in results):  # only rolled back: should not happen
        raise MultiFailed(0, results[0], ops[0])
    return list(results)


def cas_wait(attempt: int) -> None:
    """Sleep before compare-and-set try ``attempt + 1`` after try ``attempt`` lost a race."""
    time.sleep(CAS_BACKOFF.delay(attempt))


