"""The ``canvas`` row of ``python -m benchmarks``: completed chords/s, each a chord of ``MEMBERS`` (100) members and
a body (``chord((member.s(i) for i in range(100)), total.s())``: the body sums its members' results).

One ``zkqueue worker benchmarks.canvas_bench:app -c 4`` process is started first and logs that it started
(untimed). Timing starts at the first ``enqueue`` (``INFLIGHT`` = 10 adds in flight, from as many threads; one
multi per chord: its record, its graph and its 100 members' jobs) and ends when the last chord's result is in (each
``h.result()`` waits on a watch of its record): each member went through the canvas hand-off (its end, the canvas
record's update, in one fenced multi; the last one's with the body's job) and each body ran once. ``jobs`` counts
the chords COMPLETED with the right sum.

The peer, run in the same section (each repeat runs both): BullMQ 6.7's FlowProducer on a private local
``redis-server``, a parent with 100 children per flow, 10 adds in flight, a Worker per queue (children, parents) at
the same concurrency (``benchmarks/bullmq_chord.mjs``); its end is the 'completed' event of the last parent. The
row's ``ratio`` is zkqueue's median over BullMQ's. BullMQ's row is "n/a" with the reason when Node, npm (the first
run installs BullMQ into ``benchmarks/.node/``) or ``redis-server`` is missing.

    python -m benchmarks.canvas_bench section [--hosts HOSTS] [--count 30]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

#: Members per chord.
MEMBERS = 100
#: Adds in flight (threads adding at once), as the BullMQ peer's FlowProducer.add calls.
INFLIGHT = 10
_MJS = str(Path(__file__).with_name("bullmq_chord.mjs"))
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
_NS_ENV = "CANVAS_BENCH_NAMESPACE"


def member(i: int) -> int:
    return i


def total(values: list[int]) -> int:
    return sum(values)


def register(app: Any) -> Any:
    return app.task(name="bench.member")(member), app.task(name="bench.total")(total)


_app: Any = None


def __getattr__(name: str) -> Any:
    """``app``: the worker process's app (``ZKQUEUE_CONNECT``; namespace from ``$CANVAS_BENCH_NAMESPACE``)."""
    global _app
    if name != "app":
        raise AttributeError(name)
    if _app is None:
        from zkqueue import App

        _app = App(namespace=os.environ.get(_NS_ENV, "zkqueue"))
        register(_app)
    return _app


def run_once(hosts: str, count: int, max_seconds: float, concurrency: int = 4) -> dict[str, Any]:
    """One run: ``count`` chords of :data:`MEMBERS` members, one worker process."""
    from zkqueue import App, chord

    namespace = f"bench-canvas-{uuid.uuid4().hex[:8]}"
    app = App(hosts, namespace=namespace)
    member_t, total_t = register(app)
    env = {**os.environ, "ZKQUEUE_CONNECT": hosts, _NS_ENV: namespace,
           "PYTHONPATH": os.pathsep.join(p for p in (_REPO_ROOT, os.environ.get("PYTHONPATH", "")) if p)}
    t_spawn = time.monotonic()
    worker = subprocess.Popen([sys.executable, "-m", "zkqueue.ops.cli", "worker", "benchmarks.canvas_bench:app",
                               "-c", str(concurrency), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, cwd=_REPO_ROOT, env=env, start_new_session=True)
    try:
        assert worker.stdout is not None
        for line in worker.stdout:
            if " started: queues " in line:
                break
        else:
            raise RuntimeError("the canvas worker did not start")
        worker_start = time.monotonic() - t_spawn
        want = MEMBERS * (MEMBERS - 1) // 2
        t0 = time.time()
        with ThreadPoolExecutor(INFLIGHT) as adders:
            handles = list(adders.map(
                lambda _n: chord((member_t.s(i) for i in range(MEMBERS)), total_t.s()).enqueue(), range(count)))
        t_added = time.time()
        done = 0
        complete = True
        for h in handles:
            try:
                done += h.result(timeout=max(0.1, t0 + max_seconds - time.time())) == want
            except Exception:  # noqa: BLE001 - a chord not done in time: the run is partial
                complete = False
                break
        t_end = time.time()
        seconds = t_end - t0
        return {"impl": "zkqueue", "jobs": done, "count": count, "members": MEMBERS, "seconds": round(seconds, 6),
                "rate": round(done / seconds, 2) if seconds > 0 else 0.0, "add_seconds": round(t_added - t0, 6),
                "member_rate": round(done * MEMBERS / seconds, 1) if seconds > 0 else 0.0,
                "complete": complete and done == count, "worker_start_seconds": round(worker_start, 3),
                "concurrency": concurrency}
    finally:
        worker.terminate()
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
        with contextlib.suppress(Exception):
            app.client.delete(f"/{namespace}", recursive=True)
        app.close()


def run_bullmq(server: Any, home: Path, count: int, max_seconds: float, concurrency: int = 4) -> dict[str, Any]:
    """One run of BullMQ's row on ``server`` (see the module doc)."""
    from benchmarks.flows_bench import drive_bullmq_peer  # noqa: PLC0415

    run = drive_bullmq_peer(_MJS, "chord", server, home, count, max_seconds, [
        "--prefix", f"chord-{uuid.uuid4().hex[:8]}", "--count", str(count), "--members", str(MEMBERS),
        "--concurrency", str(concurrency), "--inflight", str(INFLIGHT)])
    ok, seconds = run["ok"], run["seconds"]
    return {"impl": "bullmq", "jobs": ok, "count": count, "members": MEMBERS, "seconds": round(seconds, 6),
            "rate": round(ok / seconds, 2) if seconds > 0 else 0.0, "add_seconds": run["add_seconds"],
            "member_rate": round(ok * MEMBERS / seconds, 1) if seconds > 0 else 0.0,
            "complete": run["done"] and ok == count, "worker_start_seconds": run["worker_start_seconds"],
            "concurrency": concurrency, "inflight": INFLIGHT, "version": run["version"]}


def run_section(hosts: str, count: int, repeats: int, max_seconds: float, *, bullmq: bool = True) -> dict[str, Any]:
    """The ``canvas`` row: ``repeats`` runs of zkqueue and of BullMQ's parent with 100 children (one after the other
    in each repeat), their median rates (completed chords/s) and ``ratio`` (zkqueue's median over BullMQ's)."""
    from benchmarks.flows_bench import paired_section  # noqa: PLC0415

    paired = paired_section(lambda: run_once(hosts, count, max_seconds),
                            lambda server, home: run_bullmq(server, home, count, max_seconds), repeats, bullmq=bullmq)
    return {"status": "ok", "count": count, "members": MEMBERS, "repeats": repeats, "inflight": INFLIGHT, **paired}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.canvas_bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("section",))
    ap.add_argument("--hosts", help="the ZooKeeper connect string (default: an embedded 3-node ensemble)")
    ap.add_argument("--count", type=int, default=30, help="chords per run")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--no-bullmq", action="store_true", help="skip BullMQ's row")
    args = ap.parse_args(argv)
    with contextlib.ExitStack() as stack:
        hosts = args.hosts
        if not hosts:
            from zkqueue.server.embedded import ZooKeeperEnsemble

            hosts = stack.enter_context(ZooKeeperEnsemble(size=3)).connect_string
        print(json.dumps(run_section(hosts, args.count, args.repeats, args.max_seconds, bullmq=not args.no_bullmq),
                         indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
