"""Waiting for a job to finish, on ZooKeeper watches (no polling): the sync side of
:meth:`AsyncJobQueue.wait_result <zkqueue.aio.AsyncJobQueue.wait_result>`.

A job finishes in one multi that deletes ``records/<id>`` and creates ``completed/<id>`` or ``dead/<id>``
(:mod:`zkqueue.jobs.store`), so a wait sets an ``exists`` watch on both finished paths (pipelined: one round trip)
and sleeps until one fires. A reconnect or a lost session wakes it too (a new session has no watches): it then looks
again. A job in none of the three places is unknown; it is looked up twice before that is reported, because the
reads are not one snapshot (a job finishing between them is in neither for one look).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zkqueue.engine.api import CONNECTION_ERRORS
from zkqueue.errors import ConfigurationError, JobNotFoundError, WaitTimeoutError
from zkqueue.jobs import store
from zkqueue.jobs.model import Job, Record

log = logging.getLogger("zkqueue.jobs.waiting")


def check_wait_timeout(timeout: float | None) -> float | None:
    """A wait's ``timeout``: None (no limit) or a number of seconds >= 0."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise ConfigurationError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
    return float(timeout)


def wait_finished(client: KazooClient, paths: store.Paths, to_job: Callable[[Record], Job], job_id: str,
                  timeout: float | None = None) -> Job:
    """Job ``job_id`` of the job queue at ``paths`` once it is COMPLETED, DEAD or CANCELLED (``to_job`` turns its record into
    the :class:`~zkqueue.jobs.Job`). Raises :class:`~zkqueue.errors.JobNotFoundError` for an unknown job (or one
    reaped meanwhile), :class:`~zkqueue.errors.WaitTimeoutError` after ``timeout`` seconds (0: look once)."""
    timeout = check_wait_timeout(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    finished = paths.ended(job_id)
    record_path = paths.record(job_id)
    changed = threading.Event()

    def wake(*_args: Any) -> None:  # a watch fired, or the connection state changed: look again
        changed.set()

    client.add_listener(wake)
    try:
        unseen = 0
        while True:
            changed.clear()
            try:
                job = _look(client, finished, wake, to_job)
                if job is None and client.exists(record_path) is None:
                    unseen += 1  # in neither place: it may just have moved between the two reads
                    if unseen >= 2:
                        raise JobNotFoundError(f"no job {job_id!r} in {paths.root}")
                    continue
            except CONNECTION_ERRORS as exc:  # the listener wakes the wait below when the connection is back
                log.debug("waiting for job %s of %s: %r; looking again once connected", job_id, paths.root, exc)
                job = None
            if job is not None:
                return job
            unseen = 0
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise WaitTimeoutError(f"job {job_id!r} of {paths.root} did not finish within {timeout:g}s")
            if client.connected:
                changed.wait(left)
            else:
                while not client.connected and (deadline is None or time.monotonic() < deadline):
                    changed.clear()
                    if not client.connected:  # (re-checked after clear: a CONNECTED event may have come between)
                        changed.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
    finally:
        client.remove_listener(wake)


def _look(client: KazooClient, finished: list[str], wake: Callable[..., None], to_job: Callable[[Record], Job]
          ) -> Job | None:
    """The finished job, or None, with an exists watch set on both finished paths (sent together)."""
    pending = [client.exists_async(path, watch=wake) for path in finished]
    for path, stat in zip(finished, [p.get() for p in pending]):
        if stat is None:
            continue
        try:
            data, _stat = client.get(path)
        except NoNodeError:  # reaped, or the job was added again, meanwhile: look again (it is not finished)
            return None
        return to_job(Record.decode(data))
    return None
