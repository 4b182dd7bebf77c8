"""A chord's body is sent exactly once when the worker whose part completed the chord dies right after the body's
publish (with ``acks_late`` that part is then delivered again and returns once more): on a zkqueue broker the body's
message and the chord's "sent" mark commit in one multi."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

import zkqueue.celery  # noqa: F401  (registers zkqueue://)
from celery import Celery, signature
from celery.app.task import Context
from zkqueue.celery.backend import ZkQueueBackend

HERE = Path(__file__).parent
CRASHED = 17  # chord_crash_proc.CRASHED


@pytest.fixture
def app(broker_url: str) -> Iterator[Celery]:
    app = Celery("chord-once", broker=broker_url, backend=broker_url, set_as_current=False)
    yield app
    if isinstance(app.backend, ZkQueueBackend):
        app.backend.close()


def _ready(app: Celery, queue: str) -> int:
    with app.connection_for_write() as conn:
        return conn.default_channel.queue_declare(queue=queue, passive=True).message_count


def test_a_part_returning_again_after_its_worker_died_past_the_body_publish_sends_no_second_body(
        app: Celery, broker_url: str, zk_client: KazooClient) -> None:
    group_id, part_id, queue = "chord-crash", "part-1", "chord-bodies"
    child = subprocess.run([sys.executable, str(HERE / "chord_crash_proc.py"), broker_url, group_id, part_id, queue],
                           capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == CRASHED, child.stderr[-3000:]  # it died right after the body's publish
    assert _ready(app, queue) == 1
    fired = json.loads(zk_client.get(f"/celery-results/chords/{group_id}/fired")[0])
    assert fired == {"by": part_id, "state": "sent"}  # marked in the publish's own multi
    # The part's redelivery: its task runs again and returns again.
    body = signature("zkq.test.chord-body", app=app, queue=queue)
    app.backend.mark_as_done(part_id, 5, request=Context(id=part_id, group=group_id, chord=dict(body)))
    assert _ready(app, queue) == 1  # the body was not sent again


def test_a_body_on_another_broker_is_still_sent_and_marked(broker_url: str, zk_client: KazooClient) -> None:
    """With the results on zkqueue and the messages elsewhere (here kombu's in-memory transport), nobody takes the
    mark's ops: the body is published, then marked sent, as before."""
    app = Celery("chord-other-broker", broker="memory://", backend=broker_url, set_as_current=False)
    try:
        body = signature("zkq.test.chord-body", app=app, queue="bodies")
        header = app.GroupResult("chord-mem", [app.AsyncResult("p")])
        app.backend.apply_chord((header.id, header.results), body)
        app.backend.set_chord_size(header.id, 1)
        app.backend.mark_as_done("p", 1, request=Context(id="p", group=header.id, chord=dict(body)))
        with app.connection_for_write() as conn:
            assert conn.default_channel.queue_declare(queue="bodies", passive=True).message_count == 1
        fired = json.loads(zk_client.get("/celery-results/chords/chord-mem/fired")[0])
        assert fired == {"by": "p", "state": "sent"}
    finally:
        app.backend.close()
