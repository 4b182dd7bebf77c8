"""Rate limits of a job queue: at most ``max_jobs`` jobs started (claimed) per ``per`` seconds, across every worker
of the queue in every process.

```python
from zkqueue.jobs import JobQueue, RateLimit
jq = JobQueue(client, "/jobs/mail", rate_limit=RateLimit(max_jobs=100, per=1.0))
```

**How.** The budget lives in one node, ``<job queue>/rate``: a log of the slices of budget granted lately, as
``[bucket start ms, jobs]`` pairs (grants of one bucket of ``per / 100`` seconds share a pair, so the node stays
small). A worker that wants to start ``n`` jobs it holds (or a pull that wants to claim ``n`` due jobs) takes a
*slice* of up to ``max(1, max_jobs // 8)`` jobs (a worker asks a whole slice, a pull no more than ``n``; neither
more than is free) with ONE version-checked ``setData`` of that node (a lost race reads it again and retries): about
one write per slice, not per job. What a process took and did not use (fewer jobs ready, a pull's claim race lost)
stays in a pool of that process for :data:`TOKEN_LIFETIME` of the slice, used by its next admissions without another
write.

**When budget is spent.** A worker (:mod:`zkqueue.runtime`) claims jobs ahead of its free slots without budget and
spends it as a job starts (:meth:`JobQueue.admit_starts <zkqueue.jobs.JobQueue.admit_starts>`), in the moment its
attempt is counted: a job held ahead may wait for a slot for any time, and spent at its claim, its budget's window
would be long gone when it started. A pull (``claim``, ``take``, consumers) spends it as it claims.

**Why a log and not a counter per window.** A counter per aligned window lets ``max_jobs`` start at the end of
one window and ``max_jobs`` more at the start of the next: twice the limit within ``per`` seconds. A grant here
counts against every grant of the last ``per + lifetime + bucket`` seconds, so ANY window of ``per`` seconds
(sliding, not only aligned) holds at most ``max_jobs`` starts: a token granted at ``t`` is used by ``t + lifetime``,
so two grants whose starts fall in one window of ``per`` seconds are less than ``per + lifetime`` apart, and the
later one saw the earlier one in the log. The price: with jobs always waiting, about ``per / (per + lifetime +
bucket)`` of ``max_jobs`` (95% with the defaults) start per ``per`` seconds.

**At the limit** a worker sleeps until the oldest grant leaves the log (an Event wait that a close ends at once);
it never polls ZooKeeper: that time is remembered, so a caller waiting in slices (the consumer loop waits at most
about a second at a time, acking what it ran in between) reads the rate node again only once it has passed. ZooKeeper errors while taking a slice are retried with a growing pause (tenacity), logged, and
end only when the queue closes (or a pull's timeout passes).

The clocks of the workers' machines must agree (NTP): the log is in wall-clock time, and a clock ``d`` seconds
ahead lets its process see grants up to ``d`` seconds too old as expired. Every worker of a queue should use the
same :class:`RateLimit`; each checks the log against its own.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import tenacity
from kazoo.exceptions import BadVersionError, ConnectionClosedError, KazooException, NodeExistsError, NoNodeError

from zkqueue.errors import ConfigurationError

log = logging.getLogger("zkqueue.jobs.rate")

#: Seconds a granted token may be used after its grant (at most this fraction of ``per``; see the module docs).
TOKEN_LIFETIME = 0.25
TOKEN_LIFETIME_FRACTION = 0.04
#: The log's time resolution: ``per / BUCKETS_PER_WINDOW`` (at least 1 ms).
BUCKETS_PER_WINDOW = 100
#: The largest slice is ``max(1, max_jobs // SLICE_DIVISOR)``: several workers share a window's budget.
SLICE_DIVISOR = 8
#: Pauses between tries after a ZooKeeper error while taking a slice (seconds, growing, jittered).
_ERROR_PAUSE_FIRST = 0.05
_ERROR_PAUSE_MAX = 5.0
#: How often a request to the rate node waiting for its answer (kazoo holds requests while it reconnects) looks
#: whether the queue closes or the caller's timeout passed.
_ANSWER_POLL = 0.1


class _Stopped(Exception):
    """The queue closes, or the caller's timeout passed, while a request waits for its answer."""


