"""zkqueue.App without workers: registering tasks (names, queues, options, duplicates), calling them here, the
lazy connection (connect string, ZKQUEUE_CONNECT, a given client, close, a forked child), the app's queues and
paths, and bad inputs raising typed errors from zkqueue.errors."""

from __future__ import annotations

import multiprocessing
import pickle
from types import SimpleNamespace

import pytest

import task_samples
import zkqueue
from zkqueue import App, Call, RetryPolicy
from zkqueue.errors import (
    ConfigurationError,
    ConnectFailedError,
    DuplicateTaskError,
    QueueClosedError,
    SerializationError,
)
from zkqueue.jobs import JobState

#: An app that never connects (nothing listens on port 1): module-level tasks for the pickling test.
IDLE_APP = App("127.0.0.1:1", connect_timeout=1)


@IDLE_APP.task(queue="pickled")
def pickled_double(x: int) -> int:
    return 2 * x


def test_tasks_are_named_module_qualname_and_keep_their_options(zk_client) -> None:
    app = App(client=zk_client)
    tasks = task_samples.register(app, retry=RetryPolicy(max_attempts=4))
    assert set(app.tasks) == {"task_samples.add", "task_samples.send_mail", "task_samples.text_length",
                              "task_samples.always_fails"}
    add = tasks["add"]
    assert (add.name, add.queue, add.retry, add.timeout, add.is_async) == ("task_samples.add", "default", None,
                                                                            None, False)
    assert tasks["text_length"].is_async and tasks["text_length"].queue == "fetch"
    assert tasks["always_fails"].max_attempts == 4 and add.max_attempts is None
    assert add(2, 3) == 5 and add.__name__ == "add" and add.__wrapped__ is task_samples.add  # runs here

    @app.task(name="mail.welcome", queue="mail", timeout=30.0)
    def welcome(to: str) -> str:
        return f"welcome {to}"

    assert app.tasks["mail.welcome"] is welcome and welcome.timeout == 30.0 and welcome("a") == "welcome a"
    with pytest.raises(TypeError):
        app.tasks["x"] = welcome  # type: ignore[index]  # read-only
    assert app.resolve(SimpleNamespace(task="mail.welcome", id="j", queue_path=None)) is welcome


def test_a_name_is_one_function(zk_client) -> None:
    app = App(client=zk_client)
    first = app.task(task_samples.add)
    assert app.task(task_samples.add) is first  # the same function and options again: the same task
    with pytest.raises(DuplicateTaskError, match="task_samples.add"):
        app.task(name="task_samples.add")(task_samples.send_mail)
    with pytest.raises(DuplicateTaskError):
        app.task(queue="other")(task_samples.add)  # the same function under its name, with other options
    with pytest.raises(ConfigurationError):
        app.task(first)  # a task is not a function
    assert app.tasks["task_samples.add"] is first


def test_calling_an_async_task_here_gives_its_coroutine(zk_client) -> None:
    import asyncio

    app = App(client=zk_client)
    text_length = app.task(task_samples.text_length)
    assert asyncio.run(text_length("four")) == 4


def test_a_task_pickles_by_reference() -> None:
    again = pickle.loads(pickle.dumps(pickled_double))
    assert again is pickled_double and again(4) == 8


@pytest.mark.parametrize("queue", ["", "a/b", "a|b", ".", "..", "bad\x01", 5])
def test_bad_queue_names_are_refused(zk_client, queue) -> None:
    app = App(client=zk_client)
    with pytest.raises(ConfigurationError):
        app.task(queue=queue)(task_samples.add)
    with pytest.raises(ConfigurationError):
        app.queue(queue)
    with pytest.raises(ConfigurationError):
        app.enqueue_with("task_samples.add", args=(1, 2), queue=queue)
    assert app.queue_names() == []  # nothing was created


@pytest.mark.parametrize("namespace", ["", "/zkqueue", "zkqueue/", "a//b", "a|b", "a/../b", 7])
def test_bad_namespaces_are_refused(namespace) -> None:
    with pytest.raises(ConfigurationError):
        App("127.0.0.1:1", namespace=namespace)


