"""The ``celery_brokers`` section (issue 31): the same Celery app and tasks on three brokers, in one run.

Brokers (each run on a fresh chroot, vhost or queue):

- ``zkqueue``: ``broker = backend = "zkqueue://<ensemble connect string>/<fresh chroot>"``;
- ``redis``: a private ``redis-server`` (started like :mod:`benchmarks.jobs_peers` does), ``redis://`` broker and
  result backend;
- ``kombu_zookeeper``: kombu's own ``zookeeper://host:port/vhost`` transport (kazoo's ``Queue`` recipe; it takes one
  host, the ensemble's first, and the vhost is the base node of its queues) on the same ensemble, with the
  ``zkqueue://`` RESULT BACKEND (kombu's transport is a broker only: Celery has no zookeeper result backend).

The worker, the same for all: ``celery worker --pool=prefork --concurrency=C`` (C = 4 by default) in one process
(:mod:`benchmarks.celery_broker_worker`), ``--without-gossip --without-mingle --without-heartbeat``, JSON, results
stored, Celery's defaults otherwise.

**End to end** (``runs``): the worker is started and ready first (untimed); then one producer sends N tasks with
``double.delay(i)``; timed from the first send until the last result was stored in the result backend (the largest
``date_done`` of the N results, which Celery sets when it stores a result). Early acks, prefetch multiplier 4 (the
defaults). Every result is read back and checked (``i * 2``); a run is ``complete`` only if all N are there within
``max_seconds``. ``repeats`` interleaved runs (the broker order rotates per repeat): median, min, max, spread, and the
ratios zkqueue / Redis (target >= 1x) and zkqueue / kombu-zookeeper.

**SIGKILL** (``kill``, one run per broker): ``task_acks_late=True``, ``worker_prefetch_multiplier=1``, two worker
processes (``victim`` and ``survivor``, the same concurrency each); N tasks ``slow(i, ms)`` (default 40 ms) are
sent; each task appends ``S`` when it starts and ``D`` when it is done to a runs file. Once N/2 tasks have started,
just after a start on the victim, the victim's whole process group (main process and pool children) gets SIGKILL.
Then the section waits until every task is done or ``kill_deadline`` seconds after the kill (or, for a broker that
cannot give the victim's messages back before that deadline, until only the victim's in-flight tasks are missing:
``settled_early``), and counts exactly, from
the runs file: ``lost`` (never done within the deadline), ``duplicates`` (done more than once; each one is also
classed by whether its first completion came before the kill, i.e. a task that finished but whose late ack died with
the worker, which any at-least-once broker must run again), ``rerun`` (started more than once: the killed in-flight
tasks running again) and how long after the kill those came back. For tasks still missing at the deadline it says
where they are: Redis: in its ``unacked`` hash (given back only after the visibility timeout, kombu's default 3600 s
unless ``redis_visibility_timeout`` is set); kombu-zookeeper: nowhere (kazoo's ``Queue.get`` deletes a message when it
is delivered). zkqueue's leases end with the killed worker's ZooKeeper session (its ``session_timeout``, 10 s by
default), and its messages come back then.

    python -m benchmarks.celery_brokers [--count 2000] [--repeats 3] [--quick] [--zk-hosts HOSTS]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.jobs_peers import (
    RedisServerMissing,
    WorkerProcess,
    _version,
    redis_server,
)
from benchmarks.report import summarize

BROKERS = ("zkqueue", "zkqueue_unconfirmed", "redis", "kombu_zookeeper")
#: Variants whose worker side is that of another broker: no SIGKILL run of their own.
NO_KILL_RUN = frozenset({"zkqueue_unconfirmed"})
LABELS = {
    "zkqueue": "Celery on zkqueue:// (broker and result backend)",
    "zkqueue_unconfirmed": "Celery on zkqueue://, broker_transport_options confirm_publish=False (delay() returns "
                           "once the put thread has the message; committed in group multis)",
    "redis": "Celery on Redis (redis:// broker and result backend)",
    "kombu_zookeeper": "Celery on kombu's zookeeper:// transport (result backend zkqueue://)",
    "redis_short_vt": "Celery on Redis, visibility_timeout={vt:g} s, unacked_restore_interval=1, "
                      "unacked_restore_throttle=1 (SIGKILL scenario only)",
}
TARGET = 1.0  # zkqueue / Redis, end to end

log = logging.getLogger("zkqueue.benchmarks.celery_brokers")


@dataclass
class CeleryBrokerSettings:
    count: int = 2000  # tasks per end-to-end run
    kill_count: int | None = None  # tasks of the SIGKILL scenario (None: count)
    repeats: int = 3
    concurrency: int = 4  # prefork children of the worker (end to end)
    kill_concurrency: int = 4  # prefork children of each of the two workers (SIGKILL scenario)
    task_ms: float = 40.0  # run time of a task of the SIGKILL scenario
    max_seconds: float = 180.0  # cap of an end-to-end run, and of the sending + first half of a SIGKILL run
    kill_deadline: float = 60.0  # how long after the kill tasks may still complete
    kill: bool = True
    zk_session_timeout: float | None = None  # zkqueue:// URL option (None: the transport's default, 10 s)
    redis_visibility_timeout: float | None = None  # broker_transport_options (None: kombu's default, 3600 s)
    #: An extra SIGKILL run on Redis with this visibility timeout (and the restore scan every second), so that the
    #: killed worker's tasks come back within the deadline; None or 0: no such run.
    redis_short_vt: float | None = 10.0
    brokers: tuple[str, ...] = BROKERS

    @classmethod
    def quick(cls) -> CeleryBrokerSettings:
        return cls(count=200, repeats=1, max_seconds=90.0, kill_deadline=30.0)


# ----------------------------------------------------------------------------------------------------------------
# Endpoints


@dataclass
class Endpoint:
    broker: str
    backend: str
    transport_options: dict[str, Any]
    zk_paths: tuple[str, ...] = ()  # nodes to delete afterwards (relative to the ensemble root)
    kz_queue_path: str | None = None  # kombu-zookeeper: the node of its queue (for the leftover count)


class _Ctx:
    """What the runs share: the ensemble (hosts, base chroot, a kazoo client), the Redis URL, the settings."""

    def __init__(self, zk_connect: str, redis_url: str | None, s: CeleryBrokerSettings) -> None:
        from kazoo.client import KazooClient

        hosts, slash, chroot = zk_connect.partition("/")
        self.hosts = hosts
        self.base = (slash + chroot).rstrip("/")
        self.redis_url = redis_url
        self.s = s
        self.zk = KazooClient(hosts=hosts, timeout=15.0)
        self.zk.start(timeout=60)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.zk.stop()
            self.zk.close()

    def endpoint(self, broker: str, tag: str) -> Endpoint:
        query = f"?session_timeout={self.s.zk_session_timeout:g}" if self.s.zk_session_timeout else ""
        if broker in ("zkqueue", "zkqueue_unconfirmed"):
            path = f"{self.base}/bench-celery-{tag}"
            self.zk.ensure_path(path)
            url = f"zkqueue://{self.hosts}{path}{query}"
            return Endpoint(url, url, {"confirm_publish": False} if broker == "zkqueue_unconfirmed" else {}, (path,))
        if broker == "redis":
            if self.redis_url is None:
                raise RuntimeError("no redis-server")
            opts = ({"visibility_timeout": self.s.redis_visibility_timeout}
                    if self.s.redis_visibility_timeout is not None else {})
            return Endpoint(self.redis_url, self.redis_url, opts)
        if broker == "redis_short_vt":  # a database of its own: its restore scans must not touch the other runs
            if self.redis_url is None or not self.s.redis_short_vt:
                raise RuntimeError("no redis-server")
            url = self.redis_url.rsplit("/", 1)[0] + "/1"
            return Endpoint(url, url, {"visibility_timeout": self.s.redis_short_vt, "unacked_restore_interval": 1,
                                       "unacked_restore_throttle": 1})
        if broker == "kombu_zookeeper":
            vhost, results = f"{self.base}/bench-kz-{tag}", f"{self.base}/bench-kz-results-{tag}"
            self.zk.ensure_path(results)
            first = self.hosts.split(",")[0]
            return Endpoint(f"zookeeper://{first}{vhost}", f"zkqueue://{self.hosts}{results}{query}", {},
                            (vhost, results), kz_queue_path=f"{vhost}/celery-bench-{tag}")
        raise ValueError(f"unknown broker {broker!r}")

    def cleanup(self, ep: Endpoint) -> None:
        for path in ep.zk_paths:
            with contextlib.suppress(Exception):
                self.zk.delete(path, recursive=True)


# ----------------------------------------------------------------------------------------------------------------
# Runs file and results


@dataclass
class Event:
    kind: str
    n: int
    pid: int
    t: float
    worker: str


class RunsFile:
    """The tasks' runs file, read incrementally (whole lines only)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._pos = 0
        self._rest = b""
        self.events: list[Event] = []

    def read(self) -> list[Event]:
        """The events appended since the last call."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._pos)
                data = fh.read()
        except FileNotFoundError:
            return []
        self._pos += len(data)
        data = self._rest + data
        *lines, self._rest = data.split(b"\n")
        new = []
        for line in lines:
            k, n, pid, t, worker = line.decode().split(" ", 4)
            new.append(Event(k, int(n), int(pid), float(t), worker))
        self.events.extend(new)
        return new


def _date_done(meta: dict[str, Any]) -> float | None:
    raw = meta.get("date_done")
    if raw is None:
        return None
    if isinstance(raw, dt.datetime):
        when = raw
    else:
        when = dt.datetime.fromisoformat(str(raw))
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def _read_results(app: Any, ids: list[str], until: float) -> tuple[int, float | None, int]:
    """(correct SUCCESS results, the largest ``date_done``, results missing at ``until``); waits for results not
    stored yet until ``until`` (epoch seconds)."""
    backend = app.backend
    ok, last, missing = 0, None, 0
    for i, tid in enumerate(ids):
        while True:
            meta = backend.get_task_meta(tid)
            if meta.get("status") == "SUCCESS" or time.time() >= until:
                break
            time.sleep(0.02)
        if meta.get("status") != "SUCCESS":
            missing += 1
            continue
        if meta.get("result") == i * 2:
            ok += 1
        done = _date_done(meta)
        if done is not None:
            last = done if last is None else max(last, done)
    return ok, last, missing


def _worker(ep: Endpoint, queue: str, name: str, runs_path: str, concurrency: int, *,
            acks_late: bool = False, prefetch: int = 4) -> WorkerProcess:
    argv = ["--broker", ep.broker, "--backend", ep.backend, "--queue", queue, "--hostname", f"{name}@bench-{queue}",
            "--concurrency", str(concurrency), "--prefetch-multiplier", str(prefetch),
            "--transport-options", json.dumps(ep.transport_options)]
    if acks_late:
        argv.append("--acks-late")
    return WorkerProcess(argv, command=[sys.executable, "-m", "benchmarks.celery_broker_worker"],
                         tags=("STARTED", "READY"), env={"ZKQ_BENCH_RUNS": runs_path, "ZKQ_BENCH_NAME": name})


def _wait_ready(workers: list[WorkerProcess], timeout: float = 120.0) -> float:
    t = time.monotonic()
    for w in workers:
        if w.expect("READY", max(1.0, timeout - (time.monotonic() - t))) is None:
            raise RuntimeError(f"Celery worker not ready in {timeout:g} s: {w.stderr_tail()}")
    return time.monotonic() - t


def _stop(worker: WorkerProcess) -> None:
    worker.kill()  # the run is over: the whole process group, at once (a fresh chroot/queue per run)
    worker.close()


def _producer_app(ep: Endpoint, queue: str, **kw: Any) -> Any:
    from benchmarks.celery_broker_worker import make_app

    app = make_app(ep.broker, ep.backend, queue, transport_options=ep.transport_options, **kw)
    with app.producer_or_acquire() as producer:  # connected outside timing (the pool keeps the connection)
        producer.connection.ensure_connection(max_retries=3)
    app.backend.get_task_meta(f"warm-{uuid.uuid4().hex}")  # the backend's connection, too
    return app


# ----------------------------------------------------------------------------------------------------------------
# End to end


def run_throughput(ctx: _Ctx, broker: str) -> dict[str, Any]:
    """One end-to-end run on ``broker`` (see the module doc)."""
    from benchmarks.celery_broker_worker import DOUBLE

    s, count = ctx.s, ctx.s.count
    tag = uuid.uuid4().hex[:8]
    queue = f"celery-bench-{tag}"
    ep = ctx.endpoint(broker, tag)
    tmp = tempfile.mkdtemp(prefix="zkq-celery-bench-")
    runs = RunsFile(os.path.join(tmp, "runs"))
    worker = _worker(ep, queue, "w", runs.path, s.concurrency)
    app = None
    try:
        worker_start = _wait_ready([worker])
        app = _producer_app(ep, queue)
        task = app.tasks[DOUBLE]
        t0 = time.time()
        ids = [task.delay(i).id for i in range(count)]
        t_sent = time.time()
        done: set[int] = set()
        while len(done) < count and time.time() - t0 < s.max_seconds:
            done.update(e.n for e in runs.read() if e.kind == "D")
            time.sleep(0.005)
        ok, last, missing = _read_results(app, ids, t0 + s.max_seconds)
        t_seen = time.time()
        complete = ok == count and last is not None and last - t0 <= s.max_seconds
        seconds = (last - t0) if complete and last is not None else s.max_seconds
        return {"broker": broker, "count": count, "ok": ok, "missing": missing, "complete": complete,
                "seconds": round(seconds, 4), "rate": round(ok / seconds, 1) if seconds > 0 else 0.0,
                "send_seconds": round(t_sent - t0, 4), "seen_seconds": round(t_seen - t0, 4),
                "worker_start_seconds": round(worker_start, 2), "concurrency": s.concurrency}
    finally:
        _stop(worker)
        _clean_up(app, ctx, ep, runs.path, tmp)


# ----------------------------------------------------------------------------------------------------------------
# SIGKILL


def _leftovers(ctx: _Ctx, broker: str, ep: Endpoint, queue: str, missing_ids: set[str]) -> dict[str, Any]:
    """Where the tasks still missing at the deadline are, as far as the broker shows it."""
    if not missing_ids:
        return {}
    if broker in ("redis", "redis_short_vt"):
        from redis import Redis

        with contextlib.closing(Redis.from_url(ep.broker)) as r:
            held = 0
            for raw in r.hvals("unacked"):
                with contextlib.suppress(Exception):
                    msg = json.loads(raw)[0]
                    if msg.get("headers", {}).get("id") in missing_ids:
                        held += 1
            return {"in_unacked_hash": held, "in_queue": int(r.llen(queue)),
                    "visibility_timeout_s": ep.transport_options.get("visibility_timeout", 3600),
                    "note": "held in Redis's unacked hash: given back only once the visibility timeout has passed "
                            "since delivery (by a worker's periodic restore)"}
    if broker == "kombu_zookeeper" and ep.kz_queue_path:
        queued = 0
        for name in ctx.zk.get_children(ep.kz_queue_path) if ctx.zk.exists(ep.kz_queue_path) else []:
            with contextlib.suppress(Exception):
                data, _stat = ctx.zk.get(f"{ep.kz_queue_path}/{name}")
                if json.loads(data).get("headers", {}).get("id") in missing_ids:
                    queued += 1
        return {"in_queue_node": queued, "gone": len(missing_ids) - queued,
                "note": "gone: not in ZooKeeper any more (kazoo's Queue.get deletes a message when it delivers it, so "
                        "a message the killed worker held existed only in its memory); in_queue_node: still queued, "
                        "not taken by the surviving worker by the deadline"}
    if broker == "zkqueue":
        return {"note": "still missing at the deadline"}
    return {}


def run_kill(ctx: _Ctx, broker: str) -> dict[str, Any]:
    """One SIGKILL run on ``broker`` (see the module doc)."""
    from benchmarks.celery_broker_worker import SLOW

    s = ctx.s
    count = s.kill_count or s.count
    tag = uuid.uuid4().hex[:8]
    queue = f"celery-bench-{tag}"
    ep = ctx.endpoint(broker, tag)
    tmp = tempfile.mkdtemp(prefix="zkq-celery-kill-")
    runs = RunsFile(os.path.join(tmp, "runs"))
    victim = _worker(ep, queue, "victim", runs.path, s.kill_concurrency, acks_late=True, prefetch=1)
    survivor = _worker(ep, queue, "survivor", runs.path, s.kill_concurrency, acks_late=True, prefetch=1)
    app = None
    try:
        _wait_ready([victim, survivor])
        app = _producer_app(ep, queue, acks_late=True, prefetch_multiplier=1)
        task = app.tasks[SLOW]
        t0 = time.time()
        ids = [task.delay(i, s.task_ms).id for i in range(count)]
        starts = 0
        t_kill = None
        while time.time() - t0 < s.max_seconds:
            new = runs.read()
            for e in new:
                if e.kind == "S":
                    starts += 1
            if starts >= count // 2 and any(e.kind == "S" and e.worker == "victim" for e in new[-1:]):
                victim.kill()
                t_kill = time.time()
                break
            if starts >= count:  # the victim started nothing late enough: kill it anyway (said in the result)
                victim.kill()
                t_kill = time.time()
                break
            time.sleep(0.002)
        if t_kill is None:
            victim.kill()
            t_kill = time.time()
        time.sleep(0.05)
        runs.read()
        before = [e for e in runs.events if e.t <= t_kill]
        v_started = {e.n for e in before if e.kind == "S" and e.worker == "victim"}
        v_done = {e.n for e in before if e.kind == "D" and e.worker == "victim"}
        in_flight = sorted(v_started - v_done)
        deadline = t_kill + s.kill_deadline
        # A broker that cannot give the killed worker's messages back before the deadline: kazoo's Queue deleted them
        # at delivery; Redis holds them until its visibility timeout has passed since their delivery (after t0).
        vt = ep.transport_options.get("visibility_timeout", 3600)
        cannot_return = broker == "kombu_zookeeper" or (
            broker in ("redis", "redis_short_vt") and t0 + vt > deadline)
        settled_early = False
        while time.time() < deadline:
            runs.read()
            done_now = {e.n for e in runs.events if e.kind == "D"}
            if len(done_now) >= count:
                break
            if cannot_return and set(range(count)) - done_now <= set(in_flight):
                settled_early = True  # only what the victim held is missing, and it cannot come back in time
                break
            time.sleep(0.05)
        t_wait_end = time.time()
        runs.read()
        ev = runs.events
        done_count = Counter(e.n for e in ev if e.kind == "D")
        start_count = Counter(e.n for e in ev if e.kind == "S")
        first_done: dict[int, float] = {}
        for e in ev:
            if e.kind == "D":
                first_done[e.n] = min(first_done.get(e.n, e.t), e.t)
        lost = sorted(set(range(count)) - set(done_count))
        dups = sorted(n for n, c in done_count.items() if c > 1)
        dups_before_kill = [n for n in dups if first_done[n] <= t_kill]
        rerun = sorted(n for n, c in start_count.items() if c > 1)
        back: list[float] = []
        for n in in_flight:
            later = [e.t for e in ev if e.n == n and e.kind == "S" and e.t > t_kill]
            if later:
                back.append(min(later) - t_kill)
        after = [e.t - t_kill for e in ev if e.kind == "D" and e.t > t_kill]
        missing_ids = {ids[n] for n in lost}
        stored_ok, _last, no_result = _read_results(app, ids, time.time())
        return {
            "broker": broker, "count": count, "task_ms": s.task_ms, "concurrency_per_worker": s.kill_concurrency,
            "workers": 2, "acks_late": True, "prefetch_multiplier": 1,
            "started_before_kill": len({e.n for e in before if e.kind == "S"}),
            "victim_started": len(v_started), "in_flight_at_kill": len(in_flight), "settled_early": settled_early,
            "completed": len(done_count), "lost": len(lost), "duplicates": len(dups),
            "duplicates_done_before_kill": len(dups_before_kill),
            "duplicates_done_after_kill": len(dups) - len(dups_before_kill),
            "rerun": len(rerun), "in_flight_back": len(back),
            "back_after_kill_s": ({"min": round(min(back), 2), "max": round(max(back), 2)} if back else None),
            "last_done_after_kill_s": round(max(after), 2) if after else None,
            "results_stored_ok": stored_ok, "results_missing": no_result,
            "deadline_s": s.kill_deadline, "waited_s": round(t_wait_end - t_kill, 2),
            "lost_ids": lost[:50], "duplicate_ids": dups[:50],
            "where_missing": _leftovers(ctx, broker, ep, queue, missing_ids),
            "settings": {"redis_transport_options": ep.transport_options if broker.startswith("redis") else None,
                         "redis_visibility_timeout_s": (ep.transport_options.get("visibility_timeout", 3600)
                                                        if broker.startswith("redis") else None),
                         "zk_session_timeout_s": (s.zk_session_timeout or 10.0) if not broker.startswith("redis") else None},
        }
    finally:
        _stop(victim)
        _stop(survivor)
        _clean_up(app, ctx, ep, runs.path, tmp)


def _clean_up(app: Any, ctx: Any, ep: Any, runs_path: str, tmp: str) -> None:
    """After a run: the client app closed, the broker's leftovers cleaned, the runs file and its folder removed."""
    if app is not None:
        with contextlib.suppress(Exception):
            app.close()
    ctx.cleanup(ep)
    with contextlib.suppress(OSError):
        os.remove(runs_path)
        os.rmdir(tmp)


