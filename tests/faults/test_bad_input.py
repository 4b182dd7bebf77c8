"""Bad input against a running queue: arbitrary znode bytes, foreign children of items, odd lock paths, the queue
node deleted under lock-safe consumers. Each gets a clear error or a logged, counted skip; nothing is lost and
the items after it are still consumed."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zkqueue.formats import framing
from zkqueue.builder import QueueBuilder
from zkqueue.errors import CorruptItemError, LockPathConflictError
from zkqueue.formats.serializers import BytesSerializer, StrSerializer
from zkqueue.server.testing import lock_nodes, wait_for

pytestmark = pytest.mark.faults

#: Any bytes, plus valid frames and frames with a byte flipped or cut short (to reach the decoder's corners).
blobs = st.one_of(
    st.binary(max_size=64),
    st.lists(st.binary(max_size=16), max_size=4).map(framing.encode_items),
    st.tuples(st.lists(st.binary(max_size=16), min_size=1, max_size=3), st.integers(0, 200), st.integers(0, 255)).map(
        lambda t: _mutate(framing.encode_items(t[0]), t[1], t[2])
    ),
)


def _mutate(frame: bytes, pos: int, value: int) -> bytes:
    if pos % 2:
        return frame[: pos % (len(frame) + 1)]  # cut short
    i = pos % len(frame)
    return frame[:i] + bytes([value]) + frame[i + 1 :]


def _expected(blob: bytes) -> list[bytes] | None:
    """What the decoder makes of ``blob``: its payloads, or None for a corrupt node."""
    try:
        return framing.decode_items(blob)
    except CorruptItemError:
        return None


@pytest.mark.parametrize("lock_safe", [False, True], ids=["plain", "lock-safe"])
def test_arbitrary_node_bytes_never_stop_the_run_loop(zk_client, lock_safe) -> None:
    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)
    @given(st.lists(blobs, min_size=1, max_size=6))
    def prop(raw: list[bytes]) -> None:
        qpath = f"/bad/{uuid.uuid4().hex[:8]}"
        zk_client.ensure_path(qpath)
        for blob in raw:  # written behind the queue's back, as a buggy or hostile producer would
            zk_client.create(f"{qpath}/queue-", blob, sequence=True)
        got: list[bytes] = []
        builder = QueueBuilder.builder(zk_client, got.append, BytesSerializer(), qpath)
        if lock_safe:
            builder = builder.lock_path(qpath + "-locks")
        with builder.build_queue() as q:
            q.put(b"good-after")
            expected = [p for blob in raw if (d := _expected(blob)) is not None for p in d] + [b"good-after"]
            corrupt = sum(1 for blob in raw if _expected(blob) is None)
            wait_for(lambda: zk_client.get_children(qpath) == [] and len(got) >= len(expected), timeout=60,
                     message=f"left {zk_client.get_children(qpath)}, got {got}, expected {expected}")
            assert got == expected  # every decodable payload delivered once, in order; the good item too
            stats = q.stats()
            assert stats.corrupt_quarantined == corrupt
            assert stats.loop_errors == 0
            quarantined = zk_client.get_children(q.quarantine_path) if corrupt else []
            assert len(quarantined) == corrupt
            for name in quarantined:  # the quarantine keeps the bytes as they were: nothing is lost
                assert zk_client.get(f"{q.quarantine_path}/{name}")[0] in raw

    prop()


@pytest.mark.parametrize("lock_safe", [False, True], ids=["plain", "lock-safe"])
def test_item_with_a_foreign_child_is_kept_counted_and_does_not_block(zk_client, lock_safe, caplog) -> None:
    """An item node somebody gave a child cannot be deleted: it stays (nothing lost), the skip is counted, and
    the items behind it are consumed."""
    qpath = "/bad/dir-item"
    zk_client.create(f"{qpath}/queue-0000000001", framing.encode_items([b"stuck"]), makepath=True)
    zk_client.create(f"{qpath}/queue-0000000001/not-a-fence", b"")
    zk_client.create(f"{qpath}/queue-0000000002", framing.encode_items([b"after"]))
    got: list[str] = []
    builder = QueueBuilder.builder(zk_client, got.append, StrSerializer(), qpath)
    if lock_safe:
        builder = builder.lock_path(qpath + "-locks")
    with builder.build_queue() as q:
        wait_for(lambda: "after" in got, timeout=30, message=f"got {got}")
        # "after" is handed to the consumer before its ack deletes it (under a block lease the block's multi fails
        # on the stuck item first and the ack of "after" is retried on its own), so wait for the delete.
        wait_for(
            lambda: zk_client.get_children(qpath) == ["queue-0000000001"],
            timeout=30,
            message="queue-0000000002 was not deleted after its delivery",
        )
        assert got.count("stuck") <= 1  # never delivered twice by one consumer
        stats = q.stats()
        assert stats.loop_errors + stats.lost_races >= 1  # counted
    if lock_safe:
        assert "NotEmpty" in caplog.text  # logged: delivered, but its ack cannot delete it


def test_lock_path_node_with_data_is_used_and_left_intact(zk_client) -> None:
    """A lock path that is a "file" (a node with data): locks are its children; its data is not touched."""
    zk_client.create("/bad/file-locks", b"somebody's data", makepath=True)
    got: list[str] = []
    q = QueueBuilder.builder(zk_client, got.append, StrSerializer(), "/bad/q").lock_path("/bad/file-locks")
    with q.build_queue() as queue:
        queue.put("x")
        wait_for(lambda: got == ["x"])
        wait_for(lambda: lock_nodes(zk_client, "/bad/file-locks") == [])
    assert zk_client.get("/bad/file-locks")[0] == b"somebody's data"


def test_lock_path_that_is_an_item_node_is_refused(zk_client) -> None:
    zk_client.create("/bad/other/queue-0000000001", framing.encode_items([b"z"]), makepath=True)
    q = QueueBuilder.builder(zk_client, print, StrSerializer(), "/bad/q2").lock_path("/bad/other/queue-0000000001")
    queue = q.build_queue()
    try:
        with pytest.raises(LockPathConflictError):
            queue.start()
    finally:
        queue.close()


def test_queue_node_deleted_under_lock_safe_consumers(zk_client_factory) -> None:
    admin = zk_client_factory()
    got: list[str] = []
    queues = [
        QueueBuilder.builder(zk_client_factory(), got.append, StrSerializer(), "/bad/gone").lock_path(
            "/bad/gone-locks"
        ).build_queue()
        for _ in range(2)
    ]
    for q in queues:
        q.start()
    try:
        with QueueBuilder.builder(admin, None, StrSerializer(), "/bad/gone").build_queue() as p:
            p.put("before")
            wait_for(lambda: got == ["before"])
            admin.delete("/bad/gone", recursive=True)
            wait_for(lambda: sum(q.stats().queue_recreated for q in queues) >= 1, timeout=30)
            for i in range(5):
                p.put(f"after-{i}")
            wait_for(lambda: sorted(got) == ["after-0", "after-1", "after-2", "after-3", "after-4", "before"],
                     timeout=30, message=f"got {got}")
        assert all(q.stats().lock_lost == 0 for q in queues)
    finally:
        for q in queues:
            q.close()


def test_jobs_with_arbitrary_params_bytes_end_once_each_and_the_worker_goes_on(zk_client) -> None:
    """Job params written with another serializer (any bytes): a job whose params the queue's JSON serializer reads
    completes once; any other ends DEAD on its first attempt (UndecodableParamsError, never retried) and can still
    be read back, its params as the raw bytes; the worker goes on, and every job is accounted for."""
    from zkqueue.jobs import JobQueue, JobState, RetryPolicy
    from zkqueue.formats.serializers import JsonSerializer

    json_ = JsonSerializer()

    def readable(blob: bytes) -> bool:
        try:
            json_.deserialize(blob)
        except Exception:  # noqa: BLE001 - what the worker will find
            return False
        return True

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.binary(max_size=24), min_size=1, max_size=6))
    def prop(raw: list[bytes]) -> None:
        path = f"/bad-jobs/{uuid.uuid4().hex[:8]}"
        ids = [f"b{i}" for i in range(len(raw))] + ["good-after"]
        with JobQueue(zk_client, path, serializer=BytesSerializer()) as writer:  # behind the JSON queue's back
            assert writer.add_all(zip(ids, raw)) == []
        with JobQueue(zk_client, path, retry=RetryPolicy(max_attempts=4, backoff=0.0, jitter=False)) as jq:
            assert jq.add({"n": 1}, "good-after") == "good-after"
            worker = jq.work(lambda job: job.id, concurrency=2)
            try:
                wait_for(lambda: (c := jq.counts())["completed"] + c["dead"] == len(ids), timeout=30,
                         message=f"{jq.counts()}")
            finally:
                worker.stop()
            counts = jq.counts()
            assert counts["queued"] == counts["active"] == counts["retrying"] == 0
            for job_id, blob in [*zip(ids, raw), ("good-after", None)]:
                job = jq.get(job_id)
                assert job is not None, job_id
                if blob is None or readable(blob):
                    assert job.state is JobState.COMPLETED and job.result == job_id and job.attempts == 1
                else:
                    assert job.state is JobState.DEAD and job.attempts == 1, (job_id, blob, job)
                    assert job.params == blob and "UndecodableParamsError" in job.last_error

    prop()
