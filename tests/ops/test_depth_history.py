"""zkqueue.ops.depth and zkqueue.ops.history on a real ZooKeeper: a job queue's depth lists its lock directory once,
and the history forgets a queue that is gone."""

from __future__ import annotations

from collections import Counter
from typing import Any

from zkqueue import QueueBuilder, StrSerializer
from zkqueue.jobs import JobQueue
from zkqueue.ops.depth import job_depth
from zkqueue.ops.history import History


class CountingClient:
    """A real client that counts the listings asked of it, by path."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.listed: Counter[str] = Counter()

    def get_children(self, path: str, *args: Any, **kwargs: Any) -> list[str]:
        self.listed[path] += 1
        return self._client.get_children(path, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_job_depth_lists_the_lock_directory_once(zk_client) -> None:
    with JobQueue(zk_client, "/d/jobs") as jq:
        for i in range(3):
            jq.add({"n": i}, job_id=f"j{i}")
        counting = CountingClient(zk_client)
        depth = job_depth(counting, "/d/jobs")
        assert depth.pending == 3 and depth.retrying == 0 and depth.in_flight == 0
        assert counting.listed[jq.paths.locks] == 1
        assert counting.listed[jq.paths.queue] == 1


def test_history_drops_the_samples_of_a_queue_that_is_gone(zk_client) -> None:
    for path in ("/h/a", "/h/b"):
        with QueueBuilder.builder(zk_client, None, StrSerializer(), path).put_in_background(False).build_queue() as q:
            q.put("x")
    now = [100.0]
    history = History(zk_client, ["/h/a", "/h/b"], clock=lambda: now[0])
    history.sample()
    now[0] += 1
    history.sample()
    assert len(history.series("/h/b")) == 2
    zk_client.delete("/h/b", recursive=True)
    now[0] += 1
    assert [s.depth.path for s in history.sample()] == ["/h/a"]
    assert history.series("/h/b") == [] and set(history.latest()) == {"/h/a"}
    assert len(history.series("/h/a")) == 3


def test_history_with_find_forgets_queues_no_longer_found(zk_client) -> None:
    found = [("/h/x", "queue"), ("/h/y", "queue")]
    zk_client.ensure_path("/h/x")
    zk_client.ensure_path("/h/y")
    history = History(zk_client, find=lambda: list(found))
    history.sample()
    assert set(history.latest()) == {"/h/x", "/h/y"}
    found.pop()
    history.sample()
    assert set(history.latest()) == {"/h/x"}
