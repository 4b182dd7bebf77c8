"""A ProgressConsumer process of the fault suite: ``python progressworker.py <json config>``.

It runs the consumer of ``cfg["progress"]`` over the JobLog ``cfg["log"]`` and journals (JSON lines, as
faultworker.py) ``deliver`` when a job's run starts and ``done`` when it returns (both with the index and session
id), ``lost`` when its session ends, ``ready`` and ``stopped``. SIGTERM stops it cleanly; the tests SIGKILL it.

While the znode ``cfg["hold"]`` (if given) exists, every run waits after its ``deliver`` until the node is deleted
(on a watch): a test holds a standby this way, so that it cannot finish a job, and so cannot store progress, until
the test has read what the killed active process left stored.
"""

from __future__ import annotations

import sys
import threading
import time

from faultworker import connect, start_worker  # type: ignore[import-not-found]

from zkqueue.progress import JobLog, ProgressConsumer, RetryPolicy


def main() -> None:
    cfg, journal, stop = start_worker(sys.argv[1])
    client = connect(cfg, journal, stop)
    work = cfg.get("work_seconds", 0.002)
    hold = cfg.get("hold")

    def wait_while_held() -> None:
        while True:
            released = threading.Event()
            if client.exists(hold, watch=lambda _event: released.set()) is None:
                return
            released.wait(5.0)  # a watch lost with the session never fires: look again then

    def worker(index: int, job: bytes) -> None:
        sid = client.client_id[0] if client.client_id else 0
        journal.write("deliver", i=index, sid=sid)
        if hold:
            wait_while_held()
        time.sleep(work)
        if job != f"job-{index}".encode():
            raise AssertionError(f"job {index} holds {job!r}")
        journal.write("done", i=index, sid=sid)

    consumer = ProgressConsumer(client, jobs=JobLog(client, cfg["log"]), progress_path=cfg["progress"],
                                worker=worker, max_processing=cfg.get("max_processing", 4),
                                max_search_ahead=cfg.get("max_search_ahead", 100),
                                retry=RetryPolicy(max_attempts=5, backoff=0.05, jitter=False),
                                progress_interval=cfg.get("progress_interval", 0.2),
                                progress_batch=cfg.get("progress_batch", 20), identifier=cfg["name"])
    consumer.start()
    journal.write("ready", name=cfg["name"])
    while not stop.wait(0.1):
        pass
    consumer.stop()
    journal.write("stopped", stats=consumer.stats().__dict__)
    client.stop()
    client.close()


if __name__ == "__main__":
    main()
