"""zkqueue.App with a worker (``app.queue(name).work(...)`` running ``app.resolve(job).call(job)``): the enqueue and
result round trip, duplicate ids, enqueueing by name from a process that does not import the task's module, handles
by id across queues, results that fail or time out, jobs of tasks the worker does not know (never retried), a
task's own max_attempts, and enqueue_many in few multis."""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Callable

import pytest

import task_samples
from zkqueue import App, Call, JobFailedError, JobState, RetryPolicy
from zkqueue.errors import ConfigurationError, JobNotFoundError, UnknownTaskError, WaitTimeoutError
from zkqueue.jobs import Job
from zkqueue.server.testing import thread_is_waiting, wait_for
from zkqueue.transport import protocol

FAST = RetryPolicy(max_attempts=3, backoff=0.0, jitter=False)


def runner(app: App) -> Callable[[Job], Any]:
    """The worker's handler: the job's task, from the app's registry, called with the job's params (a coroutine
    task is run to its end here)."""

    def handle(job: Job) -> Any:
        result = app.resolve(job).call(job)
        return asyncio.run(result) if inspect.iscoroutine(result) else result

    return handle


def work(app: App, *queues: str) -> None:
    for queue in queues:
        app.queue(queue).work(runner(app))


@pytest.fixture
def app(zk_client):
    with App(client=zk_client, retry=FAST) as app:
        yield app


def test_enqueue_and_result_round_trip(app) -> None:
    tasks = task_samples.register(app)
    work(app, "default", "mail", "fetch")
    mail = tasks["send_mail"].enqueue("a@b", subject="hi")
    assert mail.created and mail.queue == "mail" and mail.task == "task_samples.send_mail"
    assert mail.result(timeout=30) == {"to": "a@b", "subject": "hi"}
    assert tasks["add"].enqueue(2, 3).result(timeout=30) == 5
    assert tasks["text_length"].enqueue("four").result(timeout=30) == 4  # a coroutine task
    job = mail.get()
    assert job.state is JobState.COMPLETED and mail.state is JobState.COMPLETED
    assert job.task == "task_samples.send_mail" and job.params == {"args": ["a@b"], "kwargs": {"subject": "hi"}}
    assert app.queue("mail").client.exists(f"/zkqueue/queues/mail/completed/{mail.id}") is not None


def test_enqueue_with_options_and_a_duplicate_id(app) -> None:
    tasks = task_samples.register(app)
    send_mail = tasks["send_mail"]
    first = send_mail.enqueue_with(args=("a@b",), kwargs={"subject": "one"}, job_id="welcome-42", priority=1,
                                   timeout=10)
    again = send_mail.enqueue_with(args=("c@d",), job_id="welcome-42")
    assert first.created and not again.created and again.id == first.id and again.queue == "mail"
    job = again.get()  # the handle points at the existing job, left as it was
    assert job.params == {"args": ["a@b"], "kwargs": {"subject": "one"}} and job.priority == 1 and job.timeout == 10
    work(app, "mail")
    assert again.result(timeout=30) == {"to": "a@b", "subject": "one"}
    rerun = send_mail.enqueue_with(args=("e@f",), job_id="welcome-42")  # a finished id may run again
    assert rerun.created and rerun.result(timeout=30) == {"to": "e@f", "subject": ""}
    delayed = send_mail.enqueue_with(args=("g@h",), delay=60)
    assert delayed.state is JobState.QUEUED and delayed.get().attempts == 0


