"""The end committer shared by flow and task workers (zkqueue.flows.committer): every end queued is committed
exactly once, many per batch, also those queued while it closes or after; a commit that raises is logged and the
thread goes on."""

from __future__ import annotations

import logging
import threading

from zkqueue.flows.committer import EndCommitter
from zkqueue.server.testing import wait_for


def test_every_end_is_committed_once_in_batches_and_the_close_commits_what_is_queued() -> None:
    gate = threading.Event()
    seen: list[list[int]] = []

    def commit(batch: list[int]) -> None:
        gate.wait(10)  # the first batch waits: what is put meanwhile makes the next one
        seen.append(list(batch))

    committer: EndCommitter[int] = EndCommitter(commit, "test")
    for i in range(50):
        committer.put(i)
    gate.set()
    committer.close()
    assert sorted(i for batch in seen for i in batch) == list(range(50))
    assert committer.batches == len(seen) and committer.largest == max(len(b) for b in seen)
    assert committer.idle()
    committer.put(50)  # after the close: committed on this thread
    assert seen[-1] == [50]


def test_a_commit_that_raises_is_logged_and_the_thread_goes_on(caplog) -> None:
    done: list[int] = []

    def commit(batch: list[int]) -> None:
        if 0 in batch:
            raise RuntimeError("a bug")
        done.extend(batch)

    committer: EndCommitter[int] = EndCommitter(commit, "test")
    with caplog.at_level(logging.CRITICAL, logger="zkqueue.flows.committer"):
        committer.put(0)
        wait_for(lambda: committer.batches == 1, 10)
        committer.put(1)
        committer.close()
    assert done == [1]
    assert any("committing 1 end(s) failed" in r.getMessage() for r in caplog.records)
