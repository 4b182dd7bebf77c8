"""zkqueue.otel and the job hooks under it, with the real OpenTelemetry SDK (InMemorySpanExporter) on a real
ZooKeeper: a job added in this process and worked in another is one trace (the worker's CONSUMER span a child of
the PRODUCER span of the add), a failed attempt and its retry are two process spans (ERROR, then OK) of that trace,
a 3-step flow is one trace, the span is current inside thread and async handlers, uninstrument() stops the spans,
and with nothing installed an add stores only the caller's headers."""

from __future__ import annotations

import asyncio
import importlib
import json
import operator
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import zkqueue.otel  # noqa: E402
from zkqueue.errors import ConfigurationError  # noqa: E402
from zkqueue.flows import Flow, FlowState  # noqa: E402
from zkqueue.jobs import JobQueue, JobState, RetryPolicy, hooks  # noqa: E402
from zkqueue.jobs.model import Record  # noqa: E402

PATH = "/jobs/otel"
FLOW = "/flows/otel"
FAST = RetryPolicy(max_attempts=3, backoff=0.1, max_backoff=0.2, jitter=False)


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    """What a test looks at in a finished span (the worker script prints the same, as JSON)."""
    return {"name": span.name, "kind": span.kind.name, "trace_id": f"{span.context.trace_id:032x}",
            "span_id": f"{span.context.span_id:016x}",
            "parent": f"{span.parent.span_id:016x}" if span.parent is not None else None,
            "attributes": dict(span.attributes or {}), "status": span.status.status_code.name,
            "events": [e.name for e in span.events]}


class Spans:
    """An SDK provider exporting to memory: ``spans()`` are its finished spans as dicts; ``tracer`` one of its."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("test")

    def __call__(self) -> list[dict[str, Any]]:
        return [as_dict(s) for s in self.exporter.get_finished_spans()]


@pytest.fixture
def spans():
    """instrument() with a :class:`Spans` provider."""
    provider = Spans()
    zkqueue.otel.instrument(tracer_provider=provider.provider)
    try:
        yield provider
    finally:
        zkqueue.otel.uninstrument()
        provider.provider.shutdown()
    assert hooks.installed is None


# The worker process: instrumented with its own SDK provider and in-memory exporter; works the job queue (argv[3]
# "jobs") or the 3-step flow ("flow") until its stdin closes, then prints its finished spans as JSON lines.
WORKER = textwrap.dedent("""
    import json, sys
    from kazoo.client import KazooClient
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import zkqueue.otel
    from zkqueue.flows import Flow
    from zkqueue.jobs import JobQueue, RetryPolicy

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    zkqueue.otel.instrument(tracer_provider=provider)
    tracer = provider.get_tracer("handler")
    hosts, path, mode = sys.argv[1:4]
    client = KazooClient(hosts=hosts); client.start()
    retry = RetryPolicy(max_attempts=3, backoff=0.1, max_backoff=0.2, jitter=False)

    def handler(job):
        with tracer.start_as_current_span("inside"):  # a child of the current span: the process span
            if job.params.get("fail_first") and job.attempts == 1:
                raise RuntimeError("first attempt fails")
            return {"headers": job.headers}

    if mode == "jobs":
        owner = JobQueue(client, path, retry=retry); owner.start()
        worker = owner.work(handler, concurrency=2)
    else:
        owner = Flow(client, path, retry=retry)
        owner.step("a", lambda job: "a", next="b")
        owner.step("b", lambda job: "b", next="c")
        owner.step("c", lambda job: "c")
        owner.start()
        worker = owner.work(concurrency=2)
    print("READY", flush=True)
    sys.stdin.read()  # until the test closes stdin
    worker.stop(); owner.close(); client.stop()
    provider.force_flush()
    for s in exporter.get_finished_spans():
        print("SPAN", json.dumps({
            "name": s.name, "kind": s.kind.name, "trace_id": f"{s.context.trace_id:032x}",
            "span_id": f"{s.context.span_id:016x}",
            "parent": f"{s.parent.span_id:016x}" if s.parent is not None else None,
            "attributes": dict(s.attributes or {}), "status": s.status.status_code.name,
            "events": [e.name for e in s.events]}), flush=True)
