"""The ``flows`` row of ``python -m benchmarks``: flow jobs/s through a 3-step linear flow (``a -> b -> c``).

One worker process (``Flow.work(concurrency=4)``: four step handlers at once across the steps, on the worker
runtime) is started first and reports READY
(untimed). Timing starts at the first ``Flow.add`` (one multi per flow job: its record and its first step's item)
and ends when every step queue is empty after the last add, seen by a listing every 5 ms: each flow job then
went through three hand-offs (a step's end, the flow record's update and the next step's item in one multi).
Every flow record is read back afterwards; ``jobs`` counts those COMPLETED with the right results.

    python -m benchmarks.flows_bench section --hosts HOSTS [--count 500]
    python -m benchmarks.flows_bench worker --hosts HOSTS --path PATH      (the worker process)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

STEPS = ("a", "b", "c")
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


def run_once(hosts: str, count: int, max_seconds: float, concurrency: int = 4) -> dict[str, Any]:
    """One run: ``count`` flow jobs through the 3 steps, one worker process."""
    path = f"/bench-flows-{uuid.uuid4().hex[:8]}"
    client = _client(hosts)
    flow = _flow(client, path)
    flow.start()
    t_spawn = time.monotonic()
    worker = subprocess.Popen([sys.executable, "-m", "benchmarks.flows_bench", "worker", "--hosts", hosts, "--path",
                               path, "--concurrency", str(concurrency)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=_REPO_ROOT)
    try:
        assert worker.stdout is not None
        if worker.stdout.readline().strip() != "READY":
            raise RuntimeError("the flows worker did not start")
        worker_start = time.monotonic() - t_spawn
        t0 = time.time()
        for i in range(count):
            flow.add({"n": i}, job_id=f"f{i}")
        t_added = time.time()
        done_at = None
        while time.time() - t0 < max_seconds:
            if all(not client.get_children(flow.queue(s).paths.queue) for s in STEPS):
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
                "steps": len(STEPS), "concurrency": concurrency}
    finally:
        with contextlib.suppress(Exception):
            worker.stdin.close()  # type: ignore[union-attr]
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
        with contextlib.suppress(Exception):
            flow.close()
            client.delete(path, recursive=True)
        client.stop()
        client.close()


def run_section(hosts: str, count: int, repeats: int, max_seconds: float) -> dict[str, Any]:
    """The ``flows`` row: ``repeats`` runs, their median rate (flow jobs/s)."""
    runs = []
    for _ in range(repeats):
        try:
            runs.append(run_once(hosts, count, max_seconds))
        except Exception as exc:  # noqa: BLE001 - recorded; the other runs go on
            runs.append({"impl": "zkqueue", "error": repr(exc)[:300], "rate": 0.0, "complete": False})
    rates = sorted(r["rate"] for r in runs)
    return {"status": "ok", "count": count, "repeats": repeats, "steps": len(STEPS), "runs": runs,
            "median": rates[len(rates) // 2] if rates else 0.0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.flows_bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("section", "worker"))
    ap.add_argument("--hosts", help="the ZooKeeper connect string (section: default an embedded 3-node ensemble)")
    ap.add_argument("--path", help="worker: the flow's path")
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-seconds", type=float, default=120.0)
    args = ap.parse_args(argv)
    if args.mode == "worker":
        if not (args.hosts and args.path):
            ap.error("worker needs --hosts and --path")
        return _run_worker(args.hosts, args.path, args.concurrency)
    with contextlib.ExitStack() as stack:
        hosts = args.hosts
        if not hosts:
            from zkqueue.server.embedded import ZooKeeperEnsemble

            hosts = stack.enter_context(ZooKeeperEnsemble(size=3)).connect_string
        print(json.dumps(run_section(hosts, args.count, args.repeats, args.max_seconds), indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
