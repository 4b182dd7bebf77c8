"""The table ``zkqueue watch`` renders: one row per queue with its depths and put/take rates."""

from __future__ import annotations

import logging
from typing import Any

from zkqueue._extras import require

require("rich", what="zkqueue watch")

from rich.table import Table  # noqa: E402

from zkqueue.ops.history import History

log = logging.getLogger("zkqueue.ops.watch")


def _opt(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


class Watcher:
    """Samples the queues at ``paths`` and renders them as a rich table."""

    def __init__(self, client: Any, paths: list[str]) -> None:
        self.history = History(client, paths, keep=120.0)

    def table(self) -> Table:
        table = Table(title="zkqueue watch", caption="rates from the queue node's child version; refresh 1 s")
        for name in ("queue", "kind", "pending", "in flight", "retrying", "dead", "quarantine", "consumers",
                     "puts/s", "takes/s"):
            table.add_column(name, justify="left" if name in ("queue", "kind") else "right", no_wrap=name == "queue")
        for s in self.history.sample():
            d = s.depth
            if d.kind == "flow":
                table.add_row(d.path, "flow", f"{_opt(d.jobs)} jobs", "", "", "", "", "", "", "")
                continue
            table.add_row(d.path, d.kind, f"{d.pending:,}" + ("" if d.exact else "~"), f"{d.in_flight:,}",
                          _opt(d.retrying), _opt(d.dead), f"{d.quarantined:,}", str(d.consumers),
                          f"{s.puts_per_s:,.1f}", f"{s.takes_per_s:,.1f}")
        return table