def test_a_process_that_does_not_import_the_task_enqueues_it_by_name(app, zk_hosts) -> None:
    producer = textwrap.dedent("""
        import sys
        import zkqueue
        with zkqueue.App() as app:                              # ZKQUEUE_CONNECT
            print(app.enqueue("task_samples.add", 2, 3).id)     # not registered here: queue "default"
            print(app.enqueue_with("task_samples.send_mail", args=["a@b"], kwargs={"subject": "hi"},
                                   queue="mail").id)
        assert "task_samples" not in sys.modules
    """)
    env = {**os.environ, "ZKQUEUE_CONNECT": zk_hosts}
    out = subprocess.run([sys.executable, "-c", producer], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    add_id, mail_id = out.stdout.split()
    task_samples.register(app)  # the consumer side knows the tasks
    work(app, "default", "mail")
    assert app.job(add_id).result(timeout=30) == 5
    mail = app.job(mail_id)
    assert mail.queue == "mail" and mail.task == "task_samples.send_mail" and not mail.created
    assert mail.result(timeout=30) == {"to": "a@b", "subject": "hi"}


def test_app_job_finds_a_job_by_id_in_any_queue(app) -> None:
    tasks = task_samples.register(app)
    tasks["send_mail"].enqueue_with(args=("a@b",), job_id="m-1")
    tasks["text_length"].enqueue_with(args=("abc",), job_id="f-1")
    assert app.job("m-1").queue == "mail" and app.job("f-1").queue == "fetch"
    assert app.job("f-1", queue="fetch").get().params == {"args": ["abc"], "kwargs": {}}
    with pytest.raises(JobNotFoundError):
        app.job("m-1", queue="fetch")
    with pytest.raises(JobNotFoundError):
        app.job("never-added")
    tasks["add"].enqueue_with(args=(1, 2), job_id="m-1")  # the same id in another queue
    with pytest.raises(ConfigurationError, match="default, mail"):
        app.job("m-1")
    work(app, "fetch")
    assert app.job("f-1").result(timeout=30) == 3  # found once finished too


def test_result_raises_job_failed_error_for_a_dead_job_and_times_out(app) -> None:
    tasks = task_samples.register(app, retry=RetryPolicy(max_attempts=2, backoff=0.0))
    handle = tasks["always_fails"].enqueue("broken input")
    with pytest.raises(WaitTimeoutError) as timed_out:  # no worker yet
        handle.result(timeout=0.3)
    assert isinstance(timed_out.value, TimeoutError)
    work(app, "default")
    with pytest.raises(JobFailedError) as failed:
        handle.result(timeout=30)
    assert failed.value.last_error == "ValueError: broken input"
    assert failed.value.job.state is JobState.DEAD and failed.value.job.attempts == 2
    assert handle.wait(timeout=1).state is JobState.DEAD


def test_result_wakes_on_the_completion_not_on_a_poll(app) -> None:
    add = app.task(task_samples.add)
    handle = add.enqueue(20, 22)
    ended: list[float] = []
    waiter = threading.Thread(target=lambda: (handle.result(timeout=30), ended.append(time.monotonic())))
    waiter.start()

    def asleep() -> bool:
        return thread_is_waiting(waiter)

    wait_for(asleep, message="the waiter never went to sleep")
    jq = app.queue("default")
    with jq.take(timeout=5) as jobs:
        jobs[0].complete(app.resolve(jobs[0]).call(jobs[0]))
    done = time.monotonic()
    waiter.join(10)
    assert ended and ended[0] - done < 0.3, f"woke {ended[0] - done:.3f}s after the completion"


def test_a_job_of_an_unknown_task_fails_once_and_is_never_retried(zk_client, app) -> None:
    with App(client=zk_client, retry=RetryPolicy(max_attempts=5, backoff=0.0)) as producer:  # closed with its queue
        producer.task(retry=RetryPolicy(max_attempts=5, backoff=0.0))(task_samples.send_mail)  # unknown to `app`
        known_elsewhere = producer.enqueue_with("task_samples.send_mail", args=("a@b",), queue="default")
        nobody = producer.enqueue("nobody.knows.this", 1)
        work(app, "default")  # app has no tasks
        for handle, task in ((known_elsewhere, "task_samples.send_mail"), (nobody, "nobody.knows.this")):
            with pytest.raises(JobFailedError) as failed:
                handle.result(timeout=30)
            job = failed.value.job
            assert job.state is JobState.DEAD and job.attempts == 1  # not retried, whatever the policies say
            assert job.last_error.startswith("UnknownTaskError") and repr(task) in job.last_error
            assert "'default'" in job.last_error  # the queue
        assert known_elsewhere.get().max_attempts == 5
        with pytest.raises(UnknownTaskError, match="names no task"):
            app.resolve(Job(id="x", params=None, state=JobState.ACTIVE, attempts=1, errors=[]))


def test_params_of_another_shape_fail_once(app) -> None:
    add = app.task(task_samples.add)
    app.queue("default").add(5, job_id="raw", task=add.name)  # a task name, but not a task's params
    work(app, "default")
    job = app.queue("default").wait("raw", timeout=30)
    assert job.state is JobState.DEAD and job.attempts == 1 and job.last_error.startswith("TaskParamsError")


def test_a_tasks_max_attempts_travels_with_its_jobs(app) -> None:
    """The app's policy allows 3 attempts; a task with 2 gets 2, a task with 5 gets 5."""
    runs: dict[str, int] = {}

    def flaky(key: str) -> None:
        runs[key] = runs.get(key, 0) + 1
        raise RuntimeError(f"attempt {runs[key]}")

    fewer = app.task(name="flaky.fewer", retry=RetryPolicy(max_attempts=2, backoff=0.0))(flaky)
    more = app.task(name="flaky.more", retry=RetryPolicy(max_attempts=5, backoff=0.0))(flaky)
    plain = app.task(name="flaky.plain")(flaky)
    handles = {"fewer": fewer.enqueue("fewer"), "more": more.enqueue("more"), "plain": plain.enqueue("plain")}
    assert [h.get().max_attempts for h in handles.values()] == [2, 5, None]
    work(app, "default")
    for key, attempts in (("fewer", 2), ("more", 5), ("plain", 3)):
        with pytest.raises(JobFailedError) as failed:
            handles[key].result(timeout=30)
        assert failed.value.job.attempts == attempts and failed.value.last_error == f"RuntimeError: attempt {attempts}"
    assert runs == {"fewer": 2, "more": 5, "plain": 3}


def test_enqueue_many_adds_in_few_multis(app) -> None:
    add = app.task(task_samples.add)
    handles = add.enqueue_many([(n, n) for n in range(1200)])
    assert len(handles) == 1200 and all(h.created for h in handles) and len({h.id for h in handles}) == 1200
    jq = app.queue("default")
    reads = protocol.multi_read(jq.client, [jq.paths.record(h.id) for h in handles])
    multis = {stat.czxid for _data, stat in reads}  # the records of one multi share its transaction id
    assert len(multis) <= 3, f"{len(multis)} transactions for 1200 jobs"  # 2 ops a job, 1,000 ops a multi
    assert jq.counts()["queued"] == 1200 and handles[7].get().params == {"args": [7, 7], "kwargs": {}}


def test_enqueue_many_items_ids_and_duplicates(app) -> None:
    tasks = task_samples.register(app)
    send_mail = tasks["send_mail"]
    send_mail.enqueue_with(args=("old@x",), job_id="taken")
    handles = send_mail.enqueue_many([
        ("a@b",),
        ["c@d", "hello"],
        Call(args=("e@f",), kwargs={"subject": "hi"}, job_id="mine"),
        Call(args=("g@h",), job_id="mine"),  # the same id again in this batch
        Call(args=("i@j",), job_id="taken"),  # unfinished already
    ], priority=2)
    assert [h.created for h in handles] == [True, True, True, False, False]
    assert handles[2] == handles[3] and handles[2].id == "mine" and handles[4].id == "taken"
    assert app.job("taken").get().params == {"args": ["old@x"], "kwargs": {}}
    assert send_mail.enqueue_many([]) == []
    work(app, "mail")
    assert [h.result(timeout=30) for h in handles] == [
        {"to": "a@b", "subject": ""}, {"to": "c@d", "subject": "hello"}, {"to": "e@f", "subject": "hi"},
        {"to": "e@f", "subject": "hi"}, {"to": "old@x", "subject": ""}]
    assert handles[0].get().priority == 2
