"""The ``flows`` row of ``python -m benchmarks``: flow jobs/s through a 3-step linear flow (``a -> b -> c``).

One worker process (``Flow.work(concurrency=4)``: four step handlers at once across the steps, on the worker
runtime) is started first and reports READY
(untimed). Timing starts at the first ``Flow.add`` (one multi per flow job: its record and its first step's item;
``INFLIGHT`` = 50 adds in flight, from as many threads) and ends when every step queue is empty after the last
add, seen by its node's child count every 5 ms: each flow job then went through three hand-offs (a step's end, the flow
record's update and the next step's item in one multi). Every flow record is read back afterwards; ``jobs``
counts those COMPLETED with the right results.

The peer, run in the same section (each repeat runs both): BullMQ 6.7's FlowProducer on a private local
``redis-server``, the same chain as a 3-level parent/child tree, 50 adds in flight, a Worker per step queue at
the same concurrency (``benchmarks/bullmq_flows.mjs``); its end is the 'completed' event of the last root job.
The row's ``ratio`` is zkqueue's median over BullMQ's. BullMQ's row is "n/a" with the reason when Node, npm (the
first run installs BullMQ into ``benchmarks/.node/``) or ``redis-server`` is missing.

    python -m benchmarks.flows_bench section --hosts HOSTS [--count 500] [--workers 1]
    python -m benchmarks.flows_bench worker --hosts HOSTS --path PATH      (the worker process)
    python -m benchmarks.flows_bench threads [--steps 5] [--concurrency 4]  (threads of a flow worker at work)
    python -m benchmarks.flows_bench ops [--count 500]       (ZooKeeper write ops per step job of a flow worker)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

STEPS = ("a", "b", "c")
#: Adds in flight (threads adding at once), as the BullMQ peer's FlowProducer.add calls.
INFLIGHT = 50
_MJS = str(Path(__file__).with_name("bullmq_flows.mjs"))
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)


def _step(job: Any) -> int:
    previous = job.params["n"] if job.step == STEPS[0] else job.results[STEPS[STEPS.index(job.step) - 1]]
    return int(previous) + 1


def _flow(client: Any, path: str) -> Any:
    from zkqueue.flows import Flow

    flow = Flow(client, path)
    for name, nxt in zip(STEPS, (*STEPS[1:], None)):
        flow.step(name, _step, next=nxt)
    return flow


def _client(hosts: str) -> Any:
    from zkqueue.transport.handler import new_client

    client = new_client(hosts, timeout=15.0)
    client.start(timeout=30)
    return client


def _run_worker(hosts: str, path: str, concurrency: int) -> int:
    client = _client(hosts)
    with _flow(client, path) as flow, flow.work(concurrency=concurrency):
        print("READY", flush=True)
        for _ in sys.stdin:  # runs until the parent closes stdin
            pass
    client.stop()
    client.close()
    return 0


def _empty(client: Any, path: str) -> bool:
    """Whether the queue at ``path`` holds no item, from its node's stat (a listing of a long queue every 5 ms
    would load the ensemble and this process, and so slow down the run it measures)."""
    stat = client.exists(path)
    return stat is None or stat.numChildren == 0


def run_once(hosts: str, count: int, max_seconds: float, concurrency: int = 4, workers: int = 1) -> dict[str, Any]:
    """One run: ``count`` flow jobs through the 3 steps, ``workers`` worker processes (the row's: one)."""
    path = f"/bench-flows-{uuid.uuid4().hex[:8]}"
    client = _client(hosts)
    flow = _flow(client, path)
    flow.start()
    t_spawn = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.flows_bench", "worker", "--hosts", hosts, "--path",
                               path, "--concurrency", str(concurrency)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=_REPO_ROOT) for _ in range(workers)]
    try:
        for worker in procs:
            assert worker.stdout is not None
            if worker.stdout.readline().strip() != "READY":
                raise RuntimeError("a flows worker did not start")
        worker_start = time.monotonic() - t_spawn
        t0 = time.time()
        with ThreadPoolExecutor(INFLIGHT) as adders:
            list(adders.map(lambda i: flow.add({"n": i}, job_id=f"f{i}"), range(count)))
        t_added = time.time()
        done_at = None
        while time.time() - t0 < max_seconds:
            if all(_empty(client, flow.queue(s).paths.queue) for s in STEPS):
                done_at = time.time()
                break
            time.sleep(0.005)
        t_end = done_at or t0 + max_seconds
        jobs = {j.id: j for j in flow.jobs()}
        done = sum(1 for i in range(count) if (j := jobs.get(f"f{i}")) is not None
                   and j.state.value == "COMPLETED" and j.results.get("c") == i + 3)
        seconds = t_end - t0
        return {"impl": "zkqueue", "jobs": done, "count": count, "seconds": round(seconds, 6),
                "rate": round(done / seconds, 1) if seconds > 0 else 0.0, "add_seconds": round(t_added - t0, 6),
                "complete": done_at is not None and done == count, "worker_start_seconds": round(worker_start, 3),
                "steps": len(STEPS), "concurrency": concurrency, "workers": workers}
    finally:
        for worker in procs:
            with contextlib.suppress(Exception):
                worker.stdin.close()  # type: ignore[union-attr]
        for worker in procs:
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()
        with contextlib.suppress(Exception):
            flow.close()
            client.delete(path, recursive=True)
        client.stop()
        client.close()


