"""The worker runtime: ONE claim loop for every way zkqueue runs jobs on threads, processes or an event loop.

A :class:`Worker` serves one or more job queues with ``concurrency`` slots:

- **Claimers** (a thread per queue) lease due jobs ahead of the free slots, up to ``concurrency + prefetch`` held
  in all, WITHOUT counting an attempt (:meth:`JobQueue.claim_many(count=False)
  <zkqueue.jobs.JobQueue.claim_many>`): a worker that dies costs nothing to the jobs it only held.
- **The dispatcher** (one thread) starts held jobs as slots free: it counts their attempts in one fenced multi
  (:meth:`JobQueue.start_many <zkqueue.jobs.JobQueue.start_many>`), then hands each to its driver (threads,
  processes or an event loop: :mod:`zkqueue.runtime.threads`, :mod:`~zkqueue.runtime.processes`,
  :mod:`~zkqueue.runtime.loop`). It also enforces timeouts: an attempt past the job's ``timeout`` (its record's,
  else the worker's) is failed with :class:`~zkqueue.errors.JobTimeoutError` and its driver told to let it go
  (a thread is replaced, a child killed, a coroutine cancelled).
- **The finisher** (one thread) commits the ends that handlers decided meanwhile, many per engine call, each
  fenced by its job's lease: completed with the result, retried after a backoff, or dead.

Stopping (:meth:`Worker.stop`) is warm first: no more claims, held jobs given back uncounted, running jobs finish
within the timeout; then cold: running jobs are given back (their attempt stays counted) and their handlers let go.
:meth:`Worker.kill` turns a warm stop cold at once. Errors of the loops are logged and followed by a growing pause;
no thread dies silently.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
import threading
import time
from collections import Counter, deque
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol, Sequence

from zkqueue.engine.api import Backoff
from zkqueue.errors import ConfigurationError, JobTimeoutError, QueueClosedError
from zkqueue.jobs import hooks
from zkqueue.jobs.model import Job, check_timeout
from zkqueue.jobs.queue import DEFAULT_STOP_TIMEOUT, JobQueue
from zkqueue.jobs.running import UNSET, RunningJob
from zkqueue.jobs.scope import HeldJob, finish_many, release_many
from zkqueue.runtime.attempt import GIVEN_BACK, RAN, TIMED_OUT, Attempt

log = logging.getLogger("zkqueue.runtime.worker")

#: Seconds one claim waits for a due job before the claimer looks at stop() again.
CLAIM_WAIT = 0.5
#: Jobs held ahead of free slots by default: ``max(concurrency, MIN_PREFETCH)``. A claim costs a few round trips
#: whatever its size, so a worker of few slots and short jobs claims more than its slots at a time; held jobs have
#: no attempt counted, so a worker that dies costs them nothing.
MIN_PREFETCH = 32
#: Deadlines of ended attempts kept beyond twice the running ones before they are dropped (see Worker._begun).
_DEADLINE_SLACK = 64
#: Handlers whose mean run is at most this many seconds get their jobs claimed under block leases (a lock per 64
#: jobs instead of a lock and a fence per job). A job that runs long then holds back the rest of its block.
BLOCK_LEASE_HANDLER_SECONDS = 0.25


def _on_event_loop() -> bool:
    """Whether this thread runs an asyncio event loop now (a blocking call here would stall every job on it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Driver(Protocol):
    """Where attempts run (see the module docs). ``submit`` must not block: the worker only submits into free
    slots. ``abandon`` is told about an attempt settled without its handler (timeout, cold stop)."""

    name: str

    def start(self, concurrency: int) -> None: ...

    def submit(self, attempt: Attempt) -> None: ...

    def abandon(self, attempt: Attempt) -> None: ...

    def cancel(self, attempt: Attempt) -> None:
        """A cancel of ``attempt``'s job was requested: stop its handler if this driver can (an event loop cancels
        the coroutine); a sync handler sees ``job.cancel_requested`` instead."""

    def close(self, wait: float | None = None) -> None: ...


@dataclass(frozen=True)
class Route:
    """How one job runs: on ``driver``, as ``call(job)``; ``policy``: its retry policy if not the queue's.

    ``end``: for a layer that commits its jobs' ends in multis of its own (flows: the hand-off), ``end(attempt)``
    commits the end of each attempt settled by its handler (:attr:`Attempt.result` or :attr:`Attempt.error`) or by
    its timeout (a :class:`~zkqueue.errors.JobTimeoutError`), instead of the runtime; it is called once per attempt,
    on the handler's thread (the attempt counts as running until it returns, so a stop waits for it), or for a
    timeout on the finisher thread. What it raises gives the job back. An attempt given back on a cold stop is
    released by the runtime as any other.

    ``end_executor``: where ``end`` runs for an attempt settled by its handler, instead of the handler's thread,
    which must not block when it is an event loop's (the asyncio driver's); the attempt still counts as running
    until ``end`` returns.

    ``timeout``: seconds an attempt may run when the job's record has no timeout of its own (a task's; None: the
    worker's)."""

    driver: Driver
    call: Callable[[Job], Any]
    policy: Any = None
    end: Callable[[Attempt], None] | None = None
    timeout: float | None = None
    end_executor: Executor | None = None


#: Decides each started job's route: ``route(queue, job)``. What it raises fails that attempt.
Router = Callable[[JobQueue, Job], Route]


#: The pause of a claimer or the dispatcher after errors in a row: 0.1 s doubling up to 5 s.
ERROR_BACKOFF = Backoff(initial=0.1, maximum=5.0)


def _pause(failures: int) -> float:
    """Seconds to pause after ``failures`` errors in a row (:data:`ERROR_BACKOFF`)."""
    return ERROR_BACKOFF.delay(failures)


class Worker:
    """Runs the jobs of ``queues`` (see the module docs). ``route(queue, job)`` says where and how each runs.

    ``concurrency``: jobs running at once; ``prefetch``: jobs held ahead of free slots (default
    ``max(concurrency, MIN_PREFETCH)``; held without an attempt counted); ``timeout``: seconds an attempt may run
    when its job has no ``timeout`` of its own (None: no limit); ``max_jobs``: stop after starting that many;
    ``block_leases``: claim under block leases (None: while handlers average at most :data:`BLOCK_LEASE_HANDLER_SECONDS`); ``log_jobs``: an INFO line as each
    job starts and ends. ``start_ahead``: jobs held ahead whose attempts the dispatcher counts with those it starts
    (at most ``prefetch``; 0 by default), so that slots freed while a count's multi is under way are filled at
    once: for handlers far shorter than a round trip (flow steps, short tasks). It counts ahead only while the
    handlers average at most :data:`BLOCK_LEASE_HANDLER_SECONDS`, only jobs that keep an attempt after this one
    (so a worker that dies with it counted costs a job an attempt, never its last), and never for a rate-limited
    queue. Such a job given back on a stop is uncounted again; only a worker that dies leaves its attempt counted.
    Start it with :meth:`start` (or ``with``); :meth:`stop` drains it.
    """

    def __init__(self, queues: Sequence[JobQueue], route: Router, drivers: Sequence[Driver], *,
                 concurrency: int = 1, prefetch: int | None = None, timeout: float | None = None,
                 max_jobs: int | None = None, block_leases: bool | None = None, name: str = "zkqueue",
                 log_jobs: bool = False, start_ahead: int = 0) -> None:
        if not queues:
            raise ConfigurationError("a worker needs at least one job queue")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")
        prefetch = max(concurrency, MIN_PREFETCH) if prefetch is None else prefetch
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ConfigurationError(f"prefetch must be an int >= 0 or None, got {prefetch!r}")
        if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1):
            raise ConfigurationError(f"max_jobs must be an int >= 1 or None, got {max_jobs!r}")
        if isinstance(start_ahead, bool) or not isinstance(start_ahead, int) or start_ahead < 0:
            raise ConfigurationError(f"start_ahead must be an int >= 0, got {start_ahead!r}")
        self.queues = list(queues)
        self.start_ahead = min(start_ahead, prefetch) if max_jobs is None else 0
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.max_jobs = max_jobs
        self._route = route
        self._drivers = list(drivers)
        self._timeout = check_timeout(timeout)
        self._block_leases = block_leases
        self._name = name
        self._log_jobs = log_jobs
        self._cond = threading.Condition(threading.RLock())
        self._ready: deque[tuple[JobQueue, HeldJob]] = deque()  # held ahead, not started
        self._running: set[Attempt] = set()
        self._starting = 0  # jobs the dispatcher is starting now
        # Rate-limited queues at their limit (by id): no job of theirs starts before this monotonic time; and the
        # admissions of starts that failed in a row (by id), for their pause. The dispatcher's own.
        self._rate_wait: dict[int, float] = {}
        self._rate_failures: dict[int, int] = {}
        self._ends: list[tuple[HeldJob, Any]] = []  # decided, to commit
        # Give-backs of a stop (cold: attempt counted; unstarted: uncounted) wait until the claimers have ended, so
        # a claim still waiting for jobs cannot take them again in the moment before the stop joins it.
        self._releases: list[HeldJob] = []
        self._returns: list[tuple[HeldJob, Any]] = []
        self._claimers_left = 0
        self._claims_ended = threading.Event()
        self._own_ends: list[tuple[Attempt, Callable[[Attempt], None]]] = []  # timed out, for Route.end to commit
        #: Attempts of async handlers that ended after a cancel request: whether the request is still there is a
        #: ZooKeeper read, which the finisher makes (never the event loop), then settles them.
        self._to_settle: list[Attempt] = []
        self._committing = False
        self._deadlines: list[tuple[float, int, Attempt]] = []
        self._seq = itertools.count()
        self._started_jobs = 0
        #: The most jobs that ran at once.
        self.peak_in_flight = 0
        self._mean_run: float | None = None
        self._stopping = threading.Event()  # no more claims or starts
        self._cold = threading.Event()  # give running jobs back now
        self._finishing = threading.Event()  # the finisher may end once all is committed
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.counts: Counter[str] = Counter()
        self._started = False
        self._progress: set[RunningJob] = set()  # progress values waiting to be written, by the finisher
        self._unlisten: list[Callable[[], None]] = []

    # ------------------------------------------------------------------------------------------ life cycle
    def start(self) -> Worker:
        """Start the drivers and the loops (once)."""
        with self._cond:
            if self._started:
                raise ConfigurationError("this worker was started already")
            self._started = True
        for driver in self._drivers:
            driver.start(self.concurrency)
        self._unlisten = [q.on_cancel_requests(functools.partial(self._cancels_requested, q)) for q in self.queues]
        for queue in self.queues:
            queue.attach(self)  # closing the queue stops this worker first
        self._claimers_left = len(self.queues)
        if not self.queues:
            self._claims_ended.set()
        self._threads = [threading.Thread(target=self._guard, args=(self._claim_loop, q), daemon=True,
                                          name=f"{self._name}-claims-{i}") for i, q in enumerate(self.queues)]
        self._dispatcher = threading.Thread(target=self._guard, args=(self._dispatch_loop,), daemon=True,
                                            name=f"{self._name}-dispatch")
        self._finisher = threading.Thread(target=self._guard, args=(self._finish_loop,), daemon=True,
                                          name=f"{self._name}-finish")
        for thread in [*self._threads, self._dispatcher, self._finisher]:
            thread.start()
        return self

    def __enter__(self) -> Worker:
        return self if self._started else self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    @property
    def stopping(self) -> bool:
        """stop() was called, or ``max_jobs`` jobs were started and have ended."""
        return self._stopping.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Until the worker has stopped (or ``timeout`` seconds); whether it has."""
        return self._stopped.wait(timeout)

    def kill(self) -> None:
        """Make a stop cold now: running jobs are given back (their attempt stays counted). Safe in a signal
        handler; call :meth:`stop` (or let the one under way finish) to end the worker."""
        self._cold.set()
        self._stopping.set()

    def stop(self, timeout: float | None = DEFAULT_STOP_TIMEOUT) -> bool:
        """Stop: no more claims; jobs held ahead go back uncounted; running jobs finish within ``timeout`` seconds
        (None: as long as they take), then are given back (cold). Their ends are committed before it returns.
        Idempotent. True when every running job finished (a warm stop)."""
        with self._stop_lock:
            if self._stopped.is_set() or not self._started:
                self._stopped.set()
                return not self._cold.is_set()
            self._stopping.set()
            with self._cond:
                self._cond.notify_all()
            for thread in self._threads:
                thread.join()
            self._give_back_ready()
            deadline = None if timeout is None else time.monotonic() + timeout
            warm = self._drain(deadline)  # the dispatcher still enforces timeouts meanwhile
            if not warm:
                self._cold.set()  # jobs whose start is being committed now are returned too, not launched
                self._give_back_running()
            self._dispatcher.join()  # it ends once nothing runs
            self._finishing.set()
            with self._cond:
                self._cond.notify_all()
            self._finisher.join()
            for driver in self._drivers:
                driver.close(wait=0.5 if warm else 0.0)
            for unlisten in self._unlisten:
                unlisten()
            for queue in self.queues:
                queue.detach(self)
            self._stopped.set()
            log.debug("worker %s stopped (%s): %s", self._name, "warm" if warm else "cold", dict(self.counts))
            return warm

    def _drain(self, deadline: float | None) -> bool:
        """Wait for the running jobs to end (each wait short, so a kill() is seen at once)."""
        while True:
            with self._cond:
                if not self._running and not self._starting:
                    return True
                if self._cold.is_set() or (deadline is not None and time.monotonic() >= deadline):
                    return False
                self._cond.wait(0.1)

    def _guard(self, loop: Callable[..., None], *args: Any) -> None:
        """Run a loop thread; anything that escapes it is logged loudly, and the worker stops cold."""
        try:
            loop(*args)
        except BaseException:
            log.critical("worker %s: %s died; the worker stops", self._name, threading.current_thread().name,
                         exc_info=True)
            self.kill()
            raise

    # ------------------------------------------------------------------------------------------ claims
    def _room(self, ahead: int) -> int:
        """How many jobs a claim may take now: free slots, plus ``ahead`` jobs held ahead of them."""
        held = len(self._ready) + len(self._running) + self._starting
        room = self.concurrency + ahead - held
        if self.max_jobs is not None:
            room = min(room, self.max_jobs - self._started_jobs - len(self._ready) - self._starting)
        return room

    def _claim_loop(self, queue: JobQueue) -> None:
        try:
            self._claim_until_stopped(queue)
        finally:
            with self._cond:
                self._claimers_left -= 1
                if self._claimers_left <= 0:
                    self._claims_ended.set()
                self._cond.notify_all()

    def _claim_until_stopped(self, queue: JobQueue) -> None:
        failures = 0
        # A claim costs a few round trips whatever its size: while the jobs held cover the next round of slots, the
        # claimer waits until half its room is free, instead of claiming a job or two each time a slot frees.
        ahead = self.prefetch
        worth = max(1, (self.concurrency + ahead) // 2)
        rate = queue.rate_limit
        if rate is not None:
            # A rate limit admits a worker's jobs as they start (see _admit_starts), a slice of budget per write:
            # such a queue is claimed one slice (or one round of slots) ahead, a slice at a time while jobs are
            # still held, so that a process does not hold many more jobs than it may start soon.
            ahead = min(self.prefetch, max(self.concurrency, rate.slice_cap))
            worth = min(rate.slice_cap, self.concurrency + ahead)
        while not self._stopping.is_set():
            with self._cond:
                room = self._room(ahead)
                if room <= 0 or (room < worth and len(self._ready) >= min(worth, self.concurrency)):
                    self._cond.wait(0.5)
                    continue
            try:
                helds = queue.claim_many(room, CLAIM_WAIT, block_leases=self._short_jobs(), count=False)
            except QueueClosedError:
                log.info("job queue %s closed: its claimer ends", queue.paths.root)
                return
            except Exception:
                failures += 1
                pause = _pause(failures)
                log.warning("claiming jobs of %s failed (%d in a row); again in %.1fs", queue.paths.root, failures,
                            pause, exc_info=True)
                self._stopping.wait(pause)
                continue
            failures = 0
            if helds:
                with self._cond:
                    self._ready.extend((queue, h) for h in helds)
                    self._cond.notify_all()

    @property
    def uses_block_leases(self) -> bool:
        """Whether claims take block leases now (see ``block_leases``)."""
        return self._short_jobs()

    def _short_jobs(self) -> bool:
        if self._block_leases is not None:
            return self._block_leases
        return self._handlers_short()

    def _give_back_ready(self) -> None:
        with self._cond:
            ready, self._ready = list(self._ready), deque()
        by_queue: dict[int, tuple[JobQueue, list[HeldJob]]] = {}
        for queue, held in ready:
            by_queue.setdefault(id(queue), (queue, []))[1].append(held)
        for queue, helds in by_queue.values():
            try:
                queue.give_back(helds)
                self.counts["returned"] += len(helds)
            except Exception:  # their leases end with the session; uncounted, they lose nothing
                log.warning("giving back %d held job(s) of %s failed", len(helds), queue.paths.root, exc_info=True)

    # ------------------------------------------------------------------------------------------ starts, timeouts
    def _dispatch_loop(self) -> None:
        failures = 0
        while True:
            with self._cond:
                expired = self._expired()
                batch: list[tuple[JobQueue, HeldJob]] = []
                launch = 0
                if not self._stopping.is_set():
                    free = self.concurrency - len(self._running)
                    if self.max_jobs is not None:
                        free = min(free, self.max_jobs - self._started_jobs)
                    ahead = self.start_ahead if free > 0 else 0
                    now = time.monotonic()
                    self._rate_wait = {q: until for q, until in self._rate_wait.items() if until > now}
                    waiting = set(self._rate_wait)
                    skipped: list[tuple[JobQueue, HeldJob]] = []  # of queues waiting for budget: they stay held
                    while self._ready and free > 0:
                        entry = self._ready.popleft()
                        if id(entry[0]) in waiting:
                            skipped.append(entry)
                            continue
                        batch.append(entry)
                        free -= 1
                    self._ready.extendleft(reversed(skipped))
                    launch = len(batch)
                    # Attempts are counted ahead of free slots, but not for a rate-limited queue: its budget is
                    # spent as jobs start, so a job must not wait between its admission and its start.
                    if ahead and not self._handlers_short():
                        ahead = 0
                    while self._ready and ahead > 0 and self._may_count_ahead(*self._ready[0]):
                        batch.append(self._ready.popleft())
                        ahead -= 1
                    self._starting = len(batch)
                elif not self._running and not self._starting:
                    return  # stopping, and nothing left to time
                if not expired and not batch:
                    wait = self._deadlines[0][0] - time.monotonic() if self._deadlines else 0.5
                    if self._ready and self._rate_wait:  # jobs wait for budget: look again once it may be free
                        wait = min(wait, min(self._rate_wait.values()) - time.monotonic())
                    self._cond.wait(max(0.0, min(wait, 0.5)))
                    continue
            for attempt in expired:
                self._time_out(attempt)
            if batch:
                launched: set[int] = set()
                try:
                    self._start(batch, launched, launch)
                    failures = 0
                except Exception:
                    failures += 1
                    log.warning("starting %d job(s) failed (%d in a row)", len(batch), failures, exc_info=True)
                    release_many([h for _q, h in batch if id(h) not in launched])  # not the ones running
                    self._stopping.wait(_pause(failures))
                finally:
                    with self._cond:
                        self._starting = 0
                        self._cond.notify_all()

    def _handlers_short(self) -> bool:
        """Whether this worker's handlers average at most :data:`BLOCK_LEASE_HANDLER_SECONDS` (whatever its leases)."""
        return self._mean_run is not None and self._mean_run <= BLOCK_LEASE_HANDLER_SECONDS

    @staticmethod
    def _may_count_ahead(queue: JobQueue, held: HeldJob) -> bool:
        """Whether ``held``'s attempt may be counted before a slot is free for it (``start_ahead``): not counted yet,
        not of a rate-limited queue (its budget is spent as jobs start), and an attempt left after this one."""
        if held.counted or getattr(queue, "rate_limited", False):
            return False
        try:
            most = queue.outcomes.policy(held.record).max_attempts
        except Exception:  # noqa: BLE001 - a record the policy cannot read: it is counted as it starts
            return False
        return held.record.attempts + 1 < most

    def _expired(self) -> list[Attempt]:
        now = time.monotonic()
        out = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _at, _n, attempt = heapq.heappop(self._deadlines)
            if not attempt.settled:
                out.append(attempt)
        return out

    def _time_out(self, attempt: Attempt) -> None:
        error = JobTimeoutError(f"job {attempt.job.id} ran past its timeout of {attempt.timeout:g} s")
        if attempt.settle(TIMED_OUT, error=error):
            log.warning("job %s of %s ran past its timeout of %g s: the attempt fails", attempt.job.id,
                        attempt.source.paths.root, attempt.timeout)
            attempt.driver.abandon(attempt)

    def _start(self, batch: list[tuple[JobQueue, HeldJob]], launched: set[int], launch: int | None = None) -> None:
        """Count the attempts of ``batch`` (one engine call per queue) and launch the jobs that may run, the first
        ``launch`` of them (None: all); the others, counted ahead (``start_ahead``), go back to the head of the
        jobs held. The ids of the jobs handed on (launched, held again, or ended at once) go into ``launched``."""
        by_queue: dict[int, tuple[JobQueue, list[HeldJob]]] = {}
        for queue, held in batch:
            if held.counted and getattr(queue, "paused", False):  # counted ahead, and paused since: not started
                launched.add(id(held))
                with self._cond:
                    self.counts["returned"] += 1
                    self._returns.append((held, queue.outcomes.unstarted(held.claimed)))
                    self._cond.notify_all()
                continue
            by_queue.setdefault(id(queue), (queue, []))[1].append(held)
        runnable: list[tuple[JobQueue, HeldJob]] = []
        for queue, helds in by_queue.values():
            admitted = self._admit_starts(queue, helds, launched)
            started = queue.start_many(admitted) if admitted else []
            launched.update(id(h) for h in admitted)  # started, or given back by start_many
            if len(admitted) > len(started) and getattr(queue, "rate_limited", False):
                queue.unused_starts(len(admitted) - len(started))
            runnable.extend((queue, h) for h in started)
        if launch is not None and len(runnable) > launch:
            order = {id(h): i for i, (_q, h) in enumerate(batch)}
            runnable.sort(key=lambda pair: order[id(pair[1])])
            runnable, again = runnable[:launch], runnable[launch:]
            with self._cond:
                if self._stopping.is_set():  # the held ones were given back already: these go back uncounted
                    self.counts["returned"] += len(again)
                    self._returns.extend((h, q.outcomes.unstarted(h.claimed)) for q, h in again)
                else:
                    self._ready.extendleft(reversed(again))
                self._cond.notify_all()
        for queue, held in runnable:
            try:
                self._launch(queue, held)
            except Exception:  # a bug of ours, or a read that waited too long: it goes back uncounted
                log.exception("launching job %s of %s failed; it is given back", held.record.id,
                              queue.paths.root)
                with self._cond:
                    self.counts["returned"] += 1
                    self._ends.append((held, queue.outcomes.unstarted(held.claimed)))
                    self._cond.notify_all()

    def _admit_starts(self, queue: JobQueue, helds: list[HeldJob], launched: set[int]) -> list[HeldJob]:
        """The jobs of ``helds`` a rate-limited ``queue`` admits now (all of them for another queue, and the ones
        counted already); the others go back, first in line, held until its budget may free (their ids go into
        ``launched``: handed on)."""
        if not getattr(queue, "rate_limited", False):
            return helds
        todo = [h for h in helds if not h.counted]
        admitted = queue.admit_starts(len(todo), self._stopping) if todo else 0
        if admitted >= len(todo):
            self._rate_failures.pop(id(queue), None)
            return helds
        later = todo[admitted:]
        keep = {id(h) for h in later}
        free_in = queue.rate_free_in()
        if admitted or free_in > 0:  # some admitted (the rest are asked again at once), or at the limit
            self._rate_failures.pop(id(queue), None)
            pause = free_in if not admitted else 0.0
        else:  # no answer in time, or the worker stops: a pause growing as ERROR_BACKOFF, no hot loop
            failures = self._rate_failures[id(queue)] = self._rate_failures.get(id(queue), 0) + 1
            pause = _pause(failures)
        with self._cond:
            if self._stopping.is_set():  # the jobs held were given back already: these go back uncounted too
                self.counts["returned"] += len(later)
                self._returns.extend((h, queue.outcomes.unstarted(h.claimed)) for h in later)
            else:
                if pause > 0:
                    self._rate_wait[id(queue)] = time.monotonic() + pause
                self._ready.extendleft((queue, h) for h in reversed(later))
            self._cond.notify_all()
        launched.update(keep)
        return [h for h in helds if id(h) not in keep]

    def _launch(self, queue: JobQueue, held: HeldJob) -> None:
        try:
            job = queue.outcomes.job(held.record)
            route = self._route(queue, job)
        except Exception as exc:  # undecodable params, an unknown task: the attempt fails at once
            self.counts["failed"] += 1
            self._end(held, queue.outcomes.failure(held.claimed, exc))
            return
        if route.end is None and queue.cancel_requested(job.id, confirm=True):  # cancelled while it waited: unrun
            self.counts["cancelled"] += 1
            self._end(held, queue.outcomes.cancelled(held.claimed))
            return
        timeout = next((t for t in (held.record.timeout, route.timeout, self._timeout) if t is not None), None)
        on_settled = (self._settled if route.end is None
                      else functools.partial(self._settled, end=route.end, executor=route.end_executor))
        attempt = Attempt(queue, held, job, route.call, timeout, on_settled, route.policy, route.driver,
                          on_begin=self._begun)
        if hooks.installed is not None:  # a job hook (zkqueue.otel) follows the attempt (see zkqueue.jobs.hooks)
            hooks.follow(attempt, queue.paths.root, getattr(route.driver, "name", ""))
        if route.end is None:  # a layer that ends its jobs itself (flows) takes no cancels
            attempt.running = job._running = RunningJob(
                job.id, self._progress_waits, functools.partial(queue.write_progress, held),
                on_cancel=functools.partial(route.driver.cancel, attempt))
        with self._cond:
            if self._cold.is_set():  # a cold stop came while its attempt was being counted: it never runs
                self.counts["returned"] += 1
                self._returns.append((held, queue.outcomes.unstarted(held.claimed)))
                self._cond.notify_all()
                return
            self._running.add(attempt)
            self.peak_in_flight = max(self.peak_in_flight, len(self._running))
            self._started_jobs += 1
        try:
            route.driver.submit(attempt)
        except Exception:  # e.g. its event loop is closed: the worker cannot run jobs any more and winds down
            log.critical("job %s of %s could not be handed to the %s driver; it is given back uncounted and the "
                         "worker stops", job.id, queue.paths.root, getattr(route.driver, "name", "?"), exc_info=True)
            with self._cond:
                self._running.discard(attempt)
                self._started_jobs -= 1
                self.counts["returned"] += 1
                self._returns.append((held, queue.outcomes.unstarted(held.claimed)))
                self._stopping.set()  # no more claims: the claimers end, then the give-backs are committed
                self._cond.notify_all()
            return
        if attempt.running is not None and queue.cancel_requested(job.id):  # requested before it started
            attempt.running.request_cancel()

    def _cancels_requested(self, queue: JobQueue, ids: frozenset[str]) -> None:
        """Cancels of the jobs ``ids`` of ``queue`` were requested (on kazoo's event thread): tell their runs."""
        with self._cond:
            runs = [a.running for a in self._running if a.source is queue and a.job.id in ids and a.running]
        for run in runs:
            run.request_cancel()

    def _progress_waits(self, run: RunningJob) -> None:
        """A handler reported progress: the finisher writes it when its interval allows."""
        with self._cond:
            self._progress.add(run)
            self._cond.notify_all()

    def _begun(self, attempt: Attempt) -> bool:
        """The driver calls ``attempt``'s handler now: its timeout runs from here (a process pool's child may have
        been starting until then). The job's start line is logged here, off the dispatcher's thread. False (and
        the attempt given back) when a cold stop came before it began: its handler is not called."""
        if self._cold.is_set():
            if attempt.settle(GIVEN_BACK):
                log.info("job %s of %s is given back unrun (cold stop before it began)", attempt.job.id,
                         attempt.source.paths.root)
            return False
        if self._log_jobs:
            log.info("%s %s[%s] started (attempt %d)", attempt.source.paths.root, attempt.job.task or "job",
                     attempt.job.id, attempt.job.attempts)
        if attempt.timeout is None:
            return True
        with self._cond:
            if len(self._deadlines) > 2 * len(self._running) + _DEADLINE_SLACK:
                # attempts that ended long before their deadline would stay (with their job and result) until it
                # passed: throughput x timeout of them; drop the settled ones now and then (O(n), rarely)
                self._deadlines = [d for d in self._deadlines if not d[2].settled]
                heapq.heapify(self._deadlines)
            heapq.heappush(self._deadlines, (attempt.started + attempt.timeout, next(self._seq), attempt))
            self._cond.notify_all()
        return True

    # ------------------------------------------------------------------------------------------ ends
    def _settled(self, attempt: Attempt, end: Callable[[Attempt], None] | None = None,
                 executor: Executor | None = None) -> None:
        """An attempt's outcome is decided (on the settling thread): its end joins the next commit, or ``end``
        (:attr:`Route.end`) commits it, on ``executor`` (:attr:`Route.end_executor`) if its handler settled it."""
        if executor is not None and end is not None and attempt.how == RAN:
            try:
                executor.submit(self._settled, attempt, end)
                return
            except RuntimeError:  # the executor is shut down: end it here after all
                log.warning("the end of job %s is committed on its handler's thread (its executor is shut down)",
                            attempt.job.id)
        run = attempt.running
        if run is not None and run.cancel_requested and _on_event_loop():
            with self._cond:  # the cancel request's confirming read blocks: the finisher makes it
                self._to_settle.append(attempt)
                self._cond.notify_all()
            return
        queue, held = attempt.source, attempt.held
        own = end if attempt.how != GIVEN_BACK else None  # the route commits this end itself
        ran_for = time.monotonic() - attempt.started
        if attempt.how == RAN:
            self._note_run(ran_for)
        if run is not None:
            progress = run.close()  # waits for a progress write under way; no more after it
            if progress is not UNSET:
                held.record = replace(held.record, progress=progress)  # the last value lands with the end
        try:
            if attempt.how == GIVEN_BACK and not attempt.began:  # its handler never ran: uncounted again
                completion = queue.outcomes.unstarted(held.claimed)
                self.counts["returned"] += 1
            elif attempt.how == GIVEN_BACK:
                completion = None
                self.counts["given_back"] += 1
            elif run is not None and run.cancel_requested and queue.cancel_requested(attempt.job.id, confirm=True):
                # ended after a cancel request (still there: the end deletes it): whatever it returned
                self.counts["cancelled"] += 1
                completion = queue.outcomes.cancelled(held.claimed)
            elif own is not None:
                self.counts["timed_out" if attempt.how == TIMED_OUT else "failed" if attempt.error is not None
                            else "completed"] += 1
                completion = None
            elif attempt.error is not None:
                self.counts["timed_out" if attempt.how == TIMED_OUT else "failed"] += 1
                completion = (queue.outcomes.failure(held.claimed, attempt.error, policy=attempt.policy)
                              if attempt.policy is not None else queue.outcomes.failure(held.claimed, attempt.error))
            else:
                self.counts["completed"] += 1
                completion = queue.outcomes.success(held.claimed, attempt.result)
        except Exception:  # a bug of ours: give the job back rather than lose it
            log.exception("deciding the end of job %s failed; it is given back", attempt.job.id)
            completion = None
        try:
            if own is not None and attempt.how == RAN:
                self._end_itself(attempt, own)
        finally:  # whatever the route's end raised, the slot is freed and the end queued: a stop never hangs on it
            with self._cond:
                self._running.discard(attempt)
                if own is not None:
                    if attempt.how != RAN:  # timed out (on the dispatcher): the finisher commits it
                        self._own_ends.append((attempt, own))
                elif completion is None:
                    self._releases.append(held)
                elif attempt.how == GIVEN_BACK:
                    self._returns.append((held, completion))
                else:
                    self._ends.append((held, completion))
                if self.max_jobs is not None and self._started_jobs >= self.max_jobs and not self._running:
                    self._stopping.set()  # max_jobs started and ended: the worker is done
                self._cond.notify_all()
        if self._log_jobs:  # once its slot is free: the dispatcher need not wait for the line
            log.info("%s %s[%s] %s in %.3fs%s", queue.paths.root, attempt.job.task or "job", attempt.job.id,
                     attempt.how if attempt.how != RAN else "cancelled" if run is not None and run.cancel_requested
                     else "failed" if attempt.error is not None else "completed",
                     ran_for, f": {type(attempt.error).__name__}: {attempt.error}" if attempt.error is not None else "")

    def _end_itself(self, attempt: Attempt, end: Callable[[Attempt], None]) -> None:
        try:
            end(attempt)
        except Exception:
            log.exception("ending job %s failed; it is given back", attempt.job.id)
            try:
                release_many([attempt.held])
            except Exception:  # its lease ends with the session
                log.warning("giving back job %s failed", attempt.job.id, exc_info=True)

    def _end(self, held: HeldJob, completion: Any) -> None:
        with self._cond:
            self._ends.append((held, completion))
            self._cond.notify_all()

    def _note_run(self, seconds: float) -> None:
        self._mean_run = seconds if self._mean_run is None else 0.95 * self._mean_run + 0.05 * seconds

    def _give_back_running(self) -> None:
        with self._cond:
            running = list(self._running)
        for attempt in running:
            if attempt.settle(GIVEN_BACK):
                log.warning("job %s of %s is given back unfinished (cold stop)", attempt.job.id,
                            attempt.source.paths.root)
                attempt.driver.abandon(attempt)

    def _progress_due(self) -> tuple[list[RunningJob], float]:
        """The progress values to write now, and in how many seconds the next one may be written (at most 0.5)."""
        now = time.monotonic()
        due, wait = [], 0.5
        for run in list(self._progress):
            left = run.due_in(now)
            if left is None:  # written, or its attempt ended (its end folds the value in)
                self._progress.discard(run)
            elif left <= 0:
                due.append(run)
                self._progress.discard(run)
            else:
                wait = min(wait, left)
        return due, wait

    def _finish_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    writes, wait = self._progress_due()
                    if writes or self._ends or self._own_ends or self._to_settle or (
                            self._claims_ended.is_set() and (self._releases or self._returns)):
                        break
                    if self._finishing.is_set():
                        return
                    self._cond.wait(wait)
                settle, self._to_settle = self._to_settle, []
                if settle:
                    self._committing = True
            for attempt in settle:  # (routes that end their jobs themselves take no cancels) their ends join below
                self._settled(attempt)
            with self._cond:
                ends, self._ends = self._ends, []
                own, self._own_ends = self._own_ends, []
                releases: list[HeldJob] = []
                if self._claims_ended.is_set():
                    releases, self._releases = self._releases, []
                    ends += self._returns
                    self._returns = []
                self._committing = True
            for run in writes:  # each fenced by its job's lease; a value reported meanwhile waits for the next
                run.write()
            try:
                for attempt, end in own:
                    self._end_itself(attempt, end)
                if ends:
                    finish_many(ends)
                if releases:
                    release_many(releases)
            except Exception:  # e.g. the job queue was closed: the leases end with the session
                log.warning("committing the ends of %d job(s) failed", len(ends) + len(releases), exc_info=True)
            finally:
                with self._cond:
                    self._committing = False
                    self._cond.notify_all()

    # ------------------------------------------------------------------------------------------ looking
    def idle(self) -> bool:
        """Nothing held, running or waiting to be committed here."""
        with self._cond:
            return not (self._ready or self._running or self._starting or self._ends or self._releases
                        or self._returns or self._own_ends or self._to_settle or self._committing)

    def running_ids(self) -> list[str]:
        """Ids of the jobs running now."""
        with self._cond:
            return sorted(a.job.id for a in self._running)

    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._running)

    def stats(self) -> dict[str, int]:
        """``completed``, ``failed``, ``timed_out``, ``given_back`` (cold stop), ``returned`` (held, given back
        unstarted), ``cancelled`` (ended after a cancel request), ``in_flight``, ``held`` (claimed ahead) and ``started``."""
        with self._cond:
            return {**{k: self.counts.get(k, 0) for k in ("completed", "failed", "timed_out", "given_back",
                                                            "returned", "cancelled")},
                    "in_flight": len(self._running), "held": len(self._ready), "started": self._started_jobs}


__all__ = ["BLOCK_LEASE_HANDLER_SECONDS", "CLAIM_WAIT", "DEFAULT_STOP_TIMEOUT", "Driver", "Route", "Router",
           "Worker"]
