"""zkqueue.progress on a real ZooKeeper, under the faults a review found: a suspended connection must not make the
coordinator spin, a lost append reply must not store the append twice, appenders that keep losing the race give up
saying nothing was written, a watch is not doubled when a consumer of the same log is replaced, and a worker that
raises a BaseException (or whose thread dies) never stalls the processed index."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss

import zkqueue.progress.consumer as consumer_module
import zkqueue.progress.log as log_module
from zkqueue.errors import AppendConflictError, AppendUncertainError
from zkqueue.progress import JobLog, ProgressConsumer, RetryPolicy, read_index
from zkqueue.server.testing import wait_for
from zkqueue.server.testing_proxy import TcpProxy

pytestmark = pytest.mark.timeout(120)


def _stored(client: KazooClient, path: str) -> int | None:
    found = read_index(client, path)
    return None if found is None else found[0]


# ------------------------------------------------------------------------------------------------ 1. no hot loop
def test_suspended_connection_with_a_due_write_does_not_spin_the_coordinator(zk_server, zk_chroot,
                                                                            zk_client) -> None:
    JobLog(zk_client, "/logs/susp").append_many([b"j%d" % i for i in range(1, 6)])
    gate = threading.Event()
    running5 = threading.Event()

    def worker(index: int, job: bytes) -> None:
        if index == 5:
            running5.set()
            gate.wait(60)

    states: list[str] = []
    with TcpProxy(zk_server.connect_string.split(",")[0]) as proxy:
        client = KazooClient(hosts=proxy.connect_string + zk_chroot, timeout=6.0,
                             connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5})
        client.add_listener(states.append)
        client.start(timeout=30)
        try:
            c = ProgressConsumer(client, JobLog(client, "/logs/susp"), "/progress/susp", worker, max_processing=2,
                                 progress_interval=0.05, progress_batch=1000, poll_interval=None)
            with c:
                # Job 5 holds the rest back. It must be running before the stall: its read from the log is a request
                # of its own, which a stall catches in flight on a busy machine (then job 5 only runs once the
                # connection is back, and nothing finishes while suspended).
                wait_for(lambda: c.stored_index == 4 and running5.is_set(), timeout=30)
                proxy.stall()
                wait_for(lambda: KazooState.SUSPENDED in states, timeout=30)
                gate.set()  # job 5 finishes while suspended: a progress write is due and cannot be sent
                wait_for(lambda: c.processed_index == 5, timeout=30)
                assert c.stored_index == 4
                before = c.stats().coordinator_loops
                time.sleep(1.5)  # 30 progress intervals: the write is overdue all along
                spun = c.stats().coordinator_loops - before
                proxy.heal()
                assert spun <= 10, f"the coordinator went round {spun} times while suspended"
                # back online (same session, or a new term after expiry): the due write lands
                wait_for(lambda: _stored(zk_client, "/progress/susp") == 5, timeout=60)
        finally:
            client.stop()
            client.close()


# ------------------------------------------------------------------------------------------------ 2. exactly once
@pytest.mark.parametrize("sync_catches_up", [True, False], ids=["lags-until-sync", "lags-past-sync"])
def test_a_lost_append_reply_stores_the_append_exactly_once(zk_client, monkeypatch, sync_catches_up) -> None:
    """The append commits, its reply is lost, and the server the client reads from lags behind the leader: for
    the check after the loss (until a sync, or past it for two reads). Either the synced check or the token check
    on the following conflict must find the append, so it is not sent again."""
    log = JobLog(zk_client, "/logs/lost", bucket_size=100)
    assert log.append(b"first") == 1
    bucket = log.bucket_path(0)
    real_commit, real_get, real_sync = log_module.commit, zk_client.get, zk_client.sync
    state: dict[str, Any] = {"snapshot": None, "stale_reads": 0, "commits": 0}

    def commit_then_lose_reply(client: KazooClient, ops: list[Any]) -> list[Any]:
        state["commits"] += 1
        if state["snapshot"] is None:
            state["snapshot"] = real_get(bucket)
            real_commit(client, ops)
            state["stale_reads"] = 2
            raise ConnectionLoss("reply lost (test)")
        return real_commit(client, ops)

    def lagging_get(path: str, watch: Any = None) -> Any:
        if path == bucket and state["stale_reads"] > 0:
            state["stale_reads"] -= 1
            return state["snapshot"]
        return real_get(path, watch)

    def sync(path: str) -> Any:
        if sync_catches_up:
            state["stale_reads"] = 0
        return real_sync(path)

    monkeypatch.setattr(log_module, "commit", commit_then_lose_reply)
    monkeypatch.setattr(zk_client, "get", lagging_get)
    monkeypatch.setattr(zk_client, "sync", sync)
    assert log.append_many([b"a", b"b"]) == [2, 3]
    monkeypatch.undo()
    assert state["commits"] == (1 if sync_catches_up else 2)
    assert log.head() == 3
    assert log.at_range(1, 10) == [b"first", b"a", b"b"]
    assert log.append(b"next") == 4  # the cached newest bucket is right after the settled append


# ------------------------------------------------------------------------------------------------ 6. CAS give-up
def test_appends_that_keep_losing_the_race_back_off_and_say_nothing_was_written(zk_client_factory,
                                                                               monkeypatch) -> None:
    log = JobLog(zk_client_factory(), "/logs/race", bucket_size=100)
    rival = JobLog(zk_client_factory(), "/logs/race")
    log.head()
    real_commit = log_module.commit
    waits: list[int] = []

    def rival_wins(client: KazooClient, ops: list[Any]) -> list[Any]:
        if client is not rival.client:
            rival.append(b"rival")  # another appender gets in first, every time
        return real_commit(client, ops)

    monkeypatch.setattr(log_module, "commit", rival_wins)
    monkeypatch.setattr(log_module, "CAS_TRIES", 4)
    monkeypatch.setattr(log_module, "cas_wait", waits.append)
    with pytest.raises(AppendConflictError, match="nothing was written") as caught:
        log.append(b"mine")
    assert not isinstance(caught.value, AppendUncertainError)
    monkeypatch.undo()
    assert waits == [1, 2, 3]  # a backoff between the tries
    assert log.head() == 4 and log.at_range(1, 10) == [b"rival"] * 4


# ------------------------------------------------------------------------------------------------ 4. one watch
def test_replacing_a_consumer_of_the_same_log_does_not_double_the_watch(zk_client) -> None:
    log = JobLog(zk_client, "/logs/w")
    first = ProgressConsumer(zk_client, log, "/progress/w1", lambda i, job: None, max_processing=1,
                             max_search_ahead=10)
    first.start()
    first.stop()
    second = ProgressConsumer(zk_client, log, "/progress/w2", lambda i, job: None, max_processing=1,
                              max_search_ahead=10)
    calls: list[int] = []
    with second:
        stop_watch = log.watch(lambda: calls.append(1))  # joins the consumer's watch: no first call
        for k in range(1, 6):
            log.append(b"x%d" % k)
            wait_for(lambda k=k: len(calls) >= k, timeout=10)
        assert second.wait_processed(5, timeout=30)
        zk_client.sync(log.path)
        time.sleep(0.3)  # any doubled call would have come by now
        assert len(calls) == 5
        stop_watch()


def test_a_watch_removed_and_added_again_fires_once(zk_client) -> None:
    log = JobLog(zk_client, "/logs/w2")
    calls: list[str] = []
    log.watch(lambda: calls.append("a"))()  # added and removed before any append
    stop = log.watch(lambda: calls.append("b"))
    calls.clear()
    log.append(b"one")
    wait_for(lambda: calls, timeout=10)
    zk_client.sync(log.path)
    time.sleep(0.3)
    assert calls == ["b"]
    stop()
    log.append(b"two")  # its watch stops at this event; nothing is called
    zk_client.sync(log.path)
    time.sleep(0.3)
    assert calls == ["b"]
    again = log.watch(lambda: calls.append("c"))  # a new watch starts
    log.append(b"three")
    wait_for(lambda: calls.count("c") >= 2, timeout=10)  # its first call, then the append
    again()


# ------------------------------------------------------------------------------------------------ 5. no stall
def test_a_worker_raising_system_exit_is_retried_not_dropped(zk_client) -> None:
    log = JobLog(zk_client, "/logs/exit")
    log.append_many([b"j%d" % i for i in range(1, 21)])
    raised: set[int] = set()
    stuck: list[tuple[int, type]] = []

    def worker(index: int, job: bytes) -> None:
        if index in (3, 7) and index not in raised:
            raised.add(index)
            raise SystemExit(1)

    c = ProgressConsumer(zk_client, log, "/progress/exit", worker, max_processing=4,
                         retry=RetryPolicy(max_attempts=3, backoff=0.01),
                         on_stuck=lambda i, e, a: stuck.append((i, type(e))), progress_interval=0.05)
    with c:
        assert c.wait_processed(20, timeout=30)
    assert raised == {3, 7}
    assert stuck == []  # not an Exception, yet a failed attempt like one: retried by the policy, not stuck at once
    assert c.stats().failures == 2 and c.stats().jobs_done == 20
    assert _stored(zk_client, "/progress/exit") == 20


def test_a_dead_worker_thread_ends_the_term_loudly_and_its_job_runs_again(zk_client, monkeypatch) -> None:
    log = JobLog(zk_client, "/logs/dead")
    log.append_many([b"j%d" % i for i in range(1, 11)])
    real_job_run = consumer_module.JobRun
    died: list[int] = []

    def job_run(index: int, *args: Any) -> Any:
        if index == 5 and not died:
            died.append(index)
            raise RuntimeError("worker thread dies (test)")
        return real_job_run(index, *args)

    monkeypatch.setattr(consumer_module, "JobRun", job_run)
    ran: list[int] = []
    errors: list[BaseException] = []
    c = ProgressConsumer(zk_client, log, "/progress/dead", lambda i, job: ran.append(i), max_processing=2,
                         progress_interval=0.05)
    c.on_error(errors.append)
    with c:
        assert c.wait_processed(10, timeout=30)
    assert died == [5] and 5 in ran and set(ran) == set(range(1, 11))
    assert any("worker thread of job 5 died" in str(e) for e in errors)
    assert c.stats().elected == 2
    assert _stored(zk_client, "/progress/dead") == 10
