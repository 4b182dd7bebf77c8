"""The worker process of the ``jobs`` peers (see :mod:`benchmarks.jobs_peers`), one process per run:

    python -m benchmarks.jobs_worker rq     --redis-url URL --queue Q
    python -m benchmarks.jobs_worker celery --redis-url URL --queue Q --idle-queue I --hostname H --count N
    python -m benchmarks.jobs_worker zkqueue --hosts HOSTS --queue PATH

Protocol on stdout (protocol lines only; Celery's own output goes to stderr): ``READY {json}`` once the worker is
connected and idle; then

- rq: on a ``GO`` line on stdin it runs ``SimpleWorker(...).work(burst=True)`` (no fork per job; burst: it returns
  once the queue is empty) and prints ``DONE {json}`` with ``t_done`` (epoch seconds, after the last result was
  stored) and the sizes of the queue's finished and failed job registries;
- celery: the worker (``--pool solo``, concurrency 1) is released by the remote-control command ``add_consumer``
  for queue Q (it starts on the idle queue I only; see :data:`CELERY_WAKE_NAME`); it prints ``DONE {json}`` once N tasks ran, from the
  ``task_postrun`` signal, which Celery sends after the result was stored in the result backend.

- zkqueue: on ``GO`` it runs ``JobQueue(PATH).work(handler, concurrency=1)`` (results stored in the completed
  records) until stdin closes; the parent watches the completed count.

The job itself, for all: ``double(params) -> params["n"] * 2``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

#: Name of the Celery task (and, for RQ, the dotted path of :func:`double`).
CELERY_TASK_NAME = "benchmarks.jobs_worker.double"
#: A no-op Celery task (result ignored) that the parent sends to the idle queue right after ``add_consumer``: kombu's
#: Redis transport starts listening on an added queue only when its pending BRPOP (on the idle queue, 1 s timeout)
#: returns, so without it the release would wait up to 1 s.
CELERY_WAKE_NAME = "benchmarks.jobs_worker.wake"
RQ_FUNC = "benchmarks.jobs_worker.double"

_proto: Any = None
_proto_lock = threading.Lock()


def say(tag: str, payload: dict[str, Any] | None = None) -> None:
    """One protocol line on a private copy of the original stdout (Celery redirects sys.stdout to its logger)."""
    global _proto
    with _proto_lock:
        if _proto is None:
            _proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        _proto.write(f"{tag} {json.dumps(payload or {})}\n")
        _proto.flush()


def double(params: dict[str, Any]) -> int:
    """The job: a small computation whose result the queue system must store."""
    return int(params["n"]) * 2


def make_celery_app(redis_url: str, queue: str):  # type: ignore[no-untyped-def]
    """The Celery app of both sides: Redis broker, Redis result backend, JSON, the ``double`` task routed to
    ``queue``. Everything else is Celery's default (results stored, prefetch multiplier 4, early acks)."""
    from celery import Celery

    app = Celery("zkqueue_bench_jobs", broker=redis_url, backend=redis_url, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        broker_connection_retry_on_startup=True,
    )
    app.task(name=CELERY_TASK_NAME)(double)
    app.task(name=CELERY_WAKE_NAME, ignore_result=True)(_wake)
    return app


def _wake() -> None:
    """See :data:`CELERY_WAKE_NAME`."""


def _exit_on_stdin_eof() -> None:
    """Exit when the parent goes away (stdin EOF), whatever state the worker is in: no orphan workers."""

    def watch() -> None:
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def _run_rq(args: argparse.Namespace) -> int:
    from redis import Redis
    from rq import Queue, SimpleWorker

    conn = Redis.from_url(args.redis_url)
    conn.ping()
    queue = Queue(args.queue, connection=conn)
    worker = SimpleWorker([queue], connection=conn)
    say("READY", {"pid": os.getpid(), "t": time.time()})
    line = sys.stdin.readline()
    if line.strip() != "GO":
        return 0
    _exit_on_stdin_eof()
    t_go = time.time()
    worker.work(burst=True, logging_level="WARNING")
    t_done = time.time()
    say("DONE", {"t_go": t_go, "t_done": t_done, "finished": queue.finished_job_registry.count,
                 "failed": queue.failed_job_registry.count})
    return 0


def _run_celery(args: argparse.Namespace) -> int:
    from celery import signals

    app = make_celery_app(args.redis_url, args.queue)
    target = args.count
    seen = {"n": 0, "t_first": 0.0}

    @signals.worker_ready.connect(weak=False)
    def _ready(**_kw: Any) -> None:
        say("READY", {"pid": os.getpid(), "t": time.time(), "hostname": args.hostname})

    @signals.task_prerun.connect(weak=False)
    def _prerun(sender: Any = None, **_kw: Any) -> None:
        if not seen["t_first"] and getattr(sender, "name", "") == CELERY_TASK_NAME:
            seen["t_first"] = time.time()

    @signals.task_postrun.connect(weak=False)
    def _postrun(sender: Any = None, **_kw: Any) -> None:  # after the result was stored (trace: mark_as_done, postrun)
        if getattr(sender, "name", "") != CELERY_TASK_NAME:
            return
        seen["n"] += 1
        if seen["n"] == target:
            say("DONE", {"t_first": seen["t_first"], "t_done": time.time(), "handled": seen["n"]})

    _exit_on_stdin_eof()
    app.worker_main(argv=[
        "worker", "--pool=solo", "--concurrency=1", "--loglevel=WARNING",
        f"--queues={args.idle_queue}", f"--hostname={args.hostname}",
    ])
    return 0


def _run_zkqueue(args: argparse.Namespace) -> int:
    from zkqueue.jobs import JobQueue
    from zkqueue.transport.handler import new_client

    client = new_client(args.hosts, timeout=15.0)
    client.start(timeout=30)
    jq = JobQueue(client, args.queue)
    jq.start()
    say("READY", {"pid": os.getpid(), "t": time.time()})
    line = sys.stdin.readline()
    if line.strip() != "GO":
        return 0
    t_go = time.time()
    worker = jq.work(lambda job: double(job.params), concurrency=1)
    for _ in sys.stdin:  # runs until the parent closes stdin
        pass
    worker.stop()
    jq.close()
    client.stop()
    client.close()
    say("DONE", {"t_go": t_go})
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.jobs_worker", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("impl", choices=("rq", "celery", "zkqueue"))
    ap.add_argument("--redis-url", help="rq, celery: the Redis server")
    ap.add_argument("--hosts", help="zkqueue: the ZooKeeper connect string")
    ap.add_argument("--queue", required=True)
    ap.add_argument("--idle-queue", help="celery: the queue it listens on until add_consumer(queue)")
    ap.add_argument("--hostname", help="celery: the worker's node name")
    ap.add_argument("--count", type=int, default=0, help="celery: DONE after this many tasks")
    args = ap.parse_args(argv)
    say("STARTED", {"pid": os.getpid()})  # opens the protocol stream before Celery redirects stdout
    if args.impl == "zkqueue":
        return _run_zkqueue(args)
    if not args.redis_url:
        ap.error("rq and celery need --redis-url")
    if args.impl == "rq":
        return _run_rq(args)
    if not (args.idle_queue and args.hostname and args.count > 0):
        ap.error("celery needs --idle-queue, --hostname and --count")
    return _run_celery(args)


if __name__ == "__main__":
    raise SystemExit(main())
