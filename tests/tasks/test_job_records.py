"""A job's record names its task and may carry its own most attempts: stored only when set (old records read as
before), given by JobQueue.add / add_all, honoured when its attempts fail, and overridden by the policy a worker
passes to JobOutcomes.failure."""

from __future__ import annotations

import json

import pytest

from zkqueue.errors import ConfigurationError
from zkqueue.formats import framing
from zkqueue.jobs import JobQueue, JobState, RetryPolicy
from zkqueue.jobs.claims import Claimed
from zkqueue.jobs.model import Record
from zkqueue.server.testing import wait_for

PATH = "/jobs/records"
FAST = RetryPolicy(max_attempts=3, backoff=0.0, jitter=False)


def header(record: Record) -> dict:
    return json.loads(framing.decode_items(record.encode())[0])


def test_task_and_max_attempts_are_in_the_header_only_when_set() -> None:
    plain = Record(id="a", state=JobState.QUEUED, params=b"{}")
    assert "task" not in header(plain) and "max_attempts" not in header(plain)
    assert Record.decode(plain.encode()) == plain  # a record written before the fields reads as before
    named = Record(id="b", state=JobState.QUEUED, params=b"{}", task="myapp.tasks.send_mail", max_attempts=5)
    assert header(named)["task"] == "myapp.tasks.send_mail" and header(named)["max_attempts"] == 5
    again = Record.decode(named.encode())
    assert again == named and again.moved(JobState.ACTIVE).task == "myapp.tasks.send_mail"


def test_add_and_add_all_store_the_task_and_max_attempts(zk_client) -> None:
    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        jq.add({"x": 1}, job_id="one", task="myapp.tasks.add", max_attempts=2)
        assert jq.add_all([("two", 2), ("three", 3)], task="myapp.tasks.mul") == []
        jq.add(4, job_id="plain")
        one = jq.get("one")
        assert (one.task, one.max_attempts, one.queue_path) == ("myapp.tasks.add", 2, PATH)
        assert [jq.get(i).task for i in ("two", "three")] == ["myapp.tasks.mul"] * 2
        assert jq.get("two").max_attempts is None
        assert (jq.get("plain").task, jq.get("plain").max_attempts) == (None, None)
        with jq.take(max_jobs=4, timeout=5) as jobs:  # the fields survive the claim
            assert {j.id: j.task for j in jobs}["one"] == "myapp.tasks.add"
        assert jq.get("one").state is JobState.COMPLETED and jq.get("one").task == "myapp.tasks.add"


@pytest.mark.parametrize("kwargs", [{"task": ""}, {"task": " padded "}, {"task": "a\nb"}, {"task": 7},
                                    {"max_attempts": 0}, {"max_attempts": True}, {"max_attempts": 1.5}])
def test_bad_task_fields_are_refused(zk_client, kwargs) -> None:
    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        with pytest.raises(ConfigurationError):
            jq.add(1, job_id="x", **kwargs)
        with pytest.raises(ConfigurationError):
            jq.add_all([("y", 1)], **kwargs)
        assert jq.get("x") is None and jq.get("y") is None


def test_a_records_own_max_attempts_decides_its_failures(zk_client) -> None:
    """The queue allows 3 attempts; a job with max_attempts=5 is dead after 5 (the claim lets it run past the
    queue's 3), one with 2 after 2, one with 1 after 1."""
    runs: dict[str, int] = {}

    def handler(job):
        runs[job.id] = runs.get(job.id, 0) + 1
        raise ValueError("always")

    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        jq.add(None, job_id="two", max_attempts=2)
        jq.add(None, job_id="one", max_attempts=1)
        jq.add(None, job_id="five", max_attempts=5)
        jq.add(None, job_id="queue")
        jq.work(handler)
        wait_for(lambda: jq.counts()["dead"] == 4, timeout=20)
        assert runs == {"two": 2, "one": 1, "five": 5, "queue": 3}
        assert [jq.get(i).attempts for i in ("two", "one", "five", "queue")] == [2, 1, 5, 3]


def test_failure_uses_the_policy_given_instead_of_the_queues(zk_client) -> None:
    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        jq.add(None, job_id="given", max_attempts=3)
        held = jq.claim(timeout=5)
        one_shot = RetryPolicy(max_attempts=1)
        held.finish(jq.outcomes.failure(Claimed(held.record, held.version), ValueError("no"), one_shot))
        assert jq.get("given").state is JobState.DEAD  # the given policy wins over the record's and the queue's
        assert jq.outcomes.policy(held.record).max_attempts == 3  # without one: the record's own
        assert jq.outcomes.policy(held.record, one_shot) is one_shot
