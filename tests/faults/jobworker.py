"""A job worker process of the fault suite: ``python jobworker.py <json config>``.

It runs ``JobQueue.work`` and journals (JSON lines, as faultworker.py) ``deliver`` for every job its handler runs
(with the job id, attempt, session id and ``fails``: whether this run fails on purpose), ``lost`` when its session
ends, ``ready``, ``stats`` (``jq.stats()``) and ``done``. With ``max_jobs`` in the config it works under
``RateLimit(max_jobs, 1.0)``. The handler returns the job's params doubled, which the checker finds in the
completed records. Jobs listed in ``fail_first`` raise on their first attempt, jobs in ``fail_always`` on every one.
While the file ``hold_file`` (if given) exists, every run journals ``holding`` and never ends (the test SIGKILLs the
process then: provably mid-job, as faultworker.py's consumers). Jobs listed in ``cancellable`` run until their
``job.cancel_requested`` turns true (journalled as ``cancel_seen``), at most 60 s.

With ``"async": true`` it runs an :class:`~zkqueue.aio.AsyncJobQueue` on an event loop instead, and
``jq.work(handler, concurrency=...)`` with a coroutine handler (``await asyncio.sleep``); its ``stats`` line then
also has the worker's own counts (``AsyncWorker.stats()``) under ``worker``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from faultworker import connect, start_worker  # type: ignore[import-not-found]

from zkqueue.aio import AsyncJobQueue
from zkqueue.jobs import JobQueue, RateLimit, RetryPolicy


class PlannedFailure(Exception):
    """A handler run that fails on purpose (``fail_first`` / ``fail_always``)."""


def main() -> None:
    cfg, journal, stop = start_worker(sys.argv[1])
    client = connect(cfg, journal, stop)
    rate = RateLimit(cfg["max_jobs"], 1.0) if "max_jobs" in cfg else None  # the rate-limit scenario's workers
    options = {"retry": RetryPolicy(max_attempts=cfg["max_attempts"], backoff=0.1, jitter=False), "rate_limit": rate}
    fail_first, fail_always = set(cfg.get("fail_first", ())), set(cfg.get("fail_always", ()))
    work_seconds = cfg.get("work_seconds", 0.002)
    hold_file = cfg.get("hold_file")
    cancellable = set(cfg.get("cancellable", ()))

    def begin(job) -> tuple[bool, bool]:  # noqa: ANN001 - journals the run; (whether it fails on purpose, holds)
        fails = job.id in fail_always or (job.id in fail_first and job.attempts == 1)
        journal.write("deliver", id=job.id, attempt=job.attempts, fails=fails,
                      sid=client.client_id[0] if client.client_id else 0)
        holds = bool(hold_file) and os.path.exists(hold_file)
        if holds:
            journal.write("holding", id=job.id, attempt=job.attempts)
        return fails, holds

    def end(job, fails: bool):  # noqa: ANN001, ANN202
        if fails:
            raise PlannedFailure(f"{job.id} attempt {job.attempts} fails on purpose")
        return job.params * 2

    if cfg.get("async"):
        asyncio.run(work_async(cfg, client, options, begin, end, journal, stop))
    else:
        jq = JobQueue(client, cfg["path"], **options)
        jq.start()

        def handler(job):  # noqa: ANN001, ANN202
            fails, holds = begin(job)
            if holds:
                stop.wait()
            if job.id in cancellable:
                deadline = time.monotonic() + 60
                while not job.cancel_requested and time.monotonic() < deadline:
                    time.sleep(0.01)
                journal.write("cancel_seen" if job.cancel_requested else "cancel_missed", id=job.id,
                              attempt=job.attempts)
            time.sleep(work_seconds)
            return end(job, fails)

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


async def work_async(cfg, client, options, begin, end, journal, stop) -> None:  # noqa: ANN001
    """The ``"async": true`` mode: AsyncJobQueue.work with a coroutine handler on this process's event loop."""
    work_seconds = cfg.get("work_seconds", 0.002)

    async def handler(job):  # noqa: ANN001, ANN202
        fails, holds = begin(job)
        if holds:
            await asyncio.Event().wait()  # for ever
        await asyncio.sleep(work_seconds)
        return end(job, fails)

    async with AsyncJobQueue(client, cfg["path"], **options) as jq:
        worker = jq.work(handler, concurrency=cfg.get("concurrency", 2))
        journal.write("ready")
        while not stop.is_set():  # SIGTERM sets it
            await asyncio.sleep(0.1)
        await worker.stop()
        journal.write("stats", **jq.stats(), worker=worker.stats())


if __name__ == "__main__":
    main()
