"""A flow worker process of the fault suite: ``python flowworker.py <json config>``.

It runs ``Flow.work`` on a 3-step linear flow (``a`` -> ``b`` -> ``c``; each step adds its letter to the value it
gets) and journals (JSON lines, as faultworker.py) ``deliver`` for every step its handler runs (flow job id, step,
attempt), ``lost`` when its session ends, ``ready`` and ``done``. With ``hang`` set to ``[job id, step]``, the
first attempt of that step journals ``hanging`` and sleeps for ever (the test SIGKILLs the process there).
"""

from __future__ import annotations

import sys
import time

from faultworker import connect, start_worker  # type: ignore[import-not-found]

from zkqueue.flows import Flow
from zkqueue.jobs import RetryPolicy

STEPS = ("a", "b", "c")


def define(client, cfg: dict, handler) -> Flow:  # noqa: ANN001
    flow = Flow(client, cfg["path"], retry=RetryPolicy(max_attempts=cfg.get("max_attempts", 5), backoff=0.1,
                                                       jitter=False))
    for name, nxt in zip(STEPS, (*STEPS[1:], None)):
        flow.step(name, handler, next=nxt)
    return flow


def main() -> None:
    cfg, journal, stop = start_worker(sys.argv[1])
    client = connect(cfg, journal, stop)
    hang = cfg.get("hang")

    def handler(job):  # noqa: ANN001, ANN202
        journal.write("deliver", id=job.id, step=job.step, attempt=job.attempt)
        if hang and [job.id, job.step] == hang and job.attempt == 1:
            journal.write("hanging", id=job.id, step=job.step)
            time.sleep(3600)
        time.sleep(cfg.get("work_seconds", 0.002))
        previous = job.results[STEPS[STEPS.index(job.step) - 1]] if job.step != STEPS[0] else job.params["value"]
        return previous + job.step

    flow = define(client, cfg, handler)
    flow.start()
    worker = flow.work(concurrency=cfg.get("concurrency", 2))
    journal.write("ready")
    block_leases = False
    while not stop.wait(0.1):
        if not block_leases and worker.runtime.uses_block_leases:
            block_leases = True  # short handlers: step jobs are claimed under block leases from here on
            journal.write("block_leases")
    worker.stop()
    flow.close()
    journal.write("done")
    client.stop()
    client.close()


if __name__ == "__main__":
    main()
