"""A job worker process of the fault suite: ``python jobworker.py <json config>``.

It runs ``JobQueue.work`` and journals (JSON lines, as faultworker.py) ``deliver`` for every job its handler runs
(with the job id and attempt), ``lost`` when its session ends, ``ready``, ``stats`` (``jq.stats()``) and ``done``.
With ``max_jobs`` in the config it works under ``RateLimit(max_jobs, 1.0)``. The handler returns the
job's params doubled, which the checker finds in the completed records.
"""

from __future__ import annotations

import sys
import time

from faultworker import connect, start_worker  # type: ignore[import-not-found]

from zkqueue.jobs import JobQueue, RateLimit, RetryPolicy


def main() -> None:
    cfg, journal, stop = start_worker(sys.argv[1])
    client = connect(cfg, journal, stop)
    rate = RateLimit(cfg["max_jobs"], 1.0) if "max_jobs" in cfg else None  # the rate-limit scenario's workers
    jq = JobQueue(client, cfg["path"], retry=RetryPolicy(max_attempts=cfg["max_attempts"], backoff=0.1, jitter=False),
                  rate_limit=rate)
    jq.start()

    def handler(job):  # noqa: ANN001, ANN202
        journal.write("deliver", id=job.id, attempt=job.attempts, sid=client.client_id[0] if client.client_id else 0)
        time.sleep(cfg.get("work_seconds", 0.002))
        return job.params * 2

    worker = jq.work(handler, concurrency=cfg.get("concurrency", 2))
    journal.write("ready")
    while not stop.wait(0.1):
        pass
    worker.stop()
    journal.write("stats", **jq.stats())
    jq.close()
    journal.write("done")
    client.stop()
    client.close()


if __name__ == "__main__":
    main()
