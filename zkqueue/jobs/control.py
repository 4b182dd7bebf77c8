"""Job control: pausing a job queue and asking a running job to cancel, watched by every worker.

``<queue>/control`` holds ``{"paused": true, ...}`` while the queue is paused (empty or ``{"paused": false}``
otherwise). Every start of a job (the multi that counts its attempt) checks the version of that node at which this
process last saw it running: a start that races a pause fails and the job is given back uncounted, so once
:meth:`JobQueue.pause <zkqueue.jobs.JobQueue.pause>` has returned no job starts anywhere until it is resumed. Adds
go on while paused; running jobs finish.

``<queue>/cancels/<escaped id>`` asks the worker running that job to cancel it (:meth:`JobQueue.cancel
<zkqueue.jobs.JobQueue.cancel>` creates it only while the job's record is ACTIVE, in a multi that checks the
record's version). The worker sees it on a watch, tells the handler (``job.cancel_requested``; an async handler is
cancelled) and ends the attempt CANCELLED, deleting the request in that same multi. A request that outlives its
job (the job ended just before the worker saw it) is deleted when the id is used again.

One :class:`QueueControl` per :class:`~zkqueue.jobs.JobQueue` keeps both watches (kazoo's ``DataWatch`` and
``ChildrenWatch`` recipes: they survive reconnects and run on kazoo's event thread, no thread of their own).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from zkqueue.engine import api
from zkqueue.engine.api import check_op
from zkqueue.jobs import names
from zkqueue.jobs.model import now_ms

log = logging.getLogger("zkqueue.jobs.control")

#: Called with the ids of the jobs whose cancel was newly requested.
CancelListener = Callable[[frozenset[str]], None]


def paused_data(paused: bool) -> bytes:
    """The control node's data for ``paused``."""
    return json.dumps({"paused": paused, "at_ms": now_ms()}, separators=(",", ":")).encode()


def is_paused(data: bytes | None) -> bool:
    """Whether the control node's ``data`` says paused (anything unreadable: not paused, logged)."""
    if not data:
        return False
    try:
        return bool(json.loads(data).get("paused", False))
    except (ValueError, AttributeError):
        log.warning("the control node of a job queue holds %r, not JSON: read as not paused", data[:80])
        return False


class QueueControl:
    """The pause state and the cancel requests of one job queue, kept current by watches (see the module docs)."""

    def __init__(self, client: KazooClient, control_path: str, cancels_path: str) -> None:
        self._client = client
        self._control_path = control_path
        self._cancels_path = cancels_path
        self._cond = threading.Condition()
        self._paused = False
        self._version: int | None = None  # None: not seen yet (or the node is gone)
        self._requests: frozenset[str] = frozenset()
        self._listeners: list[CancelListener] = []
        self._closed = False
        self._started = False

    def start(self) -> None:
        """Set the watches (the nodes must exist). Returns once both have been read once."""
        if self._started:
            return
        self._started = True
        DataWatch(self._client, self._control_path, self._on_control)
        ChildrenWatch(self._client, self._cancels_path, self._on_cancels)

    def close(self) -> None:
        """Let go of the watches (at their next event) and wake every waiter."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # ------------------------------------------------------------------------------------------ pause
    def _on_control(self, data: bytes | None, stat: Any) -> bool | None:
        with self._cond:
            if self._closed:
                return False
            self._paused = is_paused(data)
            self._version = stat.version if stat is not None else None
            self._cond.notify_all()
        return None

    @property
    def paused(self) -> bool:
        """Whether the queue is paused, as this process last saw it."""
        with self._cond:
            return self._paused

    def wait_running(self, timeout: float | None) -> bool:
        """Block while the queue is paused, up to ``timeout`` seconds (None: as long as it is paused); whether it
        runs now."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._paused or self._closed, timeout) and not self._paused

    def fence_ops(self) -> list[Any] | None:
        """The op that makes a start fail if the queue was paused since this process last saw it running, or None
        while it is paused (start nothing)."""
        with self._cond:
            if self._paused:
                return None
            version = self._version
        return [check_op(self._control_path, version)] if version is not None else []

    def saw(self, version: int, paused: bool) -> None:
        """What this process just wrote to the control node (its own pause or resume), before the watch says so:
        this process's workers heed it at once."""
        with self._cond:
            if self._version is None or version >= self._version:
                self._paused, self._version = paused, version
                self._cond.notify_all()

    # ------------------------------------------------------------------------------------------ cancel requests
    def _on_cancels(self, children: list[str]) -> bool | None:
        with self._cond:
            if self._closed:
                return False
            ids = frozenset(names.job_id_of(c) for c in children)
            new = ids - self._requests
            self._requests = ids
            listeners = list(self._listeners)
        if new:
            for listener in listeners:
                try:
                    listener(new)
                except Exception:  # a listener's bug must not stop the watch
                    log.exception("a cancel listener of %s failed", self._cancels_path)
        return None

    def cancel_requested(self, job_id: str) -> bool:
        """Whether a cancel of ``job_id`` is requested (as this process last saw the requests)."""
        with self._cond:
            return job_id in self._requests

    def listen(self, listener: CancelListener) -> Callable[[], None]:
        """Call ``listener(ids)`` (on kazoo's event thread; it must not block) with the ids of jobs whose cancel is
        newly requested; returns the call that stops it."""
        with self._cond:
            self._listeners.append(listener)

        def stop() -> None:
            with self._cond:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return stop


def reap_requests(client: KazooClient, cancels_path: str, record_path: Callable[[str], str]) -> int:
    """Delete the cancel requests whose job has no unfinished record any more (it ended before its worker saw the
    request, or the request's own delete was lost): one listing, one pipelined read, a version-checked delete
    each. Returns how many were deleted. (An add of the same id deletes its stale request too, in its multi.)"""
    children = client.get_children(cancels_path)
    if not children:
        return 0
    requests = [f"{cancels_path}/{c}" for c in children]
    records = [record_path(names.job_id_of(c)) for c in children]
    reads = api.multi_read(client, records + requests)
    stale = [(path, req[1].version) for path, rec, req in zip(requests, reads[:len(records)], reads[len(records):])
             if isinstance(rec, NoNodeError) and not isinstance(req, BaseException)]
    deleted = 0
    for path, version in stale:
        try:
            client.delete(path, version=version)
            deleted += 1
        except (NoNodeError, BadVersionError):  # gone or new meanwhile
            pass
    if deleted:
        log.info("deleted %d cancel request(s) of finished jobs under %s", deleted, cancels_path)
    return deleted


__all__ = ["CancelListener", "QueueControl", "is_paused", "paused_data", "reap_requests"]
