"""The ``progress`` row of ``python -m benchmarks``: jobs/s through a :class:`zkqueue.progress.ProgressConsumer`
with trivial workers, and ZooKeeper progress writes per job.

Per run: a fresh :class:`~zkqueue.progress.JobLog` is filled with ``count`` 100-byte jobs (untimed, 200 per
multi), then one consumer (``max_processing=8``, ``max_search_ahead=1000``, progress every 1 s or 100 jobs)
runs them all; the time runs from ``start()`` to the processed index reaching the head (the last progress write
included, since ``stop()`` stores it).

    python -m benchmarks.progress_probe --hosts HOST:PORT [--count N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
import uuid
from typing import Any

log = logging.getLogger("zkqueue.benchmarks.progress_probe")


def run_once(hosts: str, count: int, root: str) -> dict[str, Any]:
    from zkqueue.progress import JobLog, ProgressConsumer  # noqa: PLC0415
    from zkqueue.server.testing import make_client  # noqa: PLC0415

    client = make_client(hosts, timeout=15.0)
    try:
        jobs = JobLog(client, f"{root}/log")
        payload = b"x" * 100
        for lo in range(0, count, 200):
            jobs.append_many([payload] * min(200, count - lo))
        consumer = ProgressConsumer(client, jobs=jobs, progress_path=f"{root}/progress",
                                    worker=lambda index, job: None, max_processing=8, max_search_ahead=1000,
                                    progress_interval=1.0, progress_batch=100)
        started = time.perf_counter()
        consumer.start()
        ok = consumer.wait_processed(count, timeout=300)
        consumer.stop()
        elapsed = time.perf_counter() - started
        stats = consumer.stats()
        return {"rate": round(stats.jobs_done / elapsed, 1), "complete": ok, "seconds": round(elapsed, 3),
                "jobs": stats.jobs_done, "progress_writes": stats.progress_writes,
                "writes_per_job": round(stats.progress_writes / max(1, stats.jobs_done), 4)}
    finally:
        try:
            client.delete(root, recursive=True)
        except Exception as exc:  # noqa: BLE001 - a leftover only costs server memory
            log.warning("could not delete %s: %r", root, exc)
        client.stop()
        client.close()


def run_section(hosts: str, count: int, repeats: int) -> dict[str, Any]:
    """``repeats`` runs; the median jobs/s and progress writes per job, or the reason there are none."""
    runs = []
    try:
        for _ in range(repeats):
            runs.append(run_once(hosts, count, f"/zkq-bench-progress-{uuid.uuid4().hex[:8]}"))
    except Exception as exc:  # noqa: BLE001 - reported in the table, the rest of the benchmark goes on
        log.warning("progress row failed: %r", exc)
        return {"status": "n/a", "reason": repr(exc)[:300], "runs": runs}
    rates = [r["rate"] for r in runs]
    return {"status": "ok", "count": count, "repeats": repeats, "runs": runs,
            "rate": statistics.median(rates),
            "writes_per_job": statistics.median(r["writes_per_job"] for r in runs),
            "complete": all(r["complete"] for r in runs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", required=True)
    p.add_argument("--count", type=int, default=5000)
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    print(json.dumps(run_section(args.hosts, args.count, args.repeats), indent=2))


if __name__ == "__main__":
    main()
