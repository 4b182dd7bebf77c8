"""Hand-offs many per multi (Handoff.end_many), on a real ZooKeeper: a member whose version check fails is ended
alone (read again, built again) while the others commit together; ends of one flow record never share a batch,
so a fan-in whose parents all end in the same batch queues its join exactly once; and a flow worker's steps end
through the batches with every step recorded once."""

from __future__ import annotations

from zkqueue.flows import Flow, FlowState
from zkqueue.flows.definition import Ending
from zkqueue.flows.handoff import OK, StepRef
from zkqueue.jobs import RetryPolicy

PATH = "/flows/batching"
FAST = RetryPolicy(max_attempts=3, backoff=0.05, max_backoff=0.2, jitter=False)


def _claim_all(flow: Flow, step: str, n: int) -> list:
    helds = []
    while len(helds) < n:
        got = flow.queue(step).claim_many(n - len(helds), timeout=10)
        assert got, f"no step job of {step} came within 10 s"
        helds += got
    return helds


def _end_batch(flow: Flow, step: str, helds: list, result: object) -> list:
    items = [(StepRef(step, h.record, h.version, h.ack_ops), Ending(ok=True, result=result),
              flow.handoff.read(h.record.id)) for h in helds]
    outcomes = flow.handoff.end_many(items)
    for h, outcome in zip(helds, outcomes):
        assert outcome == OK, outcome
        h.forget()
    return outcomes


def test_a_member_whose_version_check_fails_is_retried_alone_and_the_others_commit(zk_client) -> None:
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("a", lambda job: 1, next="b")
    flow.step("b", lambda job: 2)
    with flow:
        ids = [flow.add({"n": i}, job_id=f"j{i}") for i in range(4)]
        helds = _claim_all(flow, "a", 4)
        items = [(StepRef("a", h.record, h.version, h.ack_ops), Ending(ok=True, result=h.record.id),
                  flow.handoff.read(h.record.id)) for h in helds]
        # Another writer changes one flow record after it was read: that member's version check fails.
        stale = helds[2].record.id
        data, _stat = zk_client.get(flow.paths.flow(stale))
        zk_client.set(flow.paths.flow(stale), data)
        races = flow.handoff.races
        outcomes = flow.handoff.end_many(items)
        assert outcomes == [OK] * 4
        for h in helds:
            h.forget()
        assert flow.handoff.races == races + 1  # one split, for the stale member only
        for job_id in ids:
            job = flow.get(job_id)
            assert job.results == {"a": job_id} and job.pending == ["b"]
            assert [(h.step, h.status) for h in job.history] == [("a", "done")]  # recorded once
        assert flow.queue("b").counts()["queued"] == 4
        assert flow.queue("a").counts()["queued"] == 0 and flow.queue("a").counts()["active"] == 0
        assert flow.stats()["a"]["completed"] == 4 and flow.stats()["b"]["added"] == 4


def test_a_fan_in_whose_parents_end_in_one_batch_queues_its_join_once(zk_client) -> None:
    branches = [f"b{i}" for i in range(5)]
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("start", lambda job: 0, next=branches)
    for name in branches:
        flow.step(name, lambda job: 1)
    flow.step("join", lambda job: sorted(job.results), after=branches)
    with flow:
        ids = [flow.add({}, job_id=f"f{i}") for i in range(3)]
        _end_batch(flow, "start", _claim_all(flow, "start", 3), 0)
        helds, steps = [], []
        for name in branches:  # every parent of every flow job, ended in ONE call
            got = _claim_all(flow, name, 3)
            helds += got
            steps += [name] * len(got)
        items = [(StepRef(s, h.record, h.version, h.ack_ops), Ending(ok=True, result=s), flow.handoff.read(h.record.id))
                 for s, h in zip(steps, helds)]
        assert flow.handoff.end_many(items) == [OK] * len(items)
        for h in helds:
            h.forget()
        assert flow.queue("join").counts()["queued"] == 3  # one join per flow job
        joins = _claim_all(flow, "join", 3)
        assert sorted(h.record.id for h in joins) == sorted(ids)
        for job_id in ids:
            job = flow.get(job_id)
            assert job.pending == ["join"] and {b: job.results[b] for b in branches} == {b: b for b in branches}
            assert sorted(h.step for h in job.history) == sorted(["start", *branches])  # each once
        for h in joins:
            h.release()


def test_a_flow_worker_ends_its_steps_in_batches_each_recorded_once(zk_client) -> None:
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("a", lambda job: job.params["n"] + 1, next="b")
    flow.step("b", lambda job: job.results["a"] + 1, next="c")
    flow.step("c", lambda job: job.results["b"] + 1)
    with flow:
        ids = [flow.add({"n": i}, job_id=f"w{i}") for i in range(40)]
        with flow.work(concurrency=4) as worker:
            jobs = [flow.wait(job_id, timeout=60) for job_id in ids]
        assert all(j.state is FlowState.COMPLETED for j in jobs)
        assert [j.results["c"] for j in jobs] == [i + 3 for i in range(40)]
        assert all([(h.step, h.attempts) for h in j.history] == [("a", 1), ("b", 1), ("c", 1)] for j in jobs)
        assert worker.stats()["completed"] == 120 and worker.handled == 120 and worker.errors == 0


def _block_locks(zk_client, flow: Flow, step: str) -> list[str]:
    return [n for n in zk_client.get_children(flow.queue(step).paths.locks) if n.startswith("block-")]


def test_step_jobs_under_a_block_lease_give_the_block_back_with_the_batch_that_ends_its_last_members(
        zk_client) -> None:
    """Step jobs claimed under one block lease (as a flow worker of short handlers claims them): a batch of ends
    that leaves members of the block keeps its lock; the batch that ends the last ones deletes it in its own multi,
    and the block can be claimed again at once."""
    flow = Flow(zk_client, PATH, retry=FAST)
    flow.step("a", lambda job: 1, next="b")
    flow.step("b", lambda job: 2)
    with flow:
        for i in range(6):
            flow.add({"n": i}, job_id=f"k{i}")
        helds = []
        while len(helds) < 6:
            got = flow.queue("a").claim_many(6 - len(helds), timeout=10, block_leases=True)
            assert got, "no step job of a came within 10 s"
            helds += got
        assert len(_block_locks(zk_client, flow, "a")) == 1

        def end(batch: list) -> None:
            items = [(StepRef("a", h.record, h.version, h.ack_ops, h), Ending(ok=True, result=1),
                      flow.handoff.read(h.record.id)) for h in batch]
            for h, outcome in zip(batch, flow.handoff.end_many(items)):
                assert outcome == OK, outcome
                h.forget()

        end(helds[:2])
        assert len(_block_locks(zk_client, flow, "a")) == 1  # four members left
        end(helds[2:])
        assert _block_locks(zk_client, flow, "a") == []
        flow.add({"n": 6}, job_id="k6")  # its item falls in the same block of sequence numbers
        (again,) = flow.queue("a").claim_many(1, timeout=10, block_leases=True)
        assert again.record.id == "k6"
        again.release()
        with flow.work(concurrency=2):
            jobs = [flow.wait(f"k{i}", timeout=30) for i in range(7)]
        assert all(j.state is FlowState.COMPLETED and j.results["b"] == 2 for j in jobs)
        assert all(_block_locks(zk_client, flow, s) == [] for s in ("a", "b"))
