"""``zkqueue demo --queue``: producers and lock-safe consumers on a 3-node ZooKeeper, with a node killed halfway.
(``zkqueue demo`` without ``--queue`` runs the task demo: :mod:`zkqueue.ops.demo_tasks`.)

Every item carries a unique id, so the summary is exact accounting: acknowledged puts, deliveries, duplicates
and lost items (always 0 in lock-safe mode). Puts are exactly once (a lost reply is settled by the producer's
marker), so a duplicate can only come from a consumer whose session was lost mid-item.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
from zkqueue._extras import require

require("rich", what="zkqueue demo")

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from zkqueue import JsonSerializer, QueueBuilder
from zkqueue.server.embedded import ZooKeeperEnsemble
from zkqueue.errors import ServerStartError
from zkqueue.server.testing import make_client

log = logging.getLogger("zkqueue.ops.demo")

QUEUE_PATH = "/demo/jobs"
LOCK_PATH = "/demo/jobs-locks"

_retry_put = retry(
    retry=retry_if_exception_type((ConnectionLoss, OperationTimeoutError, SessionExpiredError)),
    wait=wait_exponential(multiplier=0.05, max=2.0),
    stop=stop_after_delay(120),
    reraise=True,
)


@dataclass
class DemoReport:
    put: int = 0
    delivered: int = 0
    unique: int = 0
    duplicates: int = 0
    lost: int = 0
    seconds: float = 0.0
    killed_node: int | None = None
    per_consumer: list[int] = field(default_factory=list)

    @property
    def items_per_second(self) -> float:
        return self.unique / self.seconds if self.seconds else 0.0


def run_demo(
    items: int = 3000,
    producers: int = 2,
    consumers: int = 2,
    kill_node: bool = True,
    timeout: float = 180.0,
    console: Console | None = None,
) -> DemoReport:
    """Run the demo and print a summary; returns the figures."""
    console = console or Console()
    report = DemoReport(per_consumer=[0] * consumers)
    seen: Counter[str] = Counter()
    acknowledged: set[str] = set()
    guard = threading.Lock()
    consumed_event = threading.Event()

    console.print("[bold]Starting a 3-node ZooKeeper ensemble[/bold] (jars from the pyspark wheel) ...")
    with ZooKeeperEnsemble(size=3) as zk:
        console.print(f"ensemble ready at {zk.connect_string}, leader is node {zk.leader()}")
        clients = []

        def consumer_for(index: int):  # noqa: ANN202 - a closure per consumer
            def consume(item: dict) -> None:
                with guard:
                    seen[item["id"]] += 1
                    report.per_consumer[index] += 1
                consumed_event.set()

            return consume

        queues = []
        for c in range(consumers):
            client = make_client(zk.connect_string, timeout=10.0)
            clients.append(client)
            q = (
                QueueBuilder.builder(client, consumer_for(c), JsonSerializer(), QUEUE_PATH)
                .lock_path(LOCK_PATH)
                .build_queue()
            )
            q.start()
            queues.append(q)

        def produce(p: int) -> None:
            client = make_client(zk.connect_string, timeout=10.0)
            clients.append(client)
            with QueueBuilder.builder(client, None, JsonSerializer(), QUEUE_PATH).put_in_background(
                False
            ).build_queue() as q:
                put_one = _retry_put(q.put)
                for i in range(p, items, producers):
                    item_id = f"item-{i:06d}"
                    put_one({"id": item_id, "payload": "x" * 64})
                    with guard:
                        acknowledged.add(item_id)

        start = time.monotonic()
        threads = [threading.Thread(target=produce, args=(p,), name=f"demo-producer-{p}") for p in range(producers)]
        for t in threads:
            t.start()

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        recovery = _Recovery(zk, console)
        with Progress(*columns, console=console, transient=False) as progress:
            put_task = progress.add_task("put     ", total=items)
            got_task = progress.add_task("consumed", total=items)
            deadline = start + timeout
            while time.monotonic() < deadline:
                consumed_event.wait(0.1)
                consumed_event.clear()
                with guard:
                    n_put, n_unique = len(acknowledged), len(seen)
                progress.update(put_task, completed=n_put)
                progress.update(got_task, completed=n_unique)
                if kill_node and report.killed_node is None and n_unique >= items // 2:
                    report.killed_node = _kill_leader(zk, console)
                    recovery.killed(n_unique)
                recovery.check(n_unique)
                if n_unique >= items and not any(t.is_alive() for t in threads):
                    break
        for t in threads:
            t.join(timeout=max(1.0, deadline - time.monotonic()))
        report.seconds = time.monotonic() - start
        for q in queues:
            q.close()
        for client in clients:
            client.stop()
            client.close()

    with guard:
        report.put = len(acknowledged)
        report.delivered = sum(seen.values())
        report.unique = len(seen)
        report.duplicates = report.delivered - report.unique
        report.lost = len(acknowledged - set(seen))
    _print_summary(console, report)
    return report


def _kill_leader(zk: ZooKeeperEnsemble, console: Console) -> int | None:
    try:
        leader = zk.leader()
    except ServerStartError:
        return None
    zk.kill(leader)
    console.print(f"[red]killed ZooKeeper node {leader} (the leader) halfway[/red]; the other two keep quorum")
    return leader


class _Recovery:
    """Tells, in plain words, what follows the leader kill: the election of a new leader, then consumers working
    again (their connection errors in between are one quiet WARNING line each, not tracebacks)."""

    def __init__(self, zk: ZooKeeperEnsemble, console: Console) -> None:
        self._zk = zk
        self._console = console
        self._at: float | None = None
        self._consumed_at_kill = 0
        self._elected = False
        self._resumed = False
        self._next_look = 0.0

    def killed(self, consumed: int) -> None:
        self._at = time.monotonic()
        self._consumed_at_kill = consumed
        self._console.print("  clients lose their connection to that node: each logs one WARNING line, then "
                            "reconnects to another node")

    def check(self, consumed: int) -> None:
        if self._at is None:
            return
        now = time.monotonic()
        if not self._elected and now >= self._next_look:
            self._next_look = now + 0.5
            try:
                leader = self._zk.leader()
            except ServerStartError:
                leader = None  # still electing
            if leader is not None:
                self._elected = True
                self._consumed_at_kill = consumed
                self._console.print(f"  [green]node {leader} was elected the new leader[/green] "
                                    f"{now - self._at:.1f} s after the kill")
        if self._elected and not self._resumed and consumed > self._consumed_at_kill:
            self._resumed = True
            self._console.print(f"  [green]consumers are working again[/green] under the new leader, "
                                f"{now - self._at:.1f} s after the kill (the accounting below checks nothing was lost)")


def _print_summary(console: Console, report: DemoReport) -> None:
    table = Table(title="zkqueue demo: lock-safe consumers, exact accounting")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("items put (acknowledged)", str(report.put))
    table.add_row("deliveries", str(report.delivered))
    table.add_row("unique items consumed", str(report.unique))
    table.add_row("duplicates", str(report.duplicates))
    table.add_row("lost", f"[{'red' if report.lost else 'green'}]{report.lost}[/]")
    table.add_row("per consumer", ", ".join(str(n) for n in report.per_consumer))
    table.add_row("ZooKeeper node killed", "none" if report.killed_node is None else f"node {report.killed_node}")
    table.add_row("seconds", f"{report.seconds:.1f}")
    table.add_row("items/s (end to end)", f"{report.items_per_second:,.0f}")
    console.print(table)