def run_bullmq(server: Any, home: Path, count: int, max_seconds: float, concurrency: int = 4) -> dict[str, Any]:
    """One run of BullMQ's FlowProducer row on ``server`` (see the module doc)."""
    run = drive_bullmq_peer(_MJS, "flows", server, home, count, max_seconds, [
        "--prefix", f"flows-{uuid.uuid4().hex[:8]}", "--count", str(count), "--concurrency", str(concurrency),
        "--inflight", str(INFLIGHT)])
    ok, seconds = run["ok"], run["seconds"]
    return {"impl": "bullmq", "jobs": ok, "count": count, "seconds": round(seconds, 6),
            "rate": round(ok / seconds, 1) if seconds > 0 else 0.0, "add_seconds": run["add_seconds"],
            "complete": run["done"] and ok == count, "worker_start_seconds": run["worker_start_seconds"],
            "steps": len(STEPS), "concurrency": concurrency, "inflight": INFLIGHT, "version": run["version"]}


def drive_bullmq_peer(script: str, what: str, server: Any, home: Path, count: int, max_seconds: float,
                      options: list[str]) -> dict[str, Any]:
    """One run of a BullMQ FlowProducer peer script (``bullmq_flows.mjs``, ``bullmq_chord.mjs``) on ``server``,
    through its line protocol: READY, then GO -> ADDED and DONE (the last root's 'completed' event, or none within
    ``max_seconds`` of the first add), then CHECK -> CHECKED. Returns ``ok`` (roots read back correct, 0 without
    DONE), ``done``, ``seconds`` (first add to DONE or to the last add's acknowledgement, whichever came later; or
    ``max_seconds``), ``add_seconds``, ``worker_start_seconds`` and the BullMQ ``version``."""
    from benchmarks.jobs_live import _installed_version, node_executable  # noqa: PLC0415
    from benchmarks.jobs_peers import WorkerProcess  # noqa: PLC0415

    node = node_executable()
    if node is None:
        raise RuntimeError("node is not installed")
    argv = ["run", "--host", server.host, "--port", str(server.port), *options]
    proc = WorkerProcess(argv, command=[node, script], tags=("READY", "ADDED", "DONE", "CHECKED"),
                         env={"BULLMQ_HOME": str(home)})
    try:
        t_spawn = time.monotonic()
        if proc.expect("READY", 60.0) is None:
            raise RuntimeError(f"BullMQ {what} process not ready in 60 s: {proc.stderr_tail()}")
        worker_start = time.monotonic() - t_spawn
        proc.send("GO")
        added = proc.expect("ADDED", max_seconds)
        if added is None:
            raise RuntimeError(f"BullMQ adds did not finish in {max_seconds:g} s: {proc.stderr_tail()}")
        t0, t_added = float(added["t0"]), float(added["t_added"])
        done = proc.expect("DONE", max(0.0, t0 + max_seconds - time.time()))
        # ends once every root completed and every add was acknowledged (the last completion can be seen first),
        # as zkqueue's rows end, which look for the end only after their adds returned
        t_end = max(float(done["t_done"]), t_added) if done else t0 + max_seconds
        proc.send("CHECK")
        checked = proc.expect("CHECKED", 120.0) or {}
        return {"ok": int(checked.get("correct", 0)) if done else 0, "done": done is not None,
                "seconds": t_end - t0, "add_seconds": round(t_added - t0, 6),
                "worker_start_seconds": round(worker_start, 3), "version": _installed_version(home, "bullmq")}
    finally:
        proc.close()