# ----------------------------------------------------------------------------------------------------------------
# The section


def _error_row(broker: str, exc: BaseException) -> dict[str, Any]:
    return {"broker": broker, "error": repr(exc)[:500], "rate": 0.0, "complete": False}


def run_section(zk_hosts: str, count: int | None = None, repeats: int | None = None,
                settings: CeleryBrokerSettings | None = None) -> dict[str, Any]:
    """The ``celery_brokers`` section of ``python -m benchmarks``: end-to-end runs (``repeats`` interleaved, the
    broker order rotating) and one SIGKILL run per broker. A broker that cannot run is "n/a" with the reason."""
    s = settings or CeleryBrokerSettings()
    if count is not None:
        s.count = count
    if repeats is not None:
        s.repeats = repeats
    try:
        __import__("celery")
    except ImportError:
        return {"status": "n/a", "reason": "celery is not installed (pip install -e '.[bench,celery]')"}
    na: dict[str, str] = {}
    stack = contextlib.ExitStack()
    redis_url = None
    redis_version = None
    if "redis" in s.brokers:
        try:
            server = stack.enter_context(redis_server())
            redis_url, redis_version = server.url, server.version
        except RedisServerMissing as exc:
            na["redis"] = str(exc)
    brokers = [b for b in s.brokers if b not in na]
    runs: dict[str, list[dict[str, Any]]] = {b: [] for b in s.brokers}
    kill: dict[str, dict[str, Any]] = {}
    with stack:
        ctx = _Ctx(zk_hosts, redis_url, s)
        try:
            for r in range(s.repeats):
                for b in brokers[r % len(brokers):] + brokers[:r % len(brokers)]:
                    try:
                        runs[b].append(run_throughput(ctx, b))
                    except Exception as exc:  # noqa: BLE001 - recorded; the other runs go on
                        runs[b].append(_error_row(b, exc))
            if s.kill:
                extra = ["redis_short_vt"] if "redis" in brokers and s.redis_short_vt else []
                for b in [b for b in brokers if b not in NO_KILL_RUN] + extra:
                    try:
                        kill[b] = run_kill(ctx, b)
                    except Exception as exc:  # noqa: BLE001
                        kill[b] = {"broker": b, "error": repr(exc)[:500]}
        finally:
            ctx.close()
    for b in brokers:  # a broker none of whose runs worked is n/a, with the reason
        if runs[b] and all("error" in r for r in runs[b]):
            na[b] = runs[b][0]["error"]
    summary = {b: summarize([r for r in rs if "error" not in r], "rate") for b, rs in runs.items()}
    medians = {b: v["median"] for b, v in summary.items() if v["median"]}
    ratios = {key: (round(medians[ours] / medians[peer], 2) if medians.get(ours) and medians.get(peer) else None)
              for key, ours, peer in (("zkqueue_redis", "zkqueue", "redis"),
                                      ("zkqueue_kombu_zookeeper", "zkqueue", "kombu_zookeeper"),
                                      ("zkqueue_unconfirmed_redis", "zkqueue_unconfirmed", "redis"))
              if ours in s.brokers and peer in s.brokers}
    return {
        "status": "ok",
        "settings": {k: v for k, v in asdict(s).items() if k != "brokers"} | {
            "kill_count": s.kill_count or s.count, "pool": "prefork", "brokers": list(s.brokers),
            "redis_visibility_timeout_effective_s": s.redis_visibility_timeout or 3600,
            "zk_session_timeout_effective_s": s.zk_session_timeout or 10.0},
        "versions": {"celery": _version("celery"), "kombu": _version("kombu"), "kazoo": _version("kazoo"),
                     "redis_py": _version("redis"), "redis_server": redis_version},
        "labels": {k: v.format(vt=s.redis_short_vt or 0) for k, v in LABELS.items()},
        "runs": runs, "na": na, "summary": summary, "medians": medians, "ratios": ratios,
        "target": f"zkqueue / Redis >= {TARGET:g}x",
        "pass": None if ratios.get("zkqueue_redis") is None else ratios["zkqueue_redis"] >= TARGET,
        "pass_unconfirmed": (None if ratios.get("zkqueue_unconfirmed_redis") is None
                             else ratios["zkqueue_unconfirmed_redis"] >= TARGET),
        "kill": kill,
        "kill_expectation": "zkqueue: 0 lost, 0 duplicates",
        "kill_pass": (None if "zkqueue" not in kill or "error" in kill["zkqueue"]
                      else kill["zkqueue"]["lost"] == 0 and kill["zkqueue"]["duplicates"] == 0),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.celery_brokers", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 tasks, 1 repeat, 30 s kill deadline")
    ap.add_argument("--count", type=int)
    ap.add_argument("--kill-count", type=int)
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--concurrency", type=int)
    ap.add_argument("--kill-concurrency", type=int)
    ap.add_argument("--kill-deadline", type=float)
    ap.add_argument("--no-kill", action="store_true")
    ap.add_argument("--zk-session-timeout", type=float)
    ap.add_argument("--redis-visibility-timeout", type=float)
    ap.add_argument("--redis-short-vt", type=float, help="visibility timeout of the extra Redis SIGKILL run (0: none)")
    ap.add_argument("--brokers", default=",".join(BROKERS))
    ap.add_argument("--zk-hosts", help="use this ZooKeeper instead of starting an embedded 3-node ensemble")
    args = ap.parse_args(argv)
    s = CeleryBrokerSettings.quick() if args.quick else CeleryBrokerSettings()
    for key in ("count", "kill_count", "repeats", "concurrency", "kill_concurrency", "kill_deadline",
                "zk_session_timeout", "redis_visibility_timeout", "redis_short_vt"):
        if getattr(args, key) is not None:
            setattr(s, key, getattr(args, key))
    s.kill = not args.no_kill
    s.brokers = tuple(b.strip() for b in args.brokers.split(",") if b.strip())
    with contextlib.ExitStack() as stack:
        hosts = args.zk_hosts
        if not hosts:
            from zkqueue.server.embedded import ZooKeeperEnsemble

            hosts = stack.enter_context(ZooKeeperEnsemble(size=3)).connect_string
        section = run_section(hosts, settings=s)
    print(json.dumps(section, indent=2, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
