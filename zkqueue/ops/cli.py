"""The ``zkqueue`` command: run an embedded ZooKeeper, put, consume, inspect, job queues, and a demo."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

import click

from zkqueue.server.embedded import ZooKeeperEnsemble
from zkqueue.errors import MissingExtraError, ZkQueueError
from zkqueue.ops.connect import client_for, connect_option

log = logging.getLogger("zkqueue.ops.cli")

class _Main(click.Group):
    """The ``zkqueue`` group: a command that needs an extra that is not installed ends with one line naming it
    (``zkqueue dashboard`` without flask: ``pip install 'zkqueue[dashboard]'``), not a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except MissingExtraError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_Main)
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """zkqueue: durable jobs, tasks and Curator-compatible queues on ZooKeeper."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@main.command()
@click.option("--nodes", default=1, show_default=True, type=click.IntRange(1, 9), help="Servers in the ensemble.")
@click.option("--port", "base_port", type=int, default=None, help="Base port: node i uses PORT+10i, +1, +2.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Keep data here (default: temp).")
def server(nodes: int, base_port: int | None, data_dir: str | None) -> None:
    """Run an embedded ZooKeeper in the foreground until Ctrl-C, and print its connect string."""
    stop = threading.Event()
    # Both signals only set the event: the loop below sees it within half a second and the ensemble is closed
    # on the way out (no KeyboardInterrupt raised at some arbitrary point of the shutdown).
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        ensemble = ZooKeeperEnsemble(size=nodes, base_port=base_port, directory=data_dir).start_all()
    except ZkQueueError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        with ensemble:  # closed however the block ends: Ctrl-C wherever it lands, SIGTERM, an error
            click.echo(ensemble.connect_string)
            click.echo(f"ZooKeeper ensemble of {nodes} running; Ctrl-C stops it.", err=True)
            while not stop.wait(0.5):
                pass
    except KeyboardInterrupt:
        pass
    click.echo("stopped", err=True)


@main.command()
@connect_option
@click.argument("path")
@click.argument("items", nargs=-1, required=True)
@click.option("--multi", is_flag=True, help="Put all ITEMS into one znode (Curator's putMulti).")
def put(connect: str, auth: str | None, acl: str | None, path: str, items: tuple[str, ...], multi: bool) -> None:
    """Put ITEMS (UTF-8 strings) into the queue at PATH."""
    from zkqueue import QueueBuilder, StrSerializer  # noqa: PLC0415

    client = client_for(connect, auth, acl)
    try:
        with QueueBuilder.builder(client, None, StrSerializer(), path).put_in_background(False).build_queue() as q:
            if multi:
                q.put_multi(list(items))
            else:
                for item in items:
                    q.put(item)
        click.echo(f"put {len(items)} item(s) into {path}")
    except ZkQueueError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        client.stop()
        client.close()


@main.command()
@connect_option
@click.argument("path")
@click.option("--lock-path", default=None, help="Consume lock-safe with ephemeral locks under this path.")
@click.option(
    "--count", type=click.IntRange(1), default=None, help="Stop after this many items (implies lock-safe mode)."
)
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Stop after this many idle seconds.")
def consume(
    connect: str, auth: str | None, acl: str | None, path: str, lock_path: str | None, count: int | None,
    timeout: float,
) -> None:
    """Consume items from PATH and print each on its own line.

    With --count the consumer is lock-safe (lock path PATH-locks unless given) and takes one item at a time, so
    an item beyond the count is never removed: its lock goes away with the session and it stays queued.
    """
    from zkqueue import QueueBuilder, StrSerializer  # noqa: PLC0415

    got = threading.Semaphore(0)
    done = threading.Event()
    seen = [0]
    guard = threading.Lock()

    def on_item(item: str) -> None:
        with guard:
            full = count is not None and seen[0] >= count
            if not full:
                seen[0] += 1
                click.echo(item)
        if full:
            done.wait()  # hold it unacked until the session closes; the item stays queued
            return
        got.release()

    if count is not None and lock_path is None:
        lock_path = path + "-locks"
    client = client_for(connect, auth, acl)
    queue = None
    try:
        builder = QueueBuilder.builder(client, on_item, StrSerializer(), path)
        if lock_path:
            builder = builder.lock_path(lock_path)
        if count is not None:
            builder = builder.batch_size(1)
        queue = builder.build_queue()
        queue.start()
        while count is None or seen[0] < count:
            if not got.acquire(timeout=timeout):
                break
    except ZkQueueError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if queue is not None:
            queue.flush_acks(timeout=30)  # what was printed is acked before the session ends
        client.stop()  # then: the lock of an item held past --count vanishes with the session
        done.set()
        if queue is not None:
            queue.close()
        client.close()
    click.echo(f"consumed {seen[0]} item(s)", err=True)


@main.command()
@connect_option
@click.argument("path")
@click.option("--lock-path", default=None, help="The queue's lock path, to count locked items.")
@click.option("--quarantine-path", default=None, help="Default: PATH-quarantine.")
def stats(
    connect: str, auth: str | None, acl: str | None, path: str, lock_path: str | None, quarantine_path: str | None
) -> None:
    """Show how many items are pending, locked and quarantined."""
    from zkqueue.ops.inspect import queue_counts  # noqa: PLC0415

    client = client_for(connect, auth, acl)
    try:
        counts = queue_counts(client, path, lock_path=lock_path, quarantine_path=quarantine_path)
    except ZkQueueError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        client.stop()
        client.close()
    for key, value in counts.items():
        click.echo(f"{key:12} {value}")


@main.command()
@click.option("--queue", "queue_demo", is_flag=True,
              help="Run the lock-safe queue demo (producers and consumers of a DistributedQueue) instead.")
@click.option("--jobs", type=click.IntRange(20, 10_000), default=None,
              help="Task demo: how many jobs to add.  [default: 600]")
@click.option("--concurrency", type=click.IntRange(1, 64), default=None,
              help="Task demo: jobs each of the two workers runs at once.  [default: 4]")
@click.option("--no-kill-worker", is_flag=True, help="Task demo: do not SIGKILL a worker.")
@click.option("--keep-open", is_flag=True,
              help="Task demo: keep the ensemble and the dashboard up after the table, until Ctrl-C.")
@click.option("--items", type=click.IntRange(1), default=None,
              help="Queue demo (implies --queue): how many items to put.  [default: 3000]")
@click.option("--producers", type=click.IntRange(1), default=None, help="Queue demo (implies --queue).  [default: 2]")
@click.option("--consumers", type=click.IntRange(1), default=None, help="Queue demo (implies --queue).  [default: 2]")
@click.option("--no-kill", is_flag=True, help="Do not kill a ZooKeeper node.")
def demo(queue_demo: bool, jobs: int | None, concurrency: int | None, no_kill_worker: bool, keep_open: bool,
         items: int | None, producers: int | None, consumers: int | None, no_kill: bool) -> None:
    """Tasks on a 3-node ZooKeeper: two `zkqueue worker` processes, a ZooKeeper node killed while jobs are added,
    a worker SIGKILLed mid-run, then the accounting (added, completed, retried, dead, lost, run twice).

    With --queue: producers and lock-safe consumers of a queue, a node killed halfway, and the accounting."""
    queue_options = {k: v for k, v in (("--items", items), ("--producers", producers), ("--consumers", consumers))
                     if v is not None}
    task_options = [k for k, v in (("--jobs", jobs), ("--concurrency", concurrency),
                                   ("--no-kill-worker", no_kill_worker), ("--keep-open", keep_open)) if v]
    if queue_options and not queue_demo:
        queue_demo = True  # the queue demo's options name it, as they did before the task demo existed
    if queue_demo and task_options:
        raise click.UsageError(f"{', '.join(task_options)}: options of the task demo, not of --queue")
    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("kazoo").setLevel(logging.ERROR)  # reconnect chatter after the kill; -v shows it
        logging.getLogger("zkqueue.engine.context").setLevel(logging.INFO)  # the RECONNECTED line after the kill
    try:
        if queue_demo:
            from zkqueue.ops.demo import run_demo  # noqa: PLC0415

            report = run_demo(items=items or 3000, producers=producers or 2, consumers=consumers or 2,
                              kill_node=not no_kill)
            failed = report.lost > 0
        else:
            from zkqueue.ops.demo_tasks import run_task_demo  # noqa: PLC0415

            task_report = run_task_demo(jobs or 600, concurrency=concurrency or 4, kill_node=not no_kill,
                                        kill_worker=not no_kill_worker, keep_open=keep_open)
            failed = not task_report.ok
    except ZkQueueError as exc:
        raise click.ClickException(str(exc)) from exc
    if failed:
        sys.exit(1)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(args: tuple[str, ...]) -> None:
    """Run the benchmark harness of a source checkout (``python -m benchmarks``); ``zkqueue bench --help`` lists
    its options. The harness is not in the wheel: run it from a clone of the zkqueue repository."""
    import importlib  # noqa: PLC0415

    checkout = find_checkout(Path(__file__).resolve().parents[2], Path.cwd())
    if checkout is None:
        raise click.ClickException(
            "zkqueue bench runs the benchmark harness (benchmarks/ at the root of a source checkout), which the "
            "installed package does not include: clone the zkqueue repository and run `zkqueue bench` (or "
            "`make venv && .venv/bin/zkqueue bench`) inside it"
        )
    if str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    try:
        runner = importlib.import_module("benchmarks.runner")
    except ImportError as exc:
        raise click.ClickException(
            f"the benchmark harness in {checkout / 'benchmarks'} did not import ({exc}); its peers need the "
            "dev and bench extras: pip install -e '.[all,dev,bench]' in the checkout (or make venv)"
        ) from exc
    loaded = Path(getattr(runner, "__file__", "") or ".").resolve()
    if checkout / "benchmarks" not in loaded.parents:
        raise click.ClickException(f"another 'benchmarks' package was imported ({loaded}), not the harness of "
                                   f"the checkout at {checkout}: run `zkqueue bench` from the checkout")
    sys.exit(runner.main(list(args)))


def find_checkout(*starts: Path) -> Path | None:
    """The root of a zkqueue source checkout at or above any of ``starts`` (tried in order): a folder that holds
    ``benchmarks/runner.py`` and the ``zkqueue`` package. The package's own location comes first (an editable
    install), then the current directory (a wheel installed while working inside a clone)."""
    for start in starts:
        for folder in (start, *start.parents):
            if (folder / "benchmarks" / "runner.py").is_file() and (folder / "zkqueue" / "__init__.py").is_file():
                return folder
    return None


def _register_jobs() -> None:
    from zkqueue.ops.jobs_cli import register  # noqa: PLC0415

    register(main, connect_option)


_register_jobs()


def _register_flows() -> None:
    from zkqueue.ops.flows_cli import register  # noqa: PLC0415

    register(main, connect_option)


_register_flows()


def _register_ops() -> None:
    from zkqueue.ops.ops_cli import register  # noqa: PLC0415

    register(main, connect_option)


_register_ops()


def _register_workers() -> None:
    from zkqueue.ops.worker_cli import register  # noqa: PLC0415

    register(main)


_register_workers()

if __name__ == "__main__":  # pragma: no cover
    main()
