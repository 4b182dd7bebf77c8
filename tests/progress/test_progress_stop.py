"""ProgressConsumer.stop() on a real ZooKeeper once the session was lost while a job ran: the term that started the
job is over (the window forgot it), but its worker still runs, and stop() must wait for it. Otherwise a consumer
that takes over (here: started after stop() returned) runs the job again while the old run is still going, and the
job is recorded twice.

The race is made deterministic: the held worker is released either by stop() having returned (the bug: the
worker then finishes after it) or by stop() saying it waits for running jobs (the fix), never by a timer."""

from __future__ import annotations

import threading

import pytest
from kazoo.recipe.lock import Lock

from zkqueue.progress import JobLog, ProgressConsumer
from zkqueue.server.testing import expire_session, on_log, wait_for

pytestmark = pytest.mark.timeout(120)

#: What ProgressConsumer.stop() logs (INFO) when it has to wait for workers that still run.
WAITING = "waiting for"


def test_stop_after_a_lost_session_returns_only_once_the_running_worker_finished(zk_client_factory) -> None:
    first, other = zk_client_factory(), zk_client_factory()
    log = JobLog(first, "/logs/lost")
    log.append_many([f"job-{i}".encode() for i in range(1, 61)])
    path = "/progress/lost"
    runs: list[int] = []
    order: list[str] = []
    lock = threading.Lock()
    started, release = threading.Event(), threading.Event()

    def worker(index: int, job: bytes) -> None:
        if index == 41:
            started.set()
            release.wait(60)  # the session is lost while 41 runs
        with lock:
            runs.append(index)
            if index == 41:
                order.append("job 41 finished")

    a = ProgressConsumer(first, jobs=log, progress_path=path, worker=worker, max_processing=1, max_search_ahead=5,
                         progress_interval=0.0, progress_batch=1, identifier="a")
    # another contender queues behind A: once A's session ends it is elected, so A campaigns again behind it and
    # has no term (and no window) when it stops
    blocker = Lock(other, f"{path}/leader", "blocker")
    holder = threading.Thread(target=blocker.acquire, kwargs={"timeout": 60})
    a.start()
    try:
        assert started.wait(30)
        assert a.stored_index == 40  # 40 stored before 41 was dispatched (one at a time, batch of 1)
        holder.start()
        wait_for(lambda: blocker.contenders() == ["a", "blocker"])
        expire_session(first)
        holder.join(30)
        assert blocker.is_acquired
        wait_for(lambda: blocker.contenders() == ["blocker", "a"], message="A did not campaign again")
        assert not a.is_active
        with on_log("zkqueue.progress.consumer", WAITING, release.set):
            a.stop()
            with lock:
                order.append("stop returned")
            release.set()
    finally:
        release.set()
        a.stop()
        if holder.is_alive():
            holder.join(60)
        blocker.release()
    assert order == ["job 41 finished", "stop returned"]
    before = list(runs)
    assert before == list(range(1, 42))
    b = ProgressConsumer(other, jobs=JobLog(other, "/logs/lost"), progress_path=path,
                         worker=lambda i, job: runs.append(i), max_processing=3, progress_interval=0.0)
    with b:
        assert b.wait_processed(60, timeout=30)
    again = runs[len(before):]
    assert sorted(again) == list(range(41, 61))  # the takeover reruns 41 once; the old run ended before stop()
