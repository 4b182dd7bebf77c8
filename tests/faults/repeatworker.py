"""A job queue process for the repeat fault tests: ``python repeatworker.py <json config>``.

It starts a JobQueue on ``cfg["path"]`` (so it contends to run the scheduler of its repeats) with a worker that
journals (JSON lines, as faultworker.py) ``ran`` for every job it runs, with the job id and attempt; ``lost`` when
its session ends, ``ready`` and ``done``. SIGTERM stops it cleanly; the tests SIGKILL it.
"""

from __future__ import annotations

import sys

from faultworker import connect, start_worker  # type: ignore[import-not-found]

from zkqueue.jobs import JobQueue


def main() -> None:
    cfg, journal, stop = start_worker(sys.argv[1])
    client = connect(cfg, journal, stop)
    jq = JobQueue(client, cfg["path"])
    jq.start()

    def handler(job):  # noqa: ANN001, ANN202
        journal.write("ran", id=job.id, attempt=job.attempts)
        return job.id

    worker = jq.work(handler, concurrency=2)
    journal.write("ready")
    while not stop.wait(0.1):
        pass
    worker.stop()
    jq.close()
    journal.write("done")
    client.stop()
    client.close()


if __name__ == "__main__":
    main()