def paired_section(ours: Any, peer_run: Any, repeats: int, *, bullmq: bool = True) -> dict[str, Any]:
    """``repeats`` runs of ``ours()`` and of ``peer_run(server, home)`` (BullMQ on a private redis-server), one after
    the other in each repeat: ``runs``, ``median`` (zkqueue's), ``bullmq`` (its runs and median) and ``ratio``
    (zkqueue's median over BullMQ's). A run that raises is recorded with its error and a rate of 0."""
    runs: list[dict[str, Any]] = []
    peer: dict[str, Any] = {"status": "n/a", "reason": "not run"}
    with contextlib.ExitStack() as stack:
        server = home = None
        if bullmq:
            try:
                from benchmarks.jobs_live import ensure_bullmq  # noqa: PLC0415
                from benchmarks.jobs_peers import redis_server  # noqa: PLC0415

                home = ensure_bullmq()
                server = stack.enter_context(redis_server())
                peer = {"status": "ok", "runs": []}
            except Exception as exc:  # noqa: BLE001 - the peer's row says why
                peer = {"status": "n/a", "reason": str(exc)[:300]}
        for _ in range(repeats):
            try:
                runs.append(ours())
            except Exception as exc:  # noqa: BLE001 - recorded; the other runs go on
                runs.append({"impl": "zkqueue", "error": repr(exc)[:300], "rate": 0.0, "complete": False})
            if server is not None and home is not None:
                try:
                    peer["runs"].append(peer_run(server, home))
                except Exception as exc:  # noqa: BLE001 - recorded; the other runs go on
                    peer["runs"].append({"impl": "bullmq", "error": repr(exc)[:300], "rate": 0.0, "complete": False})
    rates = sorted(r["rate"] for r in runs)
    median = rates[len(rates) // 2] if rates else 0.0
    out: dict[str, Any] = {"runs": runs, "median": median, "bullmq": peer}
    if peer.get("runs"):
        peer_rates = sorted(r["rate"] for r in peer["runs"])
        peer["median"] = peer_rates[len(peer_rates) // 2]
        out["ratio"] = round(median / peer["median"], 3) if peer["median"] else None
    return out


def run_section(hosts: str, count: int, repeats: int, max_seconds: float, *, bullmq: bool = True,
                workers: int = 1) -> dict[str, Any]:
    """The ``flows`` row: ``repeats`` runs of zkqueue and of BullMQ's FlowProducer (one after the other in each
    repeat), their median rates (flow jobs/s) and ``ratio`` (zkqueue's median over BullMQ's). ``workers``: zkqueue's
    worker processes (the row's: one; more show how a flow scales out, beside the same BullMQ run)."""
    paired = paired_section(lambda: run_once(hosts, count, max_seconds, workers=workers),
                            lambda server, home: run_bullmq(server, home, count, max_seconds), repeats, bullmq=bullmq)
    return {"status": "ok", "count": count, "repeats": repeats, "steps": len(STEPS), "inflight": INFLIGHT, **paired}


def count_threads(hosts: str, steps: int = 5, concurrency: int = 4) -> dict[str, Any]:
    """Threads of this process (``threading.enumerate()``) before a flow of ``steps`` linear steps starts, and
    while its worker (``work(concurrency=...)``) runs 20 flow jobs: the weight of a flow worker."""
    import collections  # noqa: PLC0415
    import re  # noqa: PLC0415
    import threading  # noqa: PLC0415

    from zkqueue.flows import Flow  # noqa: PLC0415

    client = _client(hosts)
    before = threading.active_count()
    names = [f"s{i}" for i in range(steps)]
    flow = Flow(client, f"/bench-threads-{uuid.uuid4().hex[:8]}")
    for name, nxt in zip(names, (*names[1:], None)):
        flow.step(name, lambda job: 1, next=nxt)
    with flow, flow.work(concurrency=concurrency):
        ids = [flow.add({}) for _ in range(20)]
        for job_id in ids:
            flow.wait(job_id, timeout=60)
        threads = threading.enumerate()
    kinds = collections.Counter(re.sub(r"-/bench-threads-\w+(/steps/s\d+/queue)?", "", t.name) for t in threads)
    with contextlib.suppress(Exception):
        client.delete(flow.paths.root, recursive=True)
    client.stop()
    client.close()
    return {"steps": steps, "concurrency": concurrency, "process_threads": len(threads),
            "before_flow": before, "flow_threads": len(threads) - before, "by_kind": dict(sorted(kinds.items()))}


def _op_target(path: str) -> str:
    """What a multi op of a flow worker writes, by its path: a lock (block, item lock, session fence), an item's
    fence child, a queue item, a step's job record, the flow record, or a queue's control node."""
    parts = path.split("/")
    for kind, name in (("locks", "lock"), ("records", "job record"), ("flows", "flow record")):
        if kind in parts[:-1]:
            return name
    if "queue" in parts[:-1]:
        return "item fence child" if parts[-1].startswith("lock-") else "queue item"
    return parts[-1] or path


def count_ops(hosts: str, count: int = 2000, concurrency: int = 4) -> dict[str, Any]:
    """ZooKeeper write ops a flow worker sends per step job: ``count`` flow jobs are added first (not counted),
    then a worker in this process (``work(concurrency=...)``) runs them through the 3 steps while every multi it
    sends is counted by op and target (a wrapper on the transport's multi-body builder, this process only)."""
    import collections  # noqa: PLC0415

    from zkqueue.transport import multi  # noqa: PLC0415

    ops: collections.Counter[str] = collections.Counter()
    multis = 0
    build = multi.multi_body

    def counting(client: Any, batch: Any) -> bytes:
        nonlocal multis
        multis += 1
        ops.update(f"{type(op).__name__.removesuffix('Op').lower()} {_op_target(op.path)}" for op in batch)
        return build(client, batch)

    client = _client(hosts)
    path = f"/bench-ops-{uuid.uuid4().hex[:8]}"
    flow = _flow(client, path)
    try:
        with flow:
            with ThreadPoolExecutor(INFLIGHT) as adders:
                ids = list(adders.map(lambda i: flow.add({"n": i}, job_id=f"f{i}"), range(count)))
            multi.multi_body = counting
            try:
                with flow.work(concurrency=concurrency):
                    for job_id in ids:
                        flow.wait(job_id, timeout=120)
            finally:
                multi.multi_body = build
    finally:
        with contextlib.suppress(Exception):
            client.delete(path, recursive=True)
        client.stop()
        client.close()
    steps = count * len(STEPS)
    return {"flow_jobs": count, "step_jobs": steps, "multis": multis, "ops": sum(ops.values()),
            "ops_per_step_job": round(sum(ops.values()) / steps, 2),
            "per_step_job": {k: round(v / steps, 2) for k, v in sorted(ops.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.flows_bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("section", "worker", "threads", "ops"))
    ap.add_argument("--steps", type=int, default=5, help="threads: the flow's steps")
    ap.add_argument("--hosts", help="the ZooKeeper connect string (section: default an embedded 3-node ensemble)")
    ap.add_argument("--path", help="worker: the flow's path")
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--no-bullmq", action="store_true", help="section: skip BullMQ's FlowProducer row")
    ap.add_argument("--workers", type=int, default=1,
                    help="section: zkqueue's worker processes (the benchmark row's: 1)")
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error("--workers must be at least 1")
    if args.mode == "worker":
        if not (args.hosts and args.path):
            ap.error("worker needs --hosts and --path")
        return _run_worker(args.hosts, args.path, args.concurrency)
    with contextlib.ExitStack() as stack:
        hosts = args.hosts
        if not hosts:
            from zkqueue.server.embedded import ZooKeeperEnsemble

            hosts = stack.enter_context(ZooKeeperEnsemble(size=3)).connect_string
        if args.mode == "threads":
            print(json.dumps(count_threads(hosts, args.steps, args.concurrency), indent=2), flush=True)
            return 0
        if args.mode == "ops":
            print(json.dumps(count_ops(hosts, args.count, args.concurrency), indent=2), flush=True)
            return 0
        print(json.dumps(run_section(hosts, args.count, args.repeats, args.max_seconds, bullmq=not args.no_bullmq,
                                     workers=args.workers), indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