""")


class WorkerProcess:
    """The worker script in a subprocess: ``with WorkerProcess(...) as w: ...`` then ``w.spans``."""

    def __init__(self, hosts: str, path: str, mode: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, hosts, path, mode], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.spans: list[dict[str, Any]] = []

    def __enter__(self) -> WorkerProcess:
        line = self.proc.stdout.readline().strip()
        if line != "READY":
            self.proc.kill()
            raise AssertionError(f"the worker did not start: {line!r} {self.proc.stderr.read()[-2000:]}")
        return self

    def __exit__(self, *exc_info: Any) -> None:
        out, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, err[-2000:]
        self.spans = [json.loads(line[5:]) for line in out.splitlines() if line.startswith("SPAN ")]


def one(found: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    hits = [s for s in found if all(s[k] == v for k, v in match.items())]
    assert len(hits) == 1, (match, found)
    return hits[0]


# ---------------------------------------------------------------------------------------------- across processes
def test_a_job_added_here_and_worked_in_another_process_is_one_trace(zk_client, zk_hosts, spans) -> None:
    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        with WorkerProcess(zk_hosts, PATH, "jobs") as worker:
            assert jq.add({"n": 1}, job_id="j1", headers={"tenant": "acme"}) == "j1"
            job = jq.wait("j1", timeout=20)
    assert job.state is JobState.COMPLETED
    # the trace context went into the stored headers, next to the caller's
    assert job.headers["tenant"] == "acme" and job.headers["traceparent"].startswith("00-")
    assert job.result["headers"] == job.headers  # what the handler saw
    send = one(spans(), name=f"send {PATH}")
    assert send["kind"] == "PRODUCER" and send["status"] == "UNSET" and send["parent"] is None
    assert send["attributes"] == {"messaging.system": "zkqueue", "messaging.destination.name": PATH,
                                  "messaging.operation.type": "send", "messaging.operation.name": "send",
                                  "messaging.message.id": "j1"}
    assert job.headers["traceparent"].startswith(f"00-{send['trace_id']}-{send['span_id']}-")
    process = one(worker.spans, name=f"process {PATH}")
    assert process["kind"] == "CONSUMER" and process["status"] == "UNSET"
    assert process["trace_id"] == send["trace_id"] and process["parent"] == send["span_id"]  # one trace
    assert process["attributes"] == {"messaging.system": "zkqueue", "messaging.destination.name": PATH,
                                     "messaging.operation.type": "process", "messaging.operation.name": "process",
                                     "messaging.message.id": "j1", "zkqueue.job.attempt": 1}
    inside = one(worker.spans, name="inside")  # the handler's own span: a child of the process span
    assert inside["trace_id"] == send["trace_id"] and inside["parent"] == process["span_id"]


def test_a_failed_attempt_and_its_retry_are_two_process_spans_of_the_trace(zk_client, zk_hosts, spans) -> None:
    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        with WorkerProcess(zk_hosts, PATH, "jobs") as worker:
            jq.add({"fail_first": True}, job_id="flaky")
            job = jq.wait("flaky", timeout=20)
    assert job.state is JobState.COMPLETED and job.attempts == 2
    send = one(spans(), name=f"send {PATH}")
    process = sorted((s for s in worker.spans if s["name"] == f"process {PATH}"),
                     key=lambda s: s["attributes"]["zkqueue.job.attempt"])
    assert [(s["attributes"]["zkqueue.job.attempt"], s["status"]) for s in process] == [(1, "ERROR"), (2, "UNSET")]
    assert process[0]["events"] == ["exception"]  # the handler's RuntimeError, recorded
    assert all(s["trace_id"] == send["trace_id"] and s["parent"] == send["span_id"] for s in process)
    assert all(s["attributes"]["messaging.message.id"] == "flaky" for s in process)


def test_a_three_step_flow_is_one_trace(zk_client, zk_hosts, spans) -> None:
    flow = Flow(zk_client, FLOW, retry=FAST)
    for name, after in (("a", "b"), ("b", "c"), ("c", None)):
        flow.step(name, lambda job: None, next=after)
    with flow:
        with WorkerProcess(zk_hosts, FLOW, "flow") as worker:
            assert flow.add({}, job_id="f1", headers={"tenant": "acme"}) == "f1"
            done = flow.wait("f1", timeout=30)
    assert done.state is FlowState.COMPLETED and done.results == {"a": "a", "b": "b", "c": "c"}
    send = one(spans(), name=f"send {FLOW}/steps/a")
    assert send["kind"] == "PRODUCER" and send["attributes"]["messaging.message.id"] == "f1"
    steps = [one(worker.spans, name=f"process {FLOW}/steps/{s}") for s in "abc"]
    # every step a child of the flow add's send span (each hand-off copies the finishing step's headers)
    assert all(s["trace_id"] == send["trace_id"] and s["parent"] == send["span_id"] for s in steps), steps
    assert all(s["kind"] == "CONSUMER" and s["attributes"]["messaging.message.id"] == "f1" for s in steps)


# ---------------------------------------------------------------------------------------------- in this process
def test_add_all_is_one_send_span_and_its_jobs_carry_its_context(zk_client, spans) -> None:
    with JobQueue(zk_client, PATH) as jq:
        assert jq.add_all([("b1", 1), ("b2", 2), ("b3", 3)]) == []
        send = one(spans(), name=f"send {PATH}")
        assert send["attributes"]["messaging.batch.message_count"] == 3
        assert "messaging.message.id" not in send["attributes"]
        parent = f"00-{send['trace_id']}-{send['span_id']}-"
        stored = [jq.get(i).headers for i in ("b1", "b2", "b3")]
        assert all(list(h) == ["traceparent"] and h["traceparent"].startswith(parent) for h in stored), stored
        assert jq.add_all([("b1", 1), ("b4", 4)]) == ["b1"]  # a duplicate id is counted on the span
        assert spans()[-1]["attributes"]["zkqueue.job.rejected"] == 1


def test_a_failed_add_sets_the_send_span_status(zk_client, spans) -> None:
    with JobQueue(zk_client, PATH) as jq:
        with pytest.raises(ConfigurationError):
            jq.add("x", headers={"big": "y" * 5000})  # over 4 KiB
        (send,) = spans()
        assert send["status"] == "ERROR" and send["events"] == ["exception"]
        assert jq.get("x") is None


def test_the_process_span_is_current_in_an_async_handler_and_around_a_process_pool(zk_client, spans) -> None:
    async def handler(job):
        await asyncio.sleep(0.01)
        with spans.tracer.start_as_current_span("inside-async"):
            await asyncio.sleep(0.01)
        if job.params == "late":
            await asyncio.sleep(30)  # past its timeout: cancelled, the attempt fails
        return job.params

    with JobQueue(zk_client, PATH, retry=RetryPolicy(max_attempts=1)) as jq:
        jq.add("a", job_id="async")
        jq.add("late", job_id="late", timeout=0.3)
        worker = jq.work(handler, concurrency=2)
        assert jq.wait("async", timeout=10).state is JobState.COMPLETED
        assert jq.wait("late", timeout=10).state is JobState.DEAD
        worker.stop()
        jq.add("p", job_id="pool")
        pool = jq.work(operator.attrgetter("params"), pool="process")  # pickled to a child: the span is the parent's
        assert jq.wait_result("pool", timeout=30) == "p"
        pool.stop()
    found = spans()
    sends = {s["attributes"]["messaging.message.id"]: s for s in found if s["kind"] == "PRODUCER"}
    processes = {s["attributes"]["messaging.message.id"]: s for s in found if s["kind"] == "CONSUMER"}
    for job_id in ("async", "late", "pool"):
        assert processes[job_id]["parent"] == sends[job_id]["span_id"], job_id
        assert processes[job_id]["trace_id"] == sends[job_id]["trace_id"], job_id
    inside = [s for s in found if s["name"] == "inside-async"]
    assert sorted(s["parent"] for s in inside) == sorted(processes[j]["span_id"] for j in ("async", "late"))
    assert processes["async"]["status"] == "UNSET" and processes["pool"]["status"] == "UNSET"
    late = processes["late"]
    assert late["status"] == "ERROR" and late["attributes"]["zkqueue.attempt.ended"] == "timed_out"


def test_a_sync_call_that_returns_an_awaitable_is_awaited_inside_the_process_span(zk_client, spans) -> None:
    """On the asyncio driver a route's sync call may return a coroutine (the layers above wrap handlers so): the
    process span is current while it is awaited, and ends with the attempt."""
    from zkqueue.runtime import AsyncioDriver, Route, Worker

    async def work(job):
        with spans.tracer.start_as_current_span("inside-awaitable"):
            await asyncio.sleep(0.01)
        return job.params

    driver = AsyncioDriver()
    route = Route(driver, lambda job: work(job))
    with JobQueue(zk_client, PATH) as jq:
        jq.add("w", job_id="awaitable")
        with Worker([jq], lambda _q, _j: route, [driver]).start():
            assert jq.wait_result("awaitable", timeout=10) == "w"
    found = spans()
    process = one(found, name=f"process {PATH}")
    assert one(found, name="inside-awaitable")["parent"] == process["span_id"]
    assert process["parent"] == one(found, name=f"send {PATH}")["span_id"]


def test_uninstrument_stops_the_spans(zk_client, spans) -> None:
    with JobQueue(zk_client, PATH) as jq:
        jq.add(1, job_id="traced")
        assert len(spans()) == 1 and zkqueue.otel.instrumented()
        zkqueue.otel.uninstrument()
        assert not zkqueue.otel.instrumented() and hooks.installed is None
        jq.add(2, job_id="plain")
        worker = jq.work(lambda job: job.params)
        assert jq.wait_result("traced", timeout=10) == 1 and jq.wait_result("plain", timeout=10) == 2
        worker.stop()
        assert len(spans()) == 1  # no span for the second add, nor for either attempt
        assert jq.get("plain").headers == {}


# ---------------------------------------------------------------------------------------------- nothing installed
def test_with_nothing_installed_an_add_stores_only_the_callers_headers(zk_client) -> None:
    assert hooks.installed is None
    with JobQueue(zk_client, PATH) as jq:
        jq.add("x", job_id="with", headers={"tenant": "acme", "n": [1, 2]})
        jq.add("y", job_id="without")
        assert jq.get("with").headers == {"tenant": "acme", "n": [1, 2]}
        assert jq.get("without").headers == {}
        data, _stat = zk_client.get(jq.paths.record("without"))
        assert Record.decode(data).headers is None  # nothing stored at all


class Recorder(hooks.JobHooks):
    """A job hook of a test's own: the seam's API (what zkqueue.otel builds on)."""

    def __init__(self) -> None:
        self.adds: list[tuple[str, list[str], Any]] = []
        self.attempts: list[tuple[str, str, dict[str, Any], str | None]] = []

    def adding(self, queue, job_ids, headers, add):  # noqa: ANN001, ANN201
        self.adds.append((queue, list(job_ids), headers))
        return add({**(headers or {}), "hooked": queue})

    def attempt(self, queue, job):  # noqa: ANN001, ANN201
        recorder = self

        class Watch(hooks.AttemptHook):
            def end(self, error, how):  # noqa: ANN001, ANN201
                recorder.attempts.append((queue, job.id, dict(job.headers), how))

        return Watch()


def test_a_flow_carries_its_headers_step_to_step_through_a_hook_of_its_own(zk_client) -> None:
    recorder = Recorder()
    hooks.install(recorder)
    try:
        flow = Flow(zk_client, FLOW, retry=FAST)
        flow.step("a", lambda job: "a", next="b")
        flow.step("b", lambda job: "b", next="c")
        flow.step("c", lambda job: "c")
        with flow:
            flow.add({}, job_id="f2", headers={"tenant": "acme"})
            with flow.work(concurrency=2):
                assert flow.wait("f2", timeout=30).state is FlowState.COMPLETED
    finally:
        hooks.uninstall(recorder)
    assert recorder.adds == [(f"{FLOW}/steps/a", ["f2"], {"tenant": "acme"})]
    wanted = {"tenant": "acme", "hooked": f"{FLOW}/steps/a"}  # what the add stored, copied by each hand-off
    assert sorted(recorder.attempts) == [(f"{FLOW}/steps/{s}", "f2", wanted, "ran") for s in "abc"]


def test_importing_zkqueue_otel_without_opentelemetry_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import opentelemetry now fails
    monkeypatch.delitem(sys.modules, "zkqueue.otel")
    with pytest.raises(ImportError, match=r"pip install 'zkqueue\[otel\]'"):
        importlib.import_module("zkqueue.otel")
