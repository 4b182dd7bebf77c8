"""The zkqueue:// result backend against the suite's real ZooKeeper, in this process (no worker): states, waits on
watches, large values, groups, the chord counter's exactness, the expiry sweep."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

import zkqueue.celery  # noqa: F401  (registers zkqueue://)
from celery import Celery, states
from celery.exceptions import TimeoutError as CeleryTimeoutError
from zkqueue.celery.backend import ZkQueueBackend
from zkqueue.celery.chords import ChordCounter
from zkqueue.celery.expiry import sweep
from zkqueue.celery.result_store import LARGE_MAGIC


@pytest.fixture
def app(broker_url: str) -> Iterator[Celery]:
    app = Celery("backend-test", broker=broker_url, backend=broker_url, set_as_current=False)
    app.conf.result_expires = 3600
    yield app
    backend = app.backend
    if isinstance(backend, ZkQueueBackend):
        backend.close()


@pytest.fixture
def backend(app: Celery) -> ZkQueueBackend:
    backend = app.backend
    assert isinstance(backend, ZkQueueBackend)
    return backend


def test_the_scheme_selects_the_backend(app: Celery, broker_url: str) -> None:
    assert isinstance(app.backend, ZkQueueBackend)
    assert app.backend.as_uri() == broker_url
    assert app.backend.supports_autoexpire is False


def test_states_and_a_success_is_never_overwritten(backend: ZkQueueBackend, zk_client: KazooClient) -> None:
    assert backend.get_state("t1") == states.PENDING
    backend.mark_as_started("t1")
    assert backend.get_state("t1") == states.STARTED
    backend.mark_as_done("t1", {"answer": 42})
    assert backend.get_task_meta("t1", cache=False)["result"] == {"answer": 42}
    backend.mark_as_failure("t1", ValueError("late write of a lost worker"))
    assert backend.get_task_meta("t1", cache=False)["status"] == states.SUCCESS
    assert zk_client.exists("/celery-results/tasks/t1") is not None  # one node per task id
    backend.forget("t1")
    assert zk_client.exists("/celery-results/tasks/t1") is None
    assert backend.get_state("t1") == states.PENDING


def test_get_waits_on_a_watch(app: Celery, backend: ZkQueueBackend, zk_client: KazooClient) -> None:
    result = app.AsyncResult("t2")

    def finish() -> None:
        started.wait(10)  # the waiter's first read
        time.sleep(0.3)  # six of its intervals: a polling waiter would read six times meanwhile
        backend.mark_as_done("t2", "done")

    started = threading.Event()
    reads: list[str] = []
    original = backend.store.read_many

    def counting(paths: list[str]) -> Any:
        reads.append(",".join(paths))
        started.set()
        return original(paths)

    backend.store.read_many = counting  # type: ignore[method-assign]
    thread = threading.Thread(target=finish)
    thread.start()
    t0 = time.monotonic()
    assert result.get(timeout=10, interval=0.05) == "done"
    elapsed = time.monotonic() - t0
    thread.join()
    # one read before the wait, one after the watch fired: no polling, though the interval was 0.05 s
    assert len(reads) <= 2, (reads, elapsed)


def test_get_times_out(app: Celery) -> None:
    with pytest.raises(CeleryTimeoutError):
        app.AsyncResult("never").get(timeout=0.3)


def test_a_large_result_goes_through_a_blob(backend: ZkQueueBackend, zk_client: KazooClient) -> None:
    big = "x" * (2 * 2**20) + "end"
    backend.mark_as_done("big", big)
    data, _ = zk_client.get("/celery-results/tasks/big")
    assert data.startswith(LARGE_MAGIC)
    assert backend.get_task_meta("big", cache=False)["result"] == big
    assert len(zk_client.get_children("/celery-results/large")) == 1
    backend.mark_as_done("big2", "small")
    backend.forget("big")
    assert zk_client.get_children("/celery-results/large") == []
    assert zk_client.get_children("/celery-results/large-blobs") == []


def test_a_large_result_replaced_by_a_small_one_leaves_no_blob(backend: ZkQueueBackend,
                                                              zk_client: KazooClient) -> None:
    backend.mark_as_started("r", meta={"blob": "y" * (3 * 2**20)})
    assert len(zk_client.get_children("/celery-results/large-blobs")) == 1
    backend.mark_as_done("r", 1)
    assert backend.get_task_meta("r", cache=False)["result"] == 1
    assert zk_client.get_children("/celery-results/large") == []
    assert zk_client.get_children("/celery-results/large-blobs") == []


def test_group_save_restore_delete(app: Celery, backend: ZkQueueBackend) -> None:
    results = [app.AsyncResult(f"g-{i}") for i in range(3)]
    group = app.GroupResult("grp", results)
    group.save(backend=backend)
    restored = app.GroupResult.restore("grp", backend=backend)
    assert [r.id for r in restored.results] == ["g-0", "g-1", "g-2"]
    for i, r in enumerate(results):
        backend.mark_as_done(r.id, i)
    assert restored.join_native(timeout=5) == [0, 1, 2]
    assert restored.join(timeout=5) == [0, 1, 2]
    restored.delete()
    assert app.GroupResult.restore("grp", backend=backend) is None


def test_join_native_waits_for_results_finished_later(app: Celery, backend: ZkQueueBackend) -> None:
    ids = [f"late-{i}" for i in range(20)]
    group = app.GroupResult("late", [app.AsyncResult(i) for i in ids])

    def finish() -> None:
        for n, task_id in enumerate(reversed(ids)):
            backend.mark_as_done(task_id, n)

    thread = threading.Thread(target=finish)
    thread.start()
    assert group.join_native(timeout=10) == list(reversed(range(20)))
    thread.join()


def test_a_chord_whose_part_failed_raises_that_parts_own_error(app: Celery, backend: ZkQueueBackend) -> None:
    """``get()`` on the body of a chord whose header part failed raises the part's own exception, as on Celery's
    Redis backend: the body is failed with a ChordError, and the waiter looks at the body's parents once more when
    the body's result comes in (the part's failure is stored before the body's)."""
    from celery import signature
    from celery.app.task import Context
    from celery.exceptions import ChordError

    body = signature("zkq.test.chord-body", app=app)
    body_id = body.freeze().id
    header = app.GroupResult("chord-fails", [app.AsyncResult("part-ok"), app.AsyncResult("part-bad")])
    backend.apply_chord((header.id, header.results), body)
    backend.set_chord_size(header.id, 2)
    result = app.AsyncResult(body_id, parent=app.GroupResult(header.id, list(header.results)))

    def finish() -> None:
        waiting.wait(10)  # the waiter is on the body's watch
        for part_id, value in (("part-ok", None), ("part-bad", ValueError("the part's own error"))):
            request = Context(id=part_id, group=header.id, chord=dict(body))
            if value is None:
                backend.mark_as_done(part_id, 1, request=request)
            else:
                backend.mark_as_failure(part_id, value, request=request)  # fires the chord: the body fails

    waiting = threading.Event()
    original = backend.store.read_many

    def noting(paths: list[str]) -> Any:
        if any(body_id in path for path in paths):
            waiting.set()
        return original(paths)

    backend.store.read_many = noting  # type: ignore[method-assign]
    thread = threading.Thread(target=finish)
    thread.start()
    try:
        # an interval longer than the timeout: no periodic look at the parents can be what raises
        with pytest.raises(ValueError, match="the part's own error"):
            result.get(timeout=20, interval=60)
    finally:
        thread.join()
    body_meta = backend.get_task_meta(body_id, cache=False)
    assert body_meta["status"] == states.FAILURE
    assert isinstance(body_meta["result"], ChordError)
    assert "part-bad" in str(body_meta["result"])


