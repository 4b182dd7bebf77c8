"""A canvas is one OpenTelemetry trace (zkqueue.otel, the real SDK with an in-memory exporter, a real ZooKeeper):
its add is one ``send`` span and every node's attempt a ``process`` span of that trace, child of the send (each
hand-off carries the finishing job's trace context to the next nodes' jobs, beside the canvas header)."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import zkqueue.otel  # noqa: E402
from zkqueue import App, chain, chord  # noqa: E402
from zkqueue.tasks.worker import TaskWorker  # noqa: E402

from tests.flows import canvas_app  # noqa: E402


def test_a_canvas_is_one_trace(zk_client) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    zkqueue.otel.instrument(tracer_provider=provider)
    try:
        with App(client=zk_client, retry=canvas_app.RETRY) as app:
            t = canvas_app.register(app)
            with TaskWorker(app, concurrency=2):
                h = chain(t.add.s(1, 2), chord([t.mul.s(2), t.mul.s(3)], t.merge.s())).enqueue()
                assert h.result(timeout=30) == {"values": [6, 9], "n": 2}
    finally:
        zkqueue.otel.uninstrument()
    spans = exporter.get_finished_spans()
    (send,) = [s for s in spans if s.name == "send /zkqueue/canvases"]
    process = [s for s in spans if s.name == "process /zkqueue/queues/default"]
    assert sorted(s.attributes["messaging.message.id"] for s in process) == [f"{h.id}.{n}" for n in "0123"]
    assert {s.context.trace_id for s in process} == {send.context.trace_id}
    assert all(s.parent is not None and s.parent.span_id == send.context.span_id for s in process)
    provider.shutdown()
