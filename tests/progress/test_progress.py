"""zkqueue.progress on a real ZooKeeper: the job log, the ordered consumer's bounds, progress over consecutive
finished jobs only, retries and on_stuck, resume after a crash, a two-stage pipeline with exactly-once hand-off,
watch-driven wake-ups, pruning, and bad input."""

from __future__ import annotations

import random
import threading
import time

import pytest
from kazoo.recipe.watchers import DataWatch

from zkqueue.errors import (
    ConfigurationError,
    InvalidPathError,
    JobNotFoundError,
    JobPrunedError,
    LogFormatError,
    ProgressFencedError,
    ProgressFormatError,
)
from zkqueue.progress import JobLog, ProgressConsumer, RetryPolicy, read_index
from zkqueue.progress.store import decode
from zkqueue.progress.window import Window
from zkqueue.server.testing import wait_for

pytestmark = pytest.mark.timeout(120)


def _fill(log: JobLog, n: int) -> list[int]:
    out: list[int] = []
    for lo in range(0, n, 200):
        out += log.append_many([f"job-{i}".encode() for i in range(lo + 1, min(n, lo + 200) + 1)])
    return out


class _StoredValues:
    """Every value the progress node takes, as a data watch sees it."""

    def __init__(self, client, path: str) -> None:  # noqa: ANN001
        self.values: list[int] = []
        DataWatch(client, path, self._seen)

    def _seen(self, data, stat) -> None:  # noqa: ANN001
        if data:
            self.values.append(decode(data, "progress"))


# ------------------------------------------------------------------------------------------------ the log
def test_log_indexes_buckets_and_reads(zk_client) -> None:
    log = JobLog(zk_client, "/logs/a", bucket_size=5)
    assert log.head() == 0  # only the origin
    assert log.append(b"one") == 1
    idx = log.append_many([b"j%d" % i for i in range(2, 13)])  # crosses two bucket boundaries in one multi
    assert idx == list(range(2, 13))
    assert log.head() == 12 and log.buckets() == [0, 1, 2]
    assert log.at(1) == b"one" and log.at(7) == b"j7" and log.at(12) == b"j12"
    assert log.at_range(4, 20) == [b"j%d" % i for i in range(4, 13)]
    with pytest.raises(JobNotFoundError):
        log.at(13)
    with pytest.raises(JobNotFoundError):
        log.at(0)  # the origin is not a job
    # a second handle (another process) sees the same log and appends after it
    other = JobLog(zk_client, "/logs/a")
    assert other.bucket_size == 5 and other.head() == 12 and other.append(b"x") == 13
    assert log.append(b"y") == 14  # its cached bucket was stale: compare-and-set conflict, retried
    assert log.at(13) == b"x" and log.at(14) == b"y"
    assert log.append_many([]) == []


