"""The Celery app and worker process of the ``celery_brokers`` section (see :mod:`benchmarks.celery_brokers`).

    python -m benchmarks.celery_broker_worker --broker URL --backend URL --queue Q --hostname H \
        [--concurrency 4] [--acks-late] [--prefetch-multiplier 4] [--transport-options JSON]

One ``celery worker`` (prefork pool, ``--concurrency`` children) listening on queue Q, run in this process with
``app.worker_main``; it prints ``READY {json}`` on a private copy of stdout (Celery redirects ``sys.stdout``) when
Celery's ``worker_ready`` signal fires, and exits when its stdin closes (no orphan workers).

The tasks append one line per event to the file named by ``$ZKQ_BENCH_RUNS`` (``O_APPEND``, one ``write`` per line,
so lines of concurrent pool processes never interleave):

- ``double(n)``: ``D <n> <pid> <epoch>`` then returns ``n * 2`` (the end-to-end scenario);
- ``slow(n, ms)``: ``S <n> <pid> <epoch>`` first, sleeps ``ms``, ``D <n> <pid> <epoch>`` last, returns ``n * 2``
  (the SIGKILL scenario: a task killed mid-run has an ``S`` line and no ``D`` line from that run).

``<pid>`` is the pool process's; the 5th word is the worker's name, ``$ZKQ_BENCH_NAME``. The worker logs at
``$ZKQ_BENCH_LOGLEVEL`` (default WARNING; INFO shows every task received and done).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from typing import Any

from benchmarks.jobs_worker import say  # the one protocol line writer of the peer workers

DOUBLE = "benchmarks.celery_broker_worker.double"
SLOW = "benchmarks.celery_broker_worker.slow"

_runs_fd: dict[int, int] = {}  # pid -> fd of the runs file (opened once per pool process, after the fork)


def note(kind: str, n: int) -> None:
    """Append ``<kind> <n> <pid> <epoch> <worker name>`` to ``$ZKQ_BENCH_RUNS`` (one atomic append)."""
    path = os.environ.get("ZKQ_BENCH_RUNS")
    if not path:
        return
    pid = os.getpid()
    fd = _runs_fd.get(pid)
    if fd is None:
        fd = _runs_fd[pid] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{kind} {n} {pid} {time.time():.6f} {os.environ.get('ZKQ_BENCH_NAME', '-')}\n".encode())


def double(n: int) -> int:
    note("D", n)
    return n * 2


def slow(n: int, ms: float) -> int:
    note("S", n)
    time.sleep(ms / 1000.0)
    note("D", n)
    return n * 2


def make_app(broker: str, backend: str, queue: str, *, acks_late: bool = False, prefetch_multiplier: int = 4,
             transport_options: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
    """The app of the producer and the workers: ``broker`` and ``backend`` URLs, JSON, both tasks routed to
    ``queue``, results stored. Everything else is Celery's default unless given (early acks, prefetch multiplier 4,
    the broker's default transport options)."""
    from celery import Celery

    import zkqueue.celery  # noqa: F401  (registers zkqueue:// as broker transport and result backend)

    app = Celery("zkqueue_bench_brokers", broker=broker, backend=backend, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        task_acks_late=acks_late,
        worker_prefetch_multiplier=prefetch_multiplier,
        broker_connection_retry_on_startup=True,
        broker_transport_options=dict(transport_options or {}),
    )
    app.task(name=DOUBLE)(double)
    app.task(name=SLOW)(slow)
    return app


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.celery_broker_worker", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", required=True)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--hostname", required=True)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--acks-late", action="store_true")
    ap.add_argument("--prefetch-multiplier", type=int, default=4)
    ap.add_argument("--transport-options", default="{}", help="broker_transport_options as JSON")
    ap.add_argument("--no-remote-control", action="store_true", help="worker_enable_remote_control=False")
    args = ap.parse_args(argv)
    say("STARTED", {"pid": os.getpid()})  # opens the protocol stream before Celery redirects stdout
    from celery import signals

    app = make_app(args.broker, args.backend, args.queue, acks_late=args.acks_late,
                   prefetch_multiplier=args.prefetch_multiplier, transport_options=json.loads(args.transport_options))
    if args.no_remote_control:
        app.conf.worker_enable_remote_control = False

    @signals.worker_ready.connect(weak=False)
    def _ready(**_kw: Any) -> None:
        say("READY", {"pid": os.getpid(), "t": time.time(), "hostname": args.hostname})

    main_pid = os.getpid()

    def watch() -> None:  # exit with the parent (stdin EOF), whatever state the worker is in
        # os.read on the fd, not sys.stdin.read(): a thread blocked in sys.stdin holds its buffer's lock, and the
        # pool processes forked meanwhile deadlock when they close their sys.stdin (multiprocessing does).
        while os.read(0, 65536):
            pass
        if os.getpid() == main_pid:
            os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    app.worker_main(argv=[
        "worker", "--pool=prefork", f"--concurrency={args.concurrency}", f"--loglevel={os.environ.get('ZKQ_BENCH_LOGLEVEL', 'WARNING')}",
        f"--queues={args.queue}", f"--hostname={args.hostname}",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
