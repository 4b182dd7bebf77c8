"""Groups of ops committed atomically, many groups per multi, for the Spark side (which has a bare kazoo client
and no queue context): read_queue's removals without a lock path (no leases to fence), the streaming source's
staging. Leased work (read_queue with a lock path, the executor consumers) goes through an engine queue instead."""

from __future__ import annotations

from typing import Any

from zkqueue.engine import api
from zkqueue.engine.api import op_cost


class SentGroups:
    """Groups sent by :func:`send_groups`; :meth:`results` waits for them (and re-sends failed multis)."""

    def __init__(self, client: Any, groups: list[list[Any]], limit: int | None) -> None:
        self._client = client
        self._groups = groups
        self._limit = limit
        budget = api.jute_max_buffer(limit) - api.REQUEST_HEADER_BYTES - api.MULTI_HEADER_BYTES - 1024
        chunks: list[list[int]] = []
        current: list[int] = []
        ops_in = used = 0
        for index, group in enumerate(groups):
            size = sum(op_cost(op) for op in group)  # an upper estimate: cheap, and never over the limit
            if current and (ops_in + len(group) > api.MAX_MULTI_OPS or used + size > budget):
                chunks.append(current)
                current, ops_in, used = [], 0, 0
            current.append(index)
            ops_in += len(group)
            used += size
        if current:
            chunks.append(current)
        self._pending = [(chunk, api.run_multi_async(client, [op for g in chunk for op in groups[g]],
                                                          limit=limit)) for chunk in chunks]

    def results(self) -> list[Any]:
        """Per group: ``True`` or the failed multi's result (``failure``, ``failed_index`` within the group). A
        multi that failed is re-sent one group per multi, so one bad group costs only itself."""
        out: list[Any] = [None] * len(self._groups)
        retry: list[int] = []
        for chunk, result in self._pending:
            res = result.get()
            if res.ok:
                for g in chunk:
                    out[g] = True
            elif len(chunk) == 1:
                out[chunk[0]] = res
            else:
                retry.extend(chunk)
        singles = [(g, api.run_multi_async(self._client, self._groups[g], limit=self._limit)) for g in retry]
        for g, result in singles:
            res = result.get()
            out[g] = True if res.ok else res
        return out


def send_groups(client: Any, groups: list[list[Any]], *, limit: int | None = None) -> SentGroups:
    """Send each group of ops to commit atomically, many groups per multi, pipelined; wait with ``results()``."""
    return SentGroups(client, groups, limit)


def commit_groups(client: Any, groups: list[list[Any]], *, limit: int | None = None) -> list[Any]:
    """:func:`send_groups`, then wait: per group ``True`` or the failed multi's result."""
    return send_groups(client, groups, limit=limit).results()
