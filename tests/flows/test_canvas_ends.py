"""How a task worker commits its canvas jobs' ends, on a real ZooKeeper: the ends of one canvas given together
commit in one write of its record per batch (``CanvasHandoff.end_many``), a chord's body queued exactly once by
them; and a task worker's hand-offs queued when it stops are committed by the stop, none left without an outcome."""

from __future__ import annotations

import threading

from zkqueue import App, chord
from zkqueue.flows import FlowState, canvas_handoff
from zkqueue.flows.canvas_graph import HEADER
from zkqueue.flows.canvas_handoff import CanvasRef
from zkqueue.flows.definition import Ending
from zkqueue.flows.handoff import OK
from zkqueue.server.testing import wait_for
from zkqueue.tasks.worker import TaskWorker

from tests.flows import canvas_app


def _claim(app: App, n: int) -> list:
    helds: list = []
    while len(helds) < n:
        got = app.queue("default").claim_many(n - len(helds), timeout=10)
        assert got, "no canvas job came within 10 s"
        helds += got
    return helds


def test_the_ends_of_one_canvas_given_together_commit_in_one_write_of_its_record_per_batch(zk_client) -> None:
    members = canvas_handoff.MAX_BATCH + 36  # two batches
    with App(client=zk_client, retry=canvas_app.RETRY) as app:
        t = canvas_app.register(app)
        h = chord((t.add.s(i, i) for i in range(members)), t.merge.s()).enqueue()
        helds = _claim(app, members)
        canvases = app.canvases()
        before = canvases.read_canvas(h.id)[1]
        items = []
        for held in helds:
            node = str(held.record.headers[HEADER][1])
            ref = CanvasRef(node, held.record, held.version, held.ack_ops, held, queue="default")
            items.append((ref, Ending(ok=True, result=int(node) * 2), None))
        outcomes = canvases.end_many(items)
        assert outcomes == [OK] * members
        for held in helds:
            held.forget()
        rec, after = canvases.read_canvas(h.id)
        assert after == before + 2  # one write of the record per batch of MAX_BATCH ends
        assert sum(1 for s in rec.steps.values() if s == "done") == members
        assert rec.steps.get(str(members)) == "queued"  # the body: queued, by the batch that ended the last member
        assert app.queue("default").counts()["queued"] == 1  # the body, queued once by the batch that ended the last
        with TaskWorker(app, concurrency=2):
            assert h.result(timeout=30) == {"values": [2 * i for i in range(members)], "n": members}
        assert h.get().state is FlowState.COMPLETED


def test_a_task_worker_frees_a_slot_before_its_hand_off_commits_and_its_stop_commits_what_is_queued(
        zk_client, monkeypatch) -> None:
    gate = threading.Event()
    entered = threading.Event()
    original = canvas_handoff.CanvasHandoff._commit_batch

    def held_back(self, canvas_id, batch):  # the hand-offs wait here until the test lets them through
        entered.set()
        assert gate.wait(30), "the test never opened the gate"
        return original(self, canvas_id, batch)

    monkeypatch.setattr(canvas_handoff.CanvasHandoff, "_commit_batch", held_back)
    with App(client=zk_client, retry=canvas_app.RETRY) as app:
        t = canvas_app.register(app)
        h = chord((t.add.s(i, 1) for i in range(6)), t.merge.s()).enqueue()
        tw = TaskWorker(app, concurrency=2).start()
        try:
            assert entered.wait(30), "no hand-off began"
            # every member ran, and its slot is free, while the hand-offs wait to commit
            wait_for(lambda: tw.worker.stats()["completed"] == 6 and tw.worker.in_flight == 0, 30)
            rec = h.get()
            assert rec is not None and rec.state is FlowState.RUNNING and "done" not in rec.steps.values()
        finally:
            stopping = threading.Thread(target=tw.stop)
            stopping.start()
            gate.set()
            stopping.join(60)
        assert not stopping.is_alive()
        rec = h.get()  # the stop committed every hand-off queued: each member recorded once, the body queued once
        assert [rec.steps[str(i)] for i in range(6)] == ["done"] * 6 and rec.steps["6"] == "queued"
        assert sorted(e.step for e in rec.history) == [str(i) for i in range(6)]
        assert app.queue("default").counts()["queued"] == 1
        monkeypatch.undo()
        with TaskWorker(app, concurrency=2):
            assert h.result(timeout=30) == {"values": [i + 1 for i in range(6)], "n": 6}
