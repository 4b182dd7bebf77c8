"""Services shared by the job queues of one client, on a real ZooKeeper: one reaper thread for all of them (and
for flows); a flow's step queues run no scheduler of repeats, so a flow of more steps adds no such threads."""

from __future__ import annotations

import threading

from zkqueue.flows import Flow
from zkqueue.jobs import JobQueue, Keep
from zkqueue.jobs.services import Services
from zkqueue.server.testing import wait_for


def _named(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_job_queues_on_one_client_share_one_reaper(zk_client) -> None:
    services = Services.of(zk_client)
    assert Services.of(zk_client) is services
    before = services.chores
    elsewhere = len(_named("zkqueue-reaper")) - services.threads  # other clients of this process (other tests)
    one = JobQueue(zk_client, "/shared/one", keep_completed=Keep(count=1), reap_interval=0.05)
    two = JobQueue(zk_client, "/shared/two", keep_completed=Keep(count=1), reap_interval=0.05, scheduler=False)
    with one, two:
        assert services.chores == before + 2
        assert len(_named("zkqueue-reaper")) - elsewhere == 1 and services.threads == 1
        assert len(_named("zkqueue-scheduler-/shared/one")) == 1 and _named("zkqueue-scheduler-/shared/two") == []
        for jq in (one, two):  # the shared thread reaps both queues' finished records
            for i in range(3):
                jq.add({"i": i}, job_id=f"r{i}")
            with jq.take(max_jobs=3) as jobs:
                assert len(jobs) == 3
        wait_for(lambda: one.counts()["completed"] == 1 and two.counts()["completed"] == 1)
    assert services.chores == before
    wait_for(lambda: _named("zkqueue-scheduler-/shared") == [] and services.threads == 0)


def test_a_flow_of_more_steps_adds_no_reaper_or_scheduler_threads(zk_client) -> None:
    counts = []
    elsewhere = len(_named("zkqueue-reaper")), len(_named("zkqueue-scheduler-"))  # other clients (other tests)
    for n in (2, 6):
        flow = Flow(zk_client, f"/shared/flow{n}")
        names = [f"s{i}" for i in range(n)]
        for name, nxt in zip(names, [*names[1:], None]):
            flow.step(name, lambda job: 1, next=nxt)
        with flow, flow.work(concurrency=2):
            counts.append((len(_named("zkqueue-reaper")) - elsewhere[0], len(_named("zkqueue-scheduler-")) - elsewhere[1],
                           len(_named(f"zkqueue-flow-/shared/flow{n}-step"))))
    assert counts == [(1, 0, 2), (1, 0, 2)]  # one shared reaper; handler slots only, whatever the steps
