"""The ``zkqueue`` command: run an embedded ZooKeeper, put, consume, inspect, job queues, and a demo."""

from __future__ import annotations

import logging
import signal
import sys
import threading

import click

from zkqueue.server.embedded import ZooKeeperEnsemble
from zkqueue.errors import ZkQueueError
from zkqueue.ops.connect import client_for, connect_option

log = logging.getLogger("zkqueue.ops.cli")

@click.group()
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """zkqueue: Curator-compatible distributed queues on ZooKeeper."""
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
@click.option("--items", default=3000, show_default=True, help="How many items to put.")
@click.option("--producers", default=2, show_default=True)
@click.option("--consumers", default=2, show_default=True)
@click.option("--no-kill", is_flag=True, help="Do not kill a ZooKeeper node halfway.")
def demo(items: int, producers: int, consumers: int, no_kill: bool) -> None:
    """3-node ZooKeeper, producers and lock-safe consumers, a node killed halfway, and the accounting."""
    from zkqueue.ops.demo import run_demo  # noqa: PLC0415

    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("kazoo").setLevel(logging.ERROR)  # reconnect chatter after the kill; -v shows it
        logging.getLogger("zkqueue.engine.context").setLevel(logging.INFO)  # the RECONNECTED line after the kill
    try:
        report = run_demo(items=items, producers=producers, consumers=consumers, kill_node=not no_kill)
    except ZkQueueError as exc:
        raise click.ClickException(str(exc)) from exc
    if report.lost:
        sys.exit(1)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(args: tuple[str, ...]) -> None:
    """Run the benchmark harness (``python -m benchmarks``); ``zkqueue bench --help`` lists its options."""
    import importlib  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    checkout = Path(__file__).resolve().parents[2]  # zkqueue/ops/cli.py: benchmarks/ is beside the package, in the
    # source tree (not in the wheel)
    if (checkout / "benchmarks" / "runner.py").is_file() and str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    try:
        runner = importlib.import_module("benchmarks.runner")
    except ImportError as exc:
        raise click.ClickException(
            f"the benchmarks package is not importable ({exc}); run from a source checkout of zkqueue"
        ) from exc
    sys.exit(runner.main(list(args)))


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