def test_bad_inputs_raise_typed_errors_and_add_nothing(zk_client) -> None:
    with App(client=zk_client) as app:  # closed with its queues: none is left open on the closed client
        add = app.task(task_samples.add)
        for name in ("", " padded", "a\nb", None, 5):
            with pytest.raises(ConfigurationError):
                app.enqueue(name, 1, 2)  # type: ignore[arg-type]
            if name is not None:  # name=None is the default name
                with pytest.raises(ConfigurationError):
                    app.task(name=name)(task_samples.send_mail)  # type: ignore[arg-type]
        with pytest.raises(SerializationError):
            add.enqueue(object(), 2)  # not JSON
        with pytest.raises(SerializationError):
            add.enqueue_many([(1, 2), (object(), 2)])  # checked before anything is sent
        with pytest.raises(ConfigurationError):
            add.enqueue_many([(1, 2), {"x": 1}])  # an item is a tuple or a Call
        with pytest.raises(ConfigurationError):
            add.enqueue_with(args="12")  # args are a tuple or list
        with pytest.raises(ConfigurationError):
            add.enqueue_with(args=(1,), kwargs={2: "y"})  # keyword names are str
        with pytest.raises(ConfigurationError):
            add.enqueue_with(args=(1, 2), timeout=-1)
        with pytest.raises(ConfigurationError):
            add.enqueue_with(args=(1, 2), job_id="")
        with pytest.raises(ConfigurationError):
            app.task(retry=3)(task_samples.send_mail)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError):
            app.task(timeout=0)(task_samples.send_mail)
        with pytest.raises(ConfigurationError):
            app.task("not a function")  # type: ignore[call-overload]
        assert app.queue("default").counts()["queued"] == 0


def test_app_options_are_checked(zk_client, monkeypatch) -> None:
    monkeypatch.delenv("ZKQUEUE_CONNECT", raising=False)
    with pytest.raises(ConfigurationError, match="ZKQUEUE_CONNECT"):
        App()  # no connect string, no client, no environment
    with pytest.raises(ConfigurationError):
        App("127.0.0.1:2181", client=zk_client)
    with pytest.raises(ConfigurationError):
        App("  ")
    with pytest.raises(ConfigurationError):
        App(client=zk_client, retry=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        App(client=zk_client, serializer=object())
    with pytest.raises(ConfigurationError):
        App(client=zk_client, queue_options={"retry": RetryPolicy()})
    with pytest.raises(ConfigurationError):
        App("127.0.0.1:2181", connect_timeout=0)


def test_the_app_connects_on_first_use_from_its_connect_string_or_the_environment(zk_hosts, monkeypatch) -> None:
    unreachable = App("127.0.0.1:1", connect_timeout=0.5)  # made without connecting
    unreachable.task(task_samples.add)
    assert unreachable.connect == "127.0.0.1:1"
    with pytest.raises(ConnectFailedError, match="127.0.0.1:1"):
        unreachable.enqueue("task_samples.add", 1, 2)

    monkeypatch.setenv("ZKQUEUE_CONNECT", zk_hosts)
    with App(namespace="apps/mail") as app:
        assert app.connect == zk_hosts
        handle = app.enqueue("task_samples.add", 1, 2)
        assert app.client.exists(f"/apps/mail/queues/default/records/{handle.id}") is not None
        assert app.queue("default") is app.queue("default")  # one started JobQueue per name
        assert app.queue("default").paths.root == app.queue_path("default") == "/apps/mail/queues/default"
        assert app.workers_path == "/apps/mail/workers"
        client = app.client
    assert not client.connected  # the client the app made is stopped with it
    with pytest.raises(QueueClosedError):
        app.queue("default")
    with pytest.raises(QueueClosedError):
        app.enqueue("task_samples.add", 1, 2)


def test_a_given_client_is_left_to_its_owner(zk_client) -> None:
    app = App(client=zk_client)
    app.enqueue("task_samples.add", 1, 2)
    app.close()
    app.close()  # idempotent
    assert zk_client.connected


def test_queue_names_are_those_of_the_tasks_and_those_in_zookeeper(zk_client) -> None:
    with App(client=zk_client) as producer, App(client=zk_client) as app, \
            App(client=zk_client, namespace="elsewhere") as elsewhere:
        producer.enqueue_with("nobody.registered", args=(), queue="reports")
        task_samples.register(app)
        assert app.queue_names() == ["default", "fetch", "mail", "reports"]
        assert elsewhere.queue_names() == []


def _enqueue_in_child(app: App, out: "multiprocessing.Queue[str]") -> None:
    out.put(app.enqueue("task_samples.add", 20, 22).id)


def test_a_forked_child_connects_on_its_own(zk_hosts) -> None:
    with App(zk_hosts) as app:
        app.enqueue("task_samples.add", 1, 1)  # the parent's client and queue are made before the fork
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_enqueue_in_child, args=(app, out))
        child.start()
        job_id = out.get(timeout=30)
        child.join(30)
        assert child.exitcode == 0
        job = app.queue("default").get(job_id)
        assert job is not None and job.state is JobState.QUEUED and job.params == {"args": [20, 22], "kwargs": {}}
        assert app.client.connected  # the child did not touch the parent's session


def test_call_items_carry_keywords_and_ids() -> None:
    assert Call.of(("a@b",)) == Call(args=("a@b",))
    assert Call.of(["a@b"]) == Call(args=("a@b",))
    call = Call(args=("a@b",), kwargs={"subject": "hi"}, job_id="w-1")
    assert Call.of(call) is call
    assert zkqueue.Call is Call
