"""Fill a queue fast: sequential creates in multi transactions, several in flight at once.

Items are Curator-framed (``zkqueue.formats.framing``) under ``queue-`` names for zkqueue and Curator, or raw bytes under
kazoo's ``entry-100-`` names for kazoo's recipes, so each implementation reads its own native format.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.client import KazooClient

from zkqueue.formats import framing
from zkqueue.transport.protocol import CreateOp, gather, run_multi_async

log = logging.getLogger("zkqueue.benchmarks.prefill")

OPS_PER_MULTI = 500
IN_FLIGHT = 8


def prefill(
    client: KazooClient,
    parent: str,
    count: int,
    payload: bytes,
    *,
    style: str = "curator",
    progress: Callable[[int], None] | None = None,
) -> None:
    """Create ``count`` items under ``parent`` (created if missing). ``style`` is ``curator`` or ``kazoo``."""
    if style == "curator":
        name, data = f"{parent}/queue-", framing.encode_items([payload])
    elif style == "kazoo":
        name, data = f"{parent}/entry-100-", payload
    else:
        raise ValueError(f"unknown prefill style {style!r}")
    client.ensure_path(parent)
    done = 0
    while done < count:
        pending = []
        for _ in range(IN_FLIGHT):
            n = min(OPS_PER_MULTI, count - done)
            if n <= 0:
                break
            pending.append((n, run_multi_async(client, [CreateOp(name, data, sequence=True)] * n)))
            done += n
        for (n, _), result in zip(pending, gather([r for _, r in pending], timeout=120), strict=True):
            if isinstance(result, Exception):
                raise RuntimeError(f"prefill of {parent} failed: {result!r}") from result
            result.raise_for_failure()
            if progress:
                progress(n)
    log.debug("prefilled %s with %d items", parent, count)


def wipe(client: KazooClient, path: str, ops_per_multi: int = OPS_PER_MULTI) -> None:
    """Delete ``path`` and everything under it fast: child stats through multiRead, leaves deleted in multi
    transactions, several in flight (kazoo's recursive delete sends one request per node: minutes for the few
    hundred thousand nodes a full run writes)."""
    from kazoo.exceptions import NoNodeError  # noqa: PLC0415

    from zkqueue.transport.protocol import DeleteOp, multi_read, send_multi  # noqa: PLC0415

    try:
        children = [f"{path}/{name}" for name in client.get_children(path)]
    except NoNodeError:
        return
    leaves = []
    for child, read in zip(children, multi_read(client, children, timeout=120), strict=True):
        if isinstance(read, NoNodeError):
            continue
        if not isinstance(read, BaseException) and read[1].numChildren:
            wipe(client, child, ops_per_multi)
        else:
            leaves.append(child)
    for i in range(0, len(leaves), ops_per_multi * IN_FLIGHT):
        chunk = leaves[i : i + ops_per_multi * IN_FLIGHT]
        pending = [send_multi(client, [DeleteOp(p) for p in chunk[j : j + ops_per_multi]])
                   for j in range(0, len(chunk), ops_per_multi)]
        for result in pending:
            result.result(timeout=120)
    client.delete(path, recursive=True)  # whatever a failed batch left, and the node itself