def test_log_concurrent_appenders_get_distinct_dense_indexes(zk_client_factory) -> None:
    logs = [JobLog(zk_client_factory(), "/logs/c", bucket_size=7) for _ in range(3)]
    logs[0].head()
    got: list[list[int]] = [[] for _ in logs]

    def append(k: int) -> None:
        for j in range(30):
            got[k] += logs[k].append_many([f"{k}-{j}-{m}".encode() for m in range(k + 1)])

    threads = [threading.Thread(target=append, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = sorted(i for g in got for i in g)
    assert every == list(range(1, 30 * 6 + 1))  # no index twice, no hole
    assert logs[1].head() == 180


def test_log_bad_input(zk_client) -> None:
    with pytest.raises(InvalidPathError):
        JobLog(zk_client, "logs/x")
    with pytest.raises(ConfigurationError):
        JobLog(zk_client, "/logs/x", bucket_size=1)
    log = JobLog(zk_client, "/logs/x", bucket_size=10)
    assert log.head() == 0  # created
    with pytest.raises(TypeError):
        log.append("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        log.append_many(b"abc")  # type: ignore[arg-type]
    with pytest.raises(LogFormatError):
        JobLog(zk_client, "/logs/x", bucket_size=20).head()
    zk_client.create("/logs/notalog", b"hello")
    with pytest.raises(LogFormatError):
        JobLog(zk_client, "/logs/notalog").head()


def test_window_is_pure_bookkeeping() -> None:
    w = Window(0, max_processing=2, max_search_ahead=3)
    w.start(1)
    w.start(2)
    assert w.free() == 0
    assert not w.finish(2) and w.processed == 0  # 1 still runs: no move
    assert w.free() == 1
    w.start(3)
    assert w.free() == 0  # 4 would be past processed + 3
    assert w.finish(1) and w.processed == 2
    with pytest.raises(ValueError):
        w.start(5)


# ------------------------------------------------------------------------------------------------ the consumer
def test_1000_jobs_bounded_and_progress_only_over_finished(zk_client) -> None:
    log = JobLog(zk_client, "/logs/k")
    n, max_processing, ahead = 1000, 8, 40
    _fill(log, n)
    lock = threading.Lock()
    running = {"now": 0, "max": 0}
    finished: set[int] = set()
    progress_seen: list[int] = [0]
    violations: list[str] = []
    runs: dict[int, int] = {}

    def worker(index: int, job: bytes) -> None:
        with lock:
            running["now"] += 1
            running["max"] = max(running["max"], running["now"])
            runs[index] = runs.get(index, 0) + 1
            if index > progress_seen[-1] + ahead:
                violations.append(f"{index} started with processed {progress_seen[-1]}")
            assert job == f"job-{index}".encode()
        time.sleep(random.random() * 0.003)
        with lock:
            finished.add(index)
            running["now"] -= 1

    def on_progress(p: int) -> None:
        with lock:
            missing = [i for i in range(1, p + 1) if i not in finished]
            if missing:
                violations.append(f"processed {p} passed unfinished {missing[:5]}")
            progress_seen.append(p)

    stored = _StoredValues(zk_client, "/progress/k")
    c = ProgressConsumer(zk_client, jobs=log, progress_path="/progress/k", worker=worker,
                         max_processing=max_processing, max_search_ahead=ahead, default_index=0,
                         progress_interval=0.05, progress_batch=50)
    c.on_progress(on_progress)
    with c:
        assert c.wait_processed(n, timeout=60), c.stats()
    assert not violations, violations[:5]
    assert running["max"] <= max_processing
    assert sorted(runs) == list(range(1, n + 1)) and set(runs.values()) == {1}
    assert progress_seen == sorted(progress_seen)
    wait_for(lambda: stored.values and stored.values[-1] == n)
    assert stored.values == sorted(stored.values)  # never backward
    stats = c.stats()
    assert stats.jobs_done == n and stats.stored_index == n == read_index(zk_client, "/progress/k")[0]
    assert stats.progress_writes < n / 10  # batched


def test_slow_job_holds_progress_back(zk_client) -> None:
    log = JobLog(zk_client, "/logs/s")
    _fill(log, 30)
    gate = threading.Event()
    done: set[int] = set()

    def worker(index: int, job: bytes) -> None:
        if index == 3:
            gate.wait(30)
        done.add(index)

    c = ProgressConsumer(zk_client, jobs=log, progress_path="/progress/s", worker=worker, max_processing=4,
                         max_search_ahead=10, progress_interval=0.0, progress_batch=1)
    with c:
        wait_for(lambda: done >= set(range(4, 13)) - {3})
        assert 13 not in done  # search-ahead: not past processed (2) + 10
        assert c.processed_index == 2
        assert read_index(zk_client, "/progress/s")[0] <= 2
        gate.set()
        assert c.wait_processed(30, timeout=30)
    assert done == set(range(1, 31))


def test_failing_worker_is_retried_never_skipped_and_reported_stuck(zk_client) -> None:
    log = JobLog(zk_client, "/logs/f")
    _fill(log, 10)
    attempts: dict[int, int] = {}
    stuck: list[tuple[int, str, int]] = []

    def worker(index: int, job: bytes) -> None:
        attempts[index] = attempts.get(index, 0) + 1
        if index == 5 and attempts[index] <= 3:
            raise RuntimeError(f"boom {attempts[index]}")

    c = ProgressConsumer(zk_client, jobs=log, progress_path="/progress/f", worker=worker, max_processing=2,
                         max_search_ahead=20, retry=RetryPolicy(max_attempts=2, backoff=0.01, jitter=False),
                         on_stuck=lambda i, e, n: stuck.append((i, str(e), n)), progress_interval=0.0)
    with c:
        assert c.wait_processed(10, timeout=30)
    assert attempts[5] == 4 and all(attempts[i] == 1 for i in range(1, 11) if i != 5)
    assert stuck == [(5, "boom 2", 2)]  # once, when the policy would have given up
    s = c.stats()
    assert s.failures == 3 and s.stuck == 1 and s.retries == 3


def test_resume_after_a_crash_from_the_stored_index(zk_client_factory) -> None:
    first = zk_client_factory()
    log = JobLog(first, "/logs/r")
    _fill(log, 60)
    runs: list[int] = []
    gate = threading.Event()
    running_41 = threading.Event()

    def worker(index: int, job: bytes) -> None:
        if index == 41:
            running_41.set()
            gate.wait(30)  # the crash lands while 41 runs
        runs.append(index)

    a = ProgressConsumer(first, jobs=log, progress_path="/progress/r", worker=worker, max_processing=1,
                         max_search_ahead=5, progress_interval=0.0, progress_batch=1)
    a.start()
    # 40 is stored before 41 is handed to a worker (one coordinator pass): wait for both
    wait_for(lambda: read_index(first, "/progress/r") and read_index(first, "/progress/r")[0] == 40)
    assert running_41.wait(10)
    first.stop()  # the process "dies": its session ends, nothing more is written
    first.close()
    gate.set()
    a.stop()
    before = list(runs)
    assert before.count(41) == 1  # stop() returned only once the run of 41 it started had returned
    second = zk_client_factory()
    b = ProgressConsumer(second, jobs=JobLog(second, "/logs/r"), progress_path="/progress/r",
                         worker=lambda i, job: runs.append(i), max_processing=3, progress_interval=0.0)
    with b:
        assert b.wait_processed(60, timeout=30)
    again = runs[len(before):]
    # everything above the stored index once, nothing at or below it (a second term of b would run some again)
    assert sorted(again) == list(range(41, 61)), f"b ran {again} with stats {b.stats()}"
    assert set(range(1, 61)) <= set(runs)


def test_two_stage_pipeline_hands_off_exactly_once(zk_client_factory) -> None:
    c1 = zk_client_factory()
    stage1, stage2 = JobLog(c1, "/logs/p1"), JobLog(c1, "/logs/p2")
    n = 80
    _fill(stage1, n)
    gate = threading.Event()

    def split(index: int, job: bytes, ctx) -> None:  # noqa: ANN001
        if index > 50:
            gate.wait(30)  # the crash lands while these wait
        ctx.append_and_done(stage2, [job + b"/a", job + b"/b"])

    a = ProgressConsumer(c1, jobs=stage1, progress_path="/progress/p1", worker=split, max_processing=4,
                         progress_interval=3600, progress_batch=10_000)  # nothing stored before the crash
    a.start()
    wait_for(lambda: stage2.head() >= 100)
    c1.stop()  # crash: stored progress is still 0, the hand-offs are committed
    c1.close()
    gate.set()
    a.stop()
    c2 = zk_client_factory()
    stage1b, stage2b = JobLog(c2, "/logs/p1"), JobLog(c2, "/logs/p2")
    reran: list[int] = []

    def split_again(index: int, job: bytes, ctx) -> None:  # noqa: ANN001
        reran.append(index)
        ctx.append_and_done(stage2b, [job + b"/a", job + b"/b"])

    got: list[bytes] = []
    lock = threading.Lock()

    def collect(index: int, job: bytes) -> None:
        with lock:
            got.append(job)

    b = ProgressConsumer(c2, jobs=stage1b, progress_path="/progress/p1", worker=split_again, max_processing=4,
                         progress_interval=0.0)
    second = ProgressConsumer(c2, jobs=stage2b, progress_path="/progress/p2", worker=collect, max_processing=4)
    with b, second:
        assert b.wait_processed(n, timeout=30)
        assert second.wait_processed(2 * n, timeout=30)
    assert stage2b.head() == 2 * n
    assert sorted(got) == sorted(f"job-{i}/{s}".encode() for i in range(1, n + 1) for s in "ab")
    assert min(reran) > 50 and b.stats().skipped_done >= 50  # handed-off jobs are not run again
    assert c2.get_children("/progress/p1/done") == []  # markers dropped once progress covered them


def test_appends_wake_the_consumer_without_polling(zk_client) -> None:
    log = JobLog(zk_client, "/logs/w", bucket_size=3)
    seen: list[int] = []
    c = ProgressConsumer(zk_client, jobs=log, progress_path="/progress/w", worker=lambda i, j: seen.append(i),
                         max_processing=2, poll_interval=None)
    with c:
        wait_for(lambda: c.is_active)
        for k in range(1, 9):  # across bucket boundaries: the watch moves to each new bucket
            log.append(b"x")
            assert c.wait_processed(k, timeout=10), (k, c.stats())
    assert seen == list(range(1, 9))


def test_other_sources_are_woken_by_check(zk_client) -> None:
    class ListJobs:
        def __init__(self) -> None:
            self.items: list[str] = []

        def head(self) -> int:
            return len(self.items) - 1

        def at_index(self, i: int) -> str | None:
            return self.items[i] if i < len(self.items) else None

    jobs = ListJobs()
    seen: list[tuple[int, str]] = []
    c = ProgressConsumer(zk_client, jobs=jobs, progress_path="/progress/list", worker=lambda i, j: seen.append((i, j)),
                         default_index=-1, poll_interval=None)
    with c:
        wait_for(lambda: c.is_active)
        jobs.items += ["a", "b"]
        c.check()
        assert c.wait_processed(1, timeout=10)
    assert seen == [(0, "a"), (1, "b")]


def test_prune_keeps_what_a_registered_consumer_still_needs(zk_client) -> None:
    log = JobLog(zk_client, "/logs/pr", bucket_size=10)
    _fill(log, 35)
    assert log.prune() == 0  # no registered consumer: nothing
    fast = ProgressConsumer(zk_client, jobs=log, progress_path="/progress/fast", worker=lambda i, j: None,
                            progress_interval=0.0)
    gate = threading.Event()
    slow = ProgressConsumer(zk_client, jobs=log, progress_path="/progress/slow",
                            worker=lambda i, j: gate.wait(60) if i > 12 else None, max_processing=1,
                            max_search_ahead=1, progress_interval=0.0, progress_batch=1)
    with fast:
        assert fast.wait_processed(35, timeout=30)
    slow.start()
    try:
        wait_for(lambda: read_index(zk_client, "/progress/slow") and read_index(zk_client, "/progress/slow")[0] == 12)
        assert log.consumers() == {"/progress/fast": 35, "/progress/slow": 12}
        assert log.prune() == 10  # bucket 0 (indexes 0-9) only: 10-19 holds 13, which slow still needs
        assert log.buckets() == [1, 2, 3]
        with pytest.raises(JobPrunedError):
            log.at(5)
        assert log.at(13) == b"job-13" and log.head() == 35 and log.append(b"more") == 36
    finally:
        slow._stop.set()  # stop before its held job returns: 13 stays unfinished
        gate.set()
        slow.stop()
    assert log.unregister_consumer("/progress/slow")
    assert log.prune() == 20  # buckets 1 and 2; the newest bucket (3) stays


def test_consumer_bad_input_and_bad_stored_progress(zk_client) -> None:
    log = JobLog(zk_client, "/logs/b")
    w = lambda i, j: None  # noqa: E731
    for kwargs in ({"max_processing": 0}, {"max_processing": 8, "max_search_ahead": 4}, {"default_index": -2},
                   {"progress_interval": -1}, {"retry": "fast"}, {"progress_batch": True}):
        with pytest.raises(ConfigurationError):
            ProgressConsumer(zk_client, jobs=log, progress_path="/progress/b", worker=w, **kwargs)
    with pytest.raises(ConfigurationError):
        ProgressConsumer(zk_client, jobs=object(), progress_path="/progress/b", worker=w)
    with pytest.raises(ConfigurationError):
        ProgressConsumer(zk_client, jobs=log, progress_path="progress", worker=w)
    zk_client.create("/progress/garbage", b"not json", makepath=True)
    errors: list[BaseException] = []
    c = ProgressConsumer(zk_client, jobs=log, progress_path="/progress/garbage", worker=w)
    c.on_error(errors.append)
    with c:
        wait_for(lambda: errors)
        time.sleep(0.5)
        assert isinstance(errors[0], ProgressFormatError)
        assert len(errors) <= 4  # backs off between tries: no hot loop
        assert c.processed_index is None


def test_a_stale_fence_cannot_write_progress(zk_client_factory) -> None:
    client = zk_client_factory()
    log = JobLog(client, "/logs/fence")
    _fill(log, 5)
    c = ProgressConsumer(client, jobs=log, progress_path="/progress/fence", worker=lambda i, j: None,
                         progress_interval=0.0)
    with c:
        assert c.wait_processed(5, timeout=10)
        store = c._store
        old_fence = store.fence
    # the consumer left the election: its node is gone, so a write with it must be refused
    assert not client.exists(old_fence)
    with pytest.raises(ProgressFencedError):
        store.write(6)
    assert read_index(client, "/progress/fence")[0] == 5