@dataclass(frozen=True)
class RateLimit:
    """At most ``max_jobs`` jobs started (claimed) per ``per`` seconds, across every worker of a job queue."""

    max_jobs: int
    per: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.max_jobs, bool) or not isinstance(self.max_jobs, int) or self.max_jobs < 1:
            raise ConfigurationError(f"RateLimit.max_jobs must be an int >= 1, got {self.max_jobs!r}")
        if (isinstance(self.per, bool) or not isinstance(self.per, (int, float)) or not math.isfinite(self.per)
                or self.per <= 0):
            raise ConfigurationError(f"RateLimit.per must be a number of seconds > 0, got {self.per!r}")

    @property
    def slice_cap(self) -> int:
        """The most jobs one slice grants."""
        return max(1, self.max_jobs // SLICE_DIVISOR)


class _Granted:
    """The answer of one try at the rate node: ``jobs`` granted at wall-clock ``at_ms`` (the time the log records),
    or 0 and the wall-clock ms when budget frees (``free_at_ms``)."""

    __slots__ = ("jobs", "at_ms", "free_at_ms")

    def __init__(self, jobs: int, at_ms: int = 0, free_at_ms: int = 0) -> None:
        self.jobs = jobs
        self.at_ms = at_ms
        self.free_at_ms = free_at_ms


class RateLimiter:
    """One job queue's share of a :class:`RateLimit` in this process: takes slices from the rate node at ``path``
    and hands them to claims (:meth:`admit`, :meth:`unused`). Thread-safe; shared by every worker and pull of
    the job queue in this process."""

    def __init__(self, client: Any, path: str, limit: RateLimit, acl: Sequence[Any] | None = None) -> None:
        self._client = client
        self.path = path
        self.limit = limit
        self._acl = list(acl) if acl is not None else None
        per_ms = limit.per * 1000.0
        self._bucket_ms = max(1, int(per_ms // BUCKETS_PER_WINDOW))
        self._lifetime_ms = max(1, int(min(TOKEN_LIFETIME * 1000.0, per_ms * TOKEN_LIFETIME_FRACTION)))
        # A grant stays in the log this long: per + lifetime + one bucket (see the module docs).
        self._horizon_ms = int(math.ceil(per_ms)) + self._lifetime_ms + self._bucket_ms
        self._lock = threading.Lock()  # the pool and the counters
        self._taking = threading.Lock()  # one slice request at a time from this process
        self._pool: list[list[int]] = []  # [expiry ms, tokens], earliest expiry first
        self._local = threading.local()  # the expiry of the tokens this thread was admitted last
        # When the rate node last said budget frees (wall-clock ms): no budget can free before then (grants only
        # leave the log with time), so waits until then need no read (a consumer waits in slices; see admit).
        self._free_at_ms = 0
        self._counts = {"rate_slices": 0, "rate_waits": 0, "rate_waited_ms": 0, "rate_races": 0,
                        "rate_errors": 0, "rate_tokens_unused": 0, "rate_tokens_expired": 0}

    # ------------------------------------------------------------------------------------------ the seam
    def admit(self, count: int, closing: threading.Event, timeout: float | None = None, *, wait: bool = True) -> int:
        """How many of ``count`` due jobs may be claimed (or started) now (1..count), waiting at the limit until
        budget frees; 0 once ``closing`` is set or ``timeout`` seconds passed first. ``wait=False``: 0 at once at
        the limit (:meth:`free_in` says for how long); a request to the rate node then waits for its answer until
        ``closing`` (a request given up and sent again would keep kazoo from noticing a server that stopped
        answering), and only ZooKeeper errors are retried no longer than ``timeout``. Report the admitted jobs that
        were not used to :meth:`unused` from the same thread."""
        if count <= 0:
            return 0
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while not closing.is_set():
            got = self._from_pool(count)
            if got:
                return got
            free_at = self._free_at_ms
            if free_at > _now_ms():  # known to be at the limit until then: wait without asking ZooKeeper
                if not wait:
                    return self._refused(free_at)
                if not self._wait(free_at, closing, deadline):
                    return 0
                continue
            # One slice request at a time from this process; a thread waiting for its turn still sees its close.
            while not self._taking.acquire(timeout=_ANSWER_POLL):
                if closing.is_set():
                    return 0
                if deadline is not None and time.monotonic() >= deadline:
                    return self._from_pool(count)
            try:
                got = self._from_pool(count)  # another thread of ours may have given some back meanwhile
                if got:
                    return got
                granted = self._take_slice(count, closing, deadline, patient=not wait)
            finally:
                self._taking.release()
            if granted is None:  # closing, or the deadline passed while ZooKeeper failed
                return 0
            if granted.jobs:
                self._local.expiry_ms = granted.at_ms + self._lifetime_ms  # from the time in the log, not the reply
                return granted.jobs
            self._free_at_ms = max(self._free_at_ms, granted.free_at_ms)
            if not wait:
                return self._refused(granted.free_at_ms)
            if not self._wait(granted.free_at_ms, closing, deadline):
                return 0
        return 0

    def unused(self, count: int) -> None:
        """Give back ``count`` tokens the last :meth:`admit` of this thread handed out and no job used: later
        claims of this process use them, until they expire (no write)."""
        if count > 0:
            self._keep(count, unused=True)

    def keep(self, count: int) -> None:
        """Keep ``count`` tokens of the last :meth:`admit` of this thread, asked for beyond its need (a slice for a
        few starts), for this process's next admissions until they expire (no write)."""
        if count > 0:
            self._keep(count, unused=False)

    def _keep(self, count: int, *, unused: bool) -> None:
        expiry = getattr(self._local, "expiry_ms", 0)
        with self._lock:
            if unused:
                self._counts["rate_tokens_unused"] += count
            if expiry <= _now_ms():  # the claim took longer than its tokens live: wasted already
                self._counts["rate_tokens_expired"] += count
                return
            self._pool.append([expiry, count])
            self._pool.sort()

    def free_in(self) -> float:
        """Seconds until budget may free, as the rate node last said (0 when it may be free now)."""
        return max(0.0, (self._free_at_ms - _now_ms()) / 1000.0)

    def stats(self) -> dict[str, int]:
        """``rate_slices`` (slices taken: writes to the rate node), ``rate_waits`` and ``rate_waited_ms`` (waits at
        the limit, each of at most about a second on a consumer's loop, and their total length; a worker's starts
        held for budget count the time the rate node set), ``rate_races`` (version races lost at the rate node),
        ``rate_errors`` (ZooKeeper errors while taking a slice), ``rate_tokens_unused`` (tokens a claim was admitted
        for and did not use: claim races lost to other workers; kept for this process's next claims) and
        ``rate_tokens_expired`` (of those, the ones no claim used before they expired: budget wasted)."""
        with self._lock:
            return dict(self._counts)

    # ------------------------------------------------------------------------------------------ inside
    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def _from_pool(self, count: int) -> int:
        """Up to ``count`` unexpired tokens of the pool (the earliest to expire first); 0 if none."""
        now = _now_ms()
        with self._lock:
            expired = sum(entry[1] for entry in self._pool if entry[0] <= now)
            if expired:
                self._counts["rate_tokens_expired"] += expired
                self._pool = [entry for entry in self._pool if entry[0] > now]
            got = 0
            expiry = 0
            while self._pool and got < count:
                entry = self._pool[0]
                take = min(entry[1], count - got)
                expiry = entry[0] if not got else min(expiry, entry[0])
                got += take
                entry[1] -= take
                if not entry[1]:
                    self._pool.pop(0)
        if got:
            self._local.expiry_ms = expiry
        return got

    def _refused(self, free_at_ms: int) -> int:
        """An admission without waiting met the limit: counted as a wait of the time until budget frees (the caller
        holds its jobs that long, see :meth:`free_in`); 0."""
        with self._lock:
            self._counts["rate_waits"] += 1
            self._counts["rate_waited_ms"] += max(0, free_at_ms - _now_ms())
        return 0

    def _wait(self, free_at_ms: int, closing: threading.Event, deadline: float | None) -> bool:
        """Sleep until budget frees (wall clock ``free_at_ms``); False if closing or the deadline came first."""
        delay = max(0.001, (free_at_ms - _now_ms()) / 1000.0 + 0.001)
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            delay = min(delay, left)
        log.debug("rate limit of %s reached; waiting %.3fs", self.path, delay)
        started = time.monotonic()
        closed = closing.wait(delay)
        self._count("rate_waits")
        self._count("rate_waited_ms", int((time.monotonic() - started) * 1000))
        if closed:
            return False
        return deadline is None or time.monotonic() < deadline

    def _take_slice(self, count: int, closing: threading.Event, deadline: float | None, *,
                    patient: bool = False) -> _Granted | None:
        """One slice (or when budget frees) from the rate node; ZooKeeper errors are retried with a growing pause
        until it works, ``closing`` is set or the deadline passed (then None). ``patient``: an answer is awaited
        until ``closing`` even past the deadline. A closed client (``ConnectionClosedError``) is not retried: it
        raises."""

        def stopped() -> bool:
            return closing.is_set() or (deadline is not None and time.monotonic() >= deadline)

        def stop(state: tenacity.RetryCallState) -> bool:
            return stopped()

        def before_sleep(state: tenacity.RetryCallState) -> None:
            self._count("rate_errors")
            exc = state.outcome.exception() if state.outcome is not None else None
            level = logging.WARNING if state.attempt_number in (1, 10) or state.attempt_number % 100 == 0 \
                else logging.DEBUG
            log.log(level, "taking a slice of the rate limit of %s failed (try %d): %r; trying again",
                    self.path, state.attempt_number, exc)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(
                lambda exc: isinstance(exc, KazooException) and not isinstance(exc, ConnectionClosedError)),
            wait=tenacity.wait_random_exponential(multiplier=_ERROR_PAUSE_FIRST, max=_ERROR_PAUSE_MAX),
            stop=stop, sleep=closing.wait, before_sleep=before_sleep, reraise=True,
        )
        try:
            return retrying(self._try_slice, count, closing, closing.is_set if patient else stopped)
        except _Stopped:
            return None
        except KazooException as exc:
            if isinstance(exc, ConnectionClosedError):
                raise
            return None  # the last try failed and then the queue closed or the deadline passed

    def _answer(self, request: Any, stopped: Any) -> Any:
        """The answer of an async request; :class:`_Stopped` if the queue closes or the deadline passes first."""
        while not request.wait(_ANSWER_POLL):
            if stopped():
                raise _Stopped()
        return request.get()

    def _try_slice(self, count: int, closing: threading.Event, stopped: Any) -> _Granted | None:
        """Read the log, and grant from it with a version-checked write; a lost race reads it again. Tried even when
        the caller's timeout passed already (a timeout of 0 tries once); ``stopped`` ends waits for answers."""
        client = self._client
        while not closing.is_set():
            try:
                data, stat = self._answer(client.get_async(self.path), stopped)
            except NoNodeError:
                try:
                    self._answer(client.create_async(self.path, _encode([]), acl=self._acl, makepath=True), stopped)
                except NodeExistsError:
                    pass
                continue
            now = _now_ms()
            grants = [g for g in _decode(data, self.path) if g[0] > now - self._horizon_ms]
            free = self.limit.max_jobs - sum(n for _t, n in grants)
            if free <= 0:
                oldest = min(t for t, _n in grants)
                return _Granted(0, free_at_ms=oldest + self._horizon_ms)
            jobs = min(free, count, self.limit.slice_cap)
            bucket = now - now % self._bucket_ms
            if grants and grants[-1][0] == bucket:
                grants[-1] = (bucket, grants[-1][1] + jobs)
            else:
                grants.append((bucket, jobs))
            try:
                self._answer(client.set_async(self.path, _encode(grants), version=stat.version), stopped)
            except BadVersionError:
                self._count("rate_races")
                continue
            self._count("rate_slices")
            return _Granted(jobs, at_ms=now)
        return None


def rate_node(root: str) -> str:
    """The rate node of the job queue at ``root``."""
    return root.rstrip("/") + "/rate"


def limiter_for(client: Any, root: str, limit: RateLimit | None, acl: Sequence[Any] | None) -> RateLimiter | None:
    """The limiter of the job queue at ``root`` for ``limit`` (None without one); a clear error for a wrong type."""
    if limit is None:
        return None
    if not isinstance(limit, RateLimit):
        raise ConfigurationError(f"rate_limit must be a RateLimit (zkqueue.jobs.RateLimit), got {limit!r}")
    return RateLimiter(client, rate_node(root), limit, acl)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _encode(grants: Sequence[tuple[int, int]]) -> bytes:
    return json.dumps({"grants": [list(g) for g in grants]}, separators=(",", ":")).encode()


def _decode(data: bytes, path: str) -> list[tuple[int, int]]:
    """The grants in the rate node's data; an unreadable node counts as empty (and is rewritten by the grant)."""
    if not data:
        return []
    try:
        raw = json.loads(data.decode())["grants"]
        grants = sorted((int(t), int(n)) for t, n in raw)
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("the rate node %s holds no grant log (%r); starting a new one", path, exc)
        return []
    return grants
