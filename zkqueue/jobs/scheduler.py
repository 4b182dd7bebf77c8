"""The scheduler of repeating jobs: one elected per job queue path fires the repeats of :mod:`zkqueue.jobs.repeats`.

Every started :class:`~zkqueue.jobs.JobQueue` runs one on a daemon thread (``zkqueue-scheduler-<path>``) that
contends in kazoo's Election at ``<path>/scheduler``; the winner fires, the others wait in the election (a watch on
their predecessor, no requests) and one takes over when the winner's session ends. The active one reads the
repeats (a children watch on ``<path>/repeats`` and a data watch on each), fires what is due, and sleeps until the
earliest next fire time or until a watch says the definitions changed (at most :data:`MAX_WAIT` seconds).

A firing is one multi through the job queue's engine (exactly once through a lost reply): the repeat node's
setData, version-checked, advancing ``last_ms``/``next_ms``, with the job's record and queue item (several due times
of one repeat go in one such multi, up to :data:`COMMIT_CHUNK`; further chunks only after it). A scheduler that
lost a race, or a definition replaced or cancelled meanwhile, fails the version check and adds nothing, so no fire
time is ever handled twice. A fire time whose job id exists already only advances the repeat (counted as
``skipped``): unfinished (a record in ``records/``), or finished (``completed/``, ``dead/``, ``cancelled/``: it fired
before, e.g. before a cancel and a re-add from a machine whose clock is behind); so ``<name>@<fire time>`` never runs
twice while its finished record is kept.

What fires when the scheduler looks at time ``now`` and the repeat's next fire time ``next`` is at or before it:
the *due* times are the schedule's times in ``[next, now]``. A due time before ``since - GRACE_MS`` (1 s,
:data:`~zkqueue.jobs.repeats.GRACE_MS`), where ``since`` is when this scheduler last looked (the start of its
previous pass that completed with every firing committed, or its election), was *missed*: no scheduler was
responsible for it when it came. The others are *on time* and always fire, however late the look (a long pass
over many repeats, a GC pause, a lost version race, a ZooKeeper error retried). Of the missed times:

- ``catch_up="last"`` (default): only the latest fires; the earlier ones are skipped.
- ``catch_up="all"``: every one fires, oldest first (at most the latest :data:`~zkqueue.jobs.repeats.MAX_CATCH_UP`
  = 1000 due times fire; older ones are skipped with a WARNING).
- ``catch_up="none"``: none fires; they are skipped.

Skipped times never fire later: the repeat's next fire time moves past ``now`` in the same multi.

Errors are logged and retried with exponential backoff (tenacity); the thread ends only with :meth:`Scheduler.stop`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from typing import Any, Callable

import tenacity
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, ConnectionClosedError, NoAuthError, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from zkqueue.engine import api
from zkqueue.jobs import repeats, store
from zkqueue.jobs.model import JobState, Record, now_ms
from zkqueue.jobs.repeats import Definition

log = logging.getLogger("zkqueue.jobs.scheduler")

#: Longest sleep of the active scheduler (seconds) when nothing is due sooner: a safety net, not the wake-up.
MAX_WAIT = 60.0
#: The most fire times committed in one atomic group (a chunk of catch-up firings; see Scheduler._fire).
COMMIT_CHUNK = 50
#: About the most bytes of job records in one such group (large params make smaller chunks).
CHUNK_BYTES = 256 * 1024


class Scheduler:
    """Fires the repeats of the job queue at ``paths`` while elected. ``engine`` is the job queue's engine queue
    (its ``commit_puts`` commits the firings); ``on_added(n)`` counts added jobs."""

    def __init__(self, client: KazooClient, paths: store.Paths, engine: Any, acl: Any,
                 on_added: Callable[[int], None] | None = None) -> None:
        self._client = client
        self._paths = paths
        self._engine = engine
        self._acl = acl
        self._on_added = on_added
        self.identifier = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._guard = threading.Lock()
        #: When this scheduler last looked (ms): its election, then the start of each clean pass (see the doc).
        self._since_ms = now_ms()
        self._election: Any = None
        self._thread: threading.Thread | None = None
        self.active = False
        self.counts = {"fired": 0, "skipped": 0}

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Create the repeats and election nodes if need be, and start contending. A client that may not create
        them (an older job queue, credentials without CREATE) runs no scheduler: a WARNING says so."""
        try:
            for path in (repeats.repeats_path(self._paths), repeats.election_path(self._paths)):
                self._client.ensure_path(path, acl=self._acl)
        except NoAuthError:
            log.warning("no scheduler of repeats in %s: these credentials may not create %s and %s",
                        self._paths.root, repeats.repeats_path(self._paths), repeats.election_path(self._paths))
            return
        self._thread = threading.Thread(target=self._run, name=f"zkqueue-scheduler-{self._paths.root}",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Leave the election (or stop firing), and join the thread. Idempotent."""
        with self._guard:
            self._stop.set()
            election = self._election
        if election is not None:
            election.cancel()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("the scheduler of %s did not stop within %.0f s", self._paths.root, timeout)

    # ------------------------------------------------------------------------------------------ the loop
    def _run(self) -> None:
        self._client.add_listener(self._on_state)
        try:
            while not self._stop.is_set():
                try:
                    self._retrying("contending for the scheduler", lambda: False)(self._contend)
                except ConnectionClosedError:  # the client was closed for good: nothing to contend with any more
                    log.info("the client of %s was closed: its scheduler stops", self._paths.root)
                    return
                except Exception:
                    if not self._stop.is_set():  # retried until stop: only a stop ends the retries
                        log.exception("the scheduler of %s failed; contending again", self._paths.root)
        finally:
            self._client.remove_listener(self._on_state)
            log.debug("the scheduler of %s stopped", self._paths.root)

    def _contend(self) -> None:
        """One election round: wait to be elected, then fire until stopped or the session is lost."""
        with self._guard:
            if self._stop.is_set():
                return
            election = self._client.Election(repeats.election_path(self._paths), self.identifier)
            self._election = election
        election.run(self._lead)

    def _session(self) -> int | None:
        client_id = self._client.client_id
        return client_id[0] if client_id else None

    def _lead(self) -> None:
        # Elected in this session: its end (LOST wakes the loop) takes the election node with it. A session lost
        # while on standby is no reason to resign (the election re-created its node in the new session).
        session = self._session()
        log.info("the scheduler of %s is active (%s)", self._paths.root, self.identifier)
        self.active = True
        self._since_ms = now_ms()

        def lost() -> bool:  # a new session; not a suspended connection, whose client_id reads None meanwhile
            current = self._session()
            return current is not None and current != session

        try:
            while not self._stop.is_set() and not lost():
                self._wake.clear()
                delay = self._retrying("firing repeats", lost)(self._pass)
                self._wake.wait(delay)
        finally:
            self.active = False
            if lost() and not self._stop.is_set():
                log.warning("the scheduler of %s lost its session; contending again", self._paths.root)

    def _retrying(self, what: str, give_up: Callable[[], bool]) -> tenacity.Retrying:
        """Retries with exponential backoff (0.2 s doubling up to 15 s, plus up to 0.5 s of jitter), sleeping on
        the stop event, until stopped or ``give_up()``."""

        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            pause = state.next_action.sleep if state.next_action is not None else 0.0
            log.warning("%s in %s failed (attempt %d, next in %.1f s): %r", what, self._paths.root,
                        state.attempt_number, pause, exc,
                        exc_info=exc if state.attempt_number == 1 else None)

        return tenacity.Retrying(
            wait=tenacity.wait_exponential(multiplier=0.2, max=15.0) + tenacity.wait_random(0, 0.5),
            sleep=self._stop.wait,
            retry=tenacity.retry_if_exception(
                lambda exc: not self._stop.is_set() and not give_up() and not isinstance(exc, ConnectionClosedError)),
            before_sleep=before_sleep,
            reraise=True,
        )

    def _on_state(self, state: str) -> None:  # kazoo's event thread: only wakes the loop (see _lead)
        if state == KazooState.LOST:
            self._wake.set()

    def _poke(self, _event: Any) -> None:  # a watch on the repeats: look again
        self._wake.set()

    # ------------------------------------------------------------------------------------------ one look
    def _pass(self) -> float:
        """Fire every due repeat; return the seconds until the earliest next fire time (at most MAX_WAIT). A pass
        that completes with every firing committed moves ``since`` (see the module doc) to its start."""
        started = now_ms()
        earliest: int | None = None
        clean = True
        for definition, version in repeats.load_all(self._client, self._paths, watch=self._poke):
            now = now_ms()
            if definition.next_ms <= now:
                clean = self._fire(definition, version, now) and clean
                upcoming = definition.schedule.next_after(now)
            else:
                upcoming = definition.next_ms
            earliest = upcoming if earliest is None else min(earliest, upcoming)
        if clean:
            self._since_ms = max(self._since_ms, started)
        if earliest is None:
            return MAX_WAIT
        return min(MAX_WAIT, max(0.005, (earliest - now_ms()) / 1000.0 + 0.001))

    def _fire(self, definition: Definition, version: int, now: int) -> bool:
        """Handle the due times of one repeat (see the module doc for which fire); False if a commit failed (the
        next look handles the rest).

        The firings go in chunks of at most :data:`COMMIT_CHUNK`, each ONE atomic group: the repeat node's
        setData (version-checked, the state after the chunk) with the chunk's jobs; chunks commit one after the
        other and stop at the first failure. (Separate groups checked at ``version + i`` would let a later one
        commit after an earlier one failed, over a definition written meanwhile.)"""
        times = self._to_fire(definition, now)
        after = definition.schedule.next_after(now)
        path = repeats.repeat_path(self._paths, definition.name)
        if not times:  # only missed times: skip them, wait for the next one
            advanced = definition.advanced(after, definition.last_ms)
            return self._commit(definition, [([api.SetDataOp(path, advanced.encode(), version)], [])])
        ids = [repeats.job_id(definition.name, t) for t in times]
        unfinished, finished = self._existing(ids)
        entries: list[tuple[str, str, int, Record | None]] = []
        for t, job_id in zip(times, ids):
            if job_id in unfinished or job_id in finished:  # added before: only advance past it
                entries.append(("skip" if job_id in unfinished else "fired", job_id, t, None))
            else:
                entries.append(("fire", job_id, t,
                                Record(id=job_id, state=JobState.QUEUED, params=definition.params, due_ms=t)))
        chunk = max(1, min(COMMIT_CHUNK, CHUNK_BYTES // (len(definition.params) + 512)))
        last = definition.last_ms
        chunks: list[tuple[list[Any], list[tuple[str, str]]]] = []
        for k, first in enumerate(range(0, len(entries), chunk)):
            part = entries[first:first + chunk]
            adds: list[Any] = []
            for kind, _job_id, t, record in part:
                if record is not None:
                    last = t
                    adds.extend(store.add_ops(self._paths, record, [], self._acl))
            end = first + len(part)
            advanced = definition.advanced(times[end] if end < len(times) else after, last)
            chunks.append(([api.SetDataOp(path, advanced.encode(), version + k), *adds],
                           [(kind, job_id) for kind, job_id, _t, _r in part]))
        return self._commit(definition, chunks)

    def _to_fire(self, definition: Definition, now: int) -> list[int]:
        """The due times of ``definition`` that fire at ``now``, oldest first (see the module doc)."""
        schedule, first = definition.schedule, definition.next_ms
        cutoff = min(self._since_ms, now) - repeats.GRACE_MS  # due before it: missed (see the module doc)
        on_time = schedule.latest_between(max(first, cutoff), now, repeats.MAX_CATCH_UP)[0]
        if definition.catch_up == "all":
            times, capped = schedule.latest_between(first, now, repeats.MAX_CATCH_UP)
            if capped:
                log.warning("repeat %r of %s: more than %d fire times were missed since %s; only the latest %d "
                            "fire", definition.name, self._paths.root, repeats.MAX_CATCH_UP,
                            _stamp(first), repeats.MAX_CATCH_UP)
            return times
        latest_missed = schedule.at_or_before(cutoff - 1)
        if latest_missed < first:
            return on_time  # nothing missed
        if definition.catch_up == "last":
            if first < latest_missed:
                log.info("repeat %r of %s: fire times missed from %s are skipped; %s fires (catch_up='last')",
                         definition.name, self._paths.root, _stamp(first), _stamp(latest_missed))
            return [latest_missed, *on_time]
        log.info("repeat %r of %s: fire times missed from %s to %s are skipped (catch_up='none')",
                 definition.name, self._paths.root, _stamp(first), _stamp(latest_missed))
        return on_time

    def _existing(self, ids: list[str]) -> tuple[set[str], set[str]]:
        """The ids among ``ids`` whose job is unfinished (a record in ``records/``), and those whose job finished
        (completed, dead or cancelled): either way that fire time was added before and must not fire again."""
        paths = [(i, p) for i in ids for p in (self._paths.record(i), *self._paths.ended(i))]
        unfinished: set[str] = set()
        finished: set[str] = set()
        for (job_id, path), res in zip(paths, api.multi_read(self._client, [p for _i, p in paths])):
            if isinstance(res, BaseException):
                continue
            (unfinished if path == self._paths.record(job_id) else finished).add(job_id)
        return unfinished, finished

    def _commit(self, definition: Definition, chunks: list[tuple[list[Any], list[tuple[str, str]]]]) -> bool:
        """Commit ``chunks`` (each: one atomic group of ops, and per fire time in it ``fire``/``skip``/``fired``
        and its job id) one after the other; stop at the first that fails (a lost race, a changed definition or an
        id taken meanwhile: the next look reads the repeat again) and return False."""
        for ops, plan in chunks:
            [res] = self._engine.commit_puts([ops])
            if not res.ok:
                raced = isinstance(res.error, (BadVersionError, NoNodeError, NodeExistsError))
                log.log(logging.DEBUG if raced else logging.WARNING,
                        "a firing of repeat %r in %s did not commit (op %s: %r); looking again",
                        definition.name, self._paths.root, res.op, res.error)
                return False
            for kind, job_id in plan:
                if kind == "fire":
                    self.counts["fired"] += 1
                    if self._on_added is not None:
                        self._on_added(1)
                    log.debug("repeat %r of %s fired %s", definition.name, self._paths.root, job_id)
                elif kind == "skip":
                    self.counts["skipped"] += 1
                    log.warning("repeat %r of %s: job %r is still unfinished from an earlier run; this firing "
                                "is skipped", definition.name, self._paths.root, job_id)
                else:
                    self.counts["skipped"] += 1
                    log.info("repeat %r of %s: job %r finished already (this fire time fired before); not fired "
                             "again", definition.name, self._paths.root, job_id)
        return True


def _stamp(ms: int) -> str:
    return repeats.to_datetime(ms).strftime(repeats.ID_FORMAT)


__all__ = ["CHUNK_BYTES", "COMMIT_CHUNK", "MAX_WAIT", "Scheduler"]
