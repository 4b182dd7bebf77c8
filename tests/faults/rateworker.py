"""A rate-limited job worker process of the fault suite: ``python rateworker.py <json config>``.

As jobworker.py (``deliver`` journaled with its wall-clock time ``t`` when the handler starts, ``lost``, ``ready``,
``done``; the handler returns the params doubled), with ``JobQueue(rate_limit=RateLimit(cfg["max_jobs"], 1.0))``.
It journals the queue's ``stats()`` (slices taken, waits at the limit, ZooKeeper errors) at the end.
"""

from __future__ import annotations

import sys
import time

from faultworker import connect, start_worker  # type: ignore[import-not-found]

from zkqueue.jobs import JobQueue, RateLimit, RetryPolicy


def main() -> None:
    cfg, journal, stop = start_worker(sys.argv[1])
    client = connect(cfg, journal, stop)
    jq = JobQueue(client, cfg["path"], retry=RetryPolicy(max_attempts=cfg["max_attempts"], backoff=0.1, jitter=False),
                  rate_limit=RateLimit(cfg["max_jobs"], 1.0))
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
