"""Threads shared by the queues of one client, on a real ZooKeeper (zkqueue.engine.shared): one chores thread runs
every job queue's reaper and every lock-safe queue's lease keeper, one events thread carries every queue's
connection states; a flow's step queues run no scheduler of repeats, so a flow of more steps adds no thread per step
but its handler slots and its claimers."""

from __future__ import annotations

import threading
import time

from zkqueue.engine.api import ClientServices
from zkqueue.flows import Flow
from zkqueue.jobs import JobQueue, Keep
from zkqueue.server.testing import wait_for


def _named(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_job_queues_on_one_client_share_one_chores_thread_and_one_events_thread(zk_client) -> None:
    services = ClientServices.of(zk_client)
    assert ClientServices.of(zk_client) is services
    before = services.chores
    # other clients of this process (other tests) may run their own
    elsewhere = (len(_named("zkqueue-chores")) - (services.chores > 0), len(_named("zkqueue-events")))
    one = JobQueue(zk_client, "/shared/one", keep_completed=Keep(count=1), reap_interval=0.05)
    two = JobQueue(zk_client, "/shared/two", keep_completed=Keep(count=1), reap_interval=0.05, scheduler=False)
    with one, two:
        for jq in (one, two):  # the shared thread reaps both queues' finished records
            for i in range(3):
                jq.add({"i": i}, job_id=f"r{i}")
            with jq.take(max_jobs=3) as jobs:
                assert len(jobs) == 3
        # two reapers and two lease keepers (each queue's engine claims lock-safe), on one thread
        assert services.chores == before + 4
        assert len(_named("zkqueue-chores")) - elsewhere[0] == 1
        assert len(_named("zkqueue-events")) - elsewhere[1] <= 1
        assert _named("zkqueue-leases-") == [] and _named("zkqueue-reaper") == []
        assert len(_named("zkqueue-scheduler-/shared/one")) == 1 and _named("zkqueue-scheduler-/shared/two") == []
        wait_for(lambda: one.counts()["completed"] == 1 and two.counts()["completed"] == 1)
    assert services.chores == before
    wait_for(lambda: _named("zkqueue-scheduler-/shared") == [])
    if before == 0:
        wait_for(lambda: services.threads == 0)


def test_a_flow_of_more_steps_adds_only_its_claimers(zk_client) -> None:
    counts = []
    for n in (2, 6):
        flow = Flow(zk_client, f"/shared/flow{n}")
        names = [f"s{i}" for i in range(n)]
        for name, nxt in zip(names, [*names[1:], None]):
            flow.step(name, lambda job: 1, next=nxt)
        with flow, flow.work(concurrency=2):
            counts.append({prefix: len(_named(prefix)) for prefix in (
                "zkqueue-chores", "zkqueue-events", "zkqueue-leases-", "zkqueue-scheduler-", "zkqueue-reaper",
                f"zkqueue-flow-/shared/flow{n}-step")})
    for c in counts:  # whatever the steps: no lease keeper, scheduler or reaper of their own; two handler slots
        assert c["zkqueue-leases-"] == c["zkqueue-scheduler-"] == c["zkqueue-reaper"] == 0, counts
        assert c["zkqueue-chores"] >= 1 and c["zkqueue-events"] >= 1, counts
        assert c[next(k for k in c if k.startswith("zkqueue-flow-"))] == 2, counts
    # a flow of 6 steps runs no more shared threads than one of 2
    assert (counts[1]["zkqueue-chores"], counts[1]["zkqueue-events"]) == (
        counts[0]["zkqueue-chores"], counts[0]["zkqueue-events"]), counts


def test_a_chore_that_raises_runs_again_and_a_cancel_waits_for_a_run(zk_client) -> None:
    services = ClientServices.of(zk_client)
    runs: list[int] = []
    ran = threading.Event()

    def chore() -> None:
        runs.append(1)
        ran.set()
        raise RuntimeError("a failing chore")

    cancel = services.every(0.01, chore)
    wait_for(lambda: len(runs) >= 3)  # logged, not fatal: it runs again
    cancel()
    seen = len(runs)
    ran.clear()
    assert not ran.wait(0.1) and len(runs) == seen


def test_a_reaper_whose_client_was_closed_says_so_once_and_resumes_when_it_is_started_again(
        zk_client_factory, caplog) -> None:
    """A queue left open on a client its owner closed: its reaper used to log a warning with a traceback at every
    interval, for as long as the process lived (one such leftover of a test did so in CI)."""
    client = zk_client_factory()
    jq = JobQueue(client, "/shared/closed", keep_completed=Keep(count=0), reap_interval=0.05, scheduler=False)
    jq.start()
    try:
        with caplog.at_level("WARNING", logger="zkqueue.jobs.reaper"):
            client.stop()
            time.sleep(0.5)  # ten intervals
            client.start()
            jq.add({"i": 1}, job_id="after")
            with jq.take(max_jobs=1) as jobs:
                assert len(jobs) == 1
            wait_for(lambda: client.get_children(jq.paths.completed) == [], timeout=10)  # reaping again
        said = [r.getMessage() for r in caplog.records if r.name == "zkqueue.jobs.reaper"]
        assert len(said) == 1 and "client was closed before the queue" in said[0], said
    finally:
        jq.close()