def test_chord_counter_counts_each_part_once_and_fires_once(backend: ZkQueueBackend) -> None:
    counter = ChordCounter(backend.store)
    counter.set_size("c1", 12)
    fired: list[str] = []
    lock = threading.Lock()

    def part(i: int) -> None:
        for _attempt in range(3):  # every part is delivered three times
            outcome = counter.record("c1", f"part-{i}")
            if outcome.fire:
                with lock:
                    fired.append(f"part-{i}")
                counter.mark_sent("c1", f"part-{i}")

    threads = [threading.Thread(target=part, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(fired) == 1
    assert counter._read(backend.store.chord_path("c1")).count == 12


def test_chord_body_is_sent_again_only_by_the_part_that_fired_it(backend: ZkQueueBackend) -> None:
    counter = ChordCounter(backend.store)
    counter.set_size("c2", 2)
    assert not counter.record("c2", "a").fire
    assert counter.record("c2", "b").fire
    # b's worker died before the body was marked sent: b's redelivery fires, a's does not
    assert not counter.record("c2", "a").fire
    assert counter.record("c2", "b").fire
    counter.mark_sent("c2", "b")
    assert not counter.record("c2", "b").fire


def test_a_part_finished_before_the_size_is_known_is_counted(backend: ZkQueueBackend) -> None:
    counter = ChordCounter(backend.store)
    assert not counter.record("c3", "a").fire  # set_chord_size comes before the last part's publish only
    counter.set_size("c3", 2)
    assert counter.record("c3", "b").fire


def test_cleanup_deletes_what_is_older_than_result_expires(app: Celery, backend: ZkQueueBackend,
                                                           zk_client: KazooClient) -> None:
    backend.mark_as_done("old", 1)
    backend.mark_as_done("old-big", "z" * (2 * 2**20))
    app.GroupResult("old-group", [app.AsyncResult("old")]).save(backend=backend)
    ChordCounter(backend.store).record("old-chord", "p")
    # "now" one hour and a second ahead: everything written so far is older than result_expires (3600 s)
    report = sweep(backend.store, 3600, now=time.time() + 3601)
    assert (report.tasks, report.groups, report.chords) == (2, 1, 1)
    backend.mark_as_done("fresh", 2)
    assert backend.cleanup().total == 0  # nothing is an hour old now
    assert zk_client.get_children("/celery-results/tasks") == ["fresh"]
    assert zk_client.get_children("/celery-results/large") == []
    assert zk_client.get_children("/celery-results/large-blobs") == []


def test_cleanup_with_a_short_expiry(app: Celery, backend: ZkQueueBackend, zk_client: KazooClient) -> None:
    backend.mark_as_done("a", 1)
    app.conf.result_expires = 1
    backend.expires = 1
    deadline = time.monotonic() + 10
    while backend.cleanup().tasks == 0:  # the node's mtime is the server's clock: wait for it to be 1 s old
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert zk_client.get_children("/celery-results/tasks") == []
