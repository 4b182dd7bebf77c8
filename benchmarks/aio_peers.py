"""The ``aio`` workload: zkqueue's asyncio layer (:mod:`zkqueue.aio`) against arq and SAQ, the asyncio-native job
queues on Redis (issue 21). Two rows, each run the same way for the three systems:

- **async adds/s from one event loop**: ``count`` adds, each its own ``await`` (zkqueue ``await jq.add(params,
  job_id=...)``; arq ``await redis.enqueue_job("io_job", params, _job_id=...)``; SAQ ``await queue.enqueue("io_job",
  key=..., params=...)``), at most ``in_flight`` awaiting at once (a fixed number of coroutines each adding the
  next job), no worker running. Every job has its own id, so all three check for a duplicate. Timed from the first
  add to the last acknowledged one (the peers' connection pools are opened first, untimed: ``in_flight`` PINGs;
  zkqueue has its one session); ``rate`` = adds / seconds; ``ok`` counts the adds that returned an id / a job.
- **end-to-end jobs/s, I/O-bound handlers**: a worker process per system runs handlers that ``await
  asyncio.sleep(0.05)`` and return ``params["n"] * 2``, ``concurrency`` (200) at once. The worker is started and
  idle first (untimed; ``worker_start_seconds``) and the parent's connections opened; then it adds ``jobs`` jobs
  as in the first row (the worker runs them meanwhile), timed from the first add until the last result was
  stored. With 5,000 jobs at 200 in flight the floor is 5,000 / 200 x 0.05 s = 1.25 s, so 4,000 jobs/s is the
  most any system can show here.

"Result stored": zkqueue: the parent stats the queue's ``completed`` node every 5 ms until it has ``jobs``
children (each completed record carries its result); arq: its ``after_job_end`` hook (run after the result was
recorded) in the worker counts to ``jobs``; SAQ: its ``after_process`` hook (run after ``job.finish`` stored the
result). Every result is then read back and checked; ``ok`` counts the correct ones and ``complete`` is true only
if all are there within ``max_seconds``.

Settings, each system's own documented knobs for this load: zkqueue ``jq.work(handler, concurrency=200)``
(defaults otherwise); arq ``Worker(max_jobs=200, poll_delay=0.01)`` (its default poll of 0.5 s would start at most
``max_jobs`` jobs per half second, 400/s); SAQ ``Worker(concurrency=200)`` on a ``Queue`` with
``max_concurrent_ops`` raised to the in-flight bound (its default 20 caps concurrent enqueues and dequeues). The
peers run on a private ``redis-server`` (persistence off; flushed after each run), zkqueue on the harness's
ZooKeeper ensemble.

    python -m benchmarks.aio_peers [--adds 10000] [--jobs 5000] [--repeats 1] [--impl zkqueue,arq,saq]
    python -m benchmarks.aio_peers worker IMPL ...        (the worker process; see :func:`worker_main`)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import queue as queue_mod
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Awaitable, Callable

from benchmarks import machine
from benchmarks.jobs_peers import RedisServerMissing, redis_server
from benchmarks.prefill import wipe

log = logging.getLogger("zkqueue.benchmarks.aio_peers")

#: The folder holding the ``benchmarks`` package, so worker subprocesses import it from anywhere.
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)

IMPLS = ("zkqueue", "arq", "saq")
PEERS = ("arq", "saq")
#: The row's target: zkqueue / max(arq, SAQ) at least this, on both rows.
TARGET = 1.0


@dataclass
class AioSettings:
    """The sizes of the ``aio`` workload (quick: 1,000 adds, 500 jobs)."""

    adds: int = 10_000
    jobs: int = 5_000
    in_flight: int = 500
    concurrency: int = 200
    sleep_s: float = 0.05
    repeats: int = 3
    max_seconds: float = 60.0


def _params(i: int) -> dict[str, Any]:
    return {"n": i, "pad": "x" * 80}


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


async def _bounded(count: int, in_flight: int, one: Callable[[int], Awaitable[Any]]) -> tuple[float, float, list[Any]]:
    """``await one(i)`` for every i < ``count``, ``in_flight`` coroutines each taking the next i: (t0 at the first
    call, t at the last answer, the answers by i)."""
    todo = iter(range(count))
    out: list[Any] = [None] * count

    async def lane() -> None:
        for i in todo:
            out[i] = await one(i)

    t0 = time.time()
    await asyncio.gather(*(lane() for _ in range(max(1, min(in_flight, count)))))
    return t0, time.time(), out


# ----------------------------------------------------------------------------------------------------------------
# The job handlers (the worker processes import this module)


#: The handlers' sleep, set by the parent for its worker processes.
SLEEP_S = float(os.environ.get("AIO_BENCH_SLEEP", "0.05"))


async def zk_job(job: Any) -> int:
    await asyncio.sleep(SLEEP_S)
    return int(job.params["n"]) * 2


async def io_job(ctx: dict[str, Any], params: dict[str, Any] | None = None, **kwargs: Any) -> int:
    """arq calls ``io_job(ctx, params)``, SAQ ``io_job(ctx, params=...)``."""
    await asyncio.sleep(SLEEP_S)
    return int((params or kwargs["params"])["n"]) * 2


# ----------------------------------------------------------------------------------------------------------------
# Producers: one per system, used from one event loop


class _Producer:
    impl = ""

    async def add(self, i: int) -> bool:
        """Add job ``j<i>``; True if the system took it."""
        raise NotImplementedError

    async def warm(self, n: int) -> None:
        """Untimed: open ``n`` connections (what ``n`` adds in flight need), so that none is opened in timing."""

    async def results(self, count: int) -> int:
        """How many of the jobs ``j0..`` have the correct stored result."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class _ZkProducer(_Producer):
    impl = "zkqueue"

    def __init__(self, hosts: str, path: str, in_flight: int) -> None:
        self.hosts, self.path, self.in_flight = hosts, path, in_flight

    async def open(self) -> _ZkProducer:
        from zkqueue.aio import AsyncJobQueue, connect

        self.client = await connect(self.hosts)
        self.jq = AsyncJobQueue(self.client, self.path)
        await self.jq.start()
        return self

    async def warm(self, n: int) -> None:
        pass  # one ZooKeeper session, opened by open()

    async def add(self, i: int) -> bool:
        return await self.jq.add(_params(i), job_id=f"j{i}") is not None

    async def completed_count(self) -> int:
        stat = await asyncio.to_thread(self.client.exists, self.jq.sync.paths.completed)
        return 0 if stat is None else int(stat.numChildren)

    async def results(self, count: int) -> int:
        got = {job.id: job.result for job in await self.jq.completed()}
        return sum(1 for i in range(count) if got.get(f"j{i}") == i * 2)

    async def close(self) -> None:
        from zkqueue.aio import disconnect

        with contextlib.suppress(Exception):
            await self.jq.close()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(wipe, self.client, self.path)  # multis, not a request per node
        await disconnect(self.client)


class _ArqProducer(_Producer):
    impl = "arq"

    def __init__(self, url: str, queue: str) -> None:
        self.url, self.queue = url, queue

    async def open(self) -> _ArqProducer:
        from arq import create_pool
        from arq.connections import RedisSettings

        self.pool = await create_pool(RedisSettings.from_dsn(self.url), default_queue_name=self.queue)
        return self

    async def warm(self, n: int) -> None:
        await asyncio.gather(*(self.pool.ping() for _ in range(n)))

    async def add(self, i: int) -> bool:
        return await self.pool.enqueue_job("io_job", _params(i), _job_id=f"j{i}") is not None

    async def results(self, count: int) -> int:
        from arq.jobs import Job

        async def one(i: int) -> bool:
            info = await Job(f"j{i}", self.pool).result_info()
            return info is not None and info.success and info.result == i * 2

        _t0, _t1, oks = await _bounded(count, 200, one)
        return sum(oks)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.pool.flushdb()
        await self.pool.aclose()


class _SaqProducer(_Producer):
    impl = "saq"

    def __init__(self, url: str, queue: str, in_flight: int) -> None:
        self.url, self.queue, self.in_flight = url, queue, in_flight

    async def open(self) -> _SaqProducer:
        from saq import Queue

        self.q = Queue.from_url(self.url, name=self.queue, max_concurrent_ops=self.in_flight)
        await self.q.connect()
        return self

    async def warm(self, n: int) -> None:
        await asyncio.gather(*(self.q.redis.ping() for _ in range(n)))

    async def add(self, i: int) -> bool:
        return await self.q.enqueue("io_job", key=f"j{i}", params=_params(i)) is not None

    async def results(self, count: int) -> int:
        from saq.job import Status

        jobs = await self.q.jobs(f"j{i}" for i in range(count))
        return sum(1 for i, job in enumerate(jobs)
                   if job is not None and job.status == Status.COMPLETE and job.result == i * 2)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.q.redis.flushdb()
        await self.q.disconnect()


async def _producer(impl: str, where: str, s: AioSettings) -> _Producer:
    tag = uuid.uuid4().hex[:8]
    if impl == "zkqueue":
        return await _ZkProducer(where, f"/bench-aio-{tag}", s.in_flight).open()
    if impl == "arq":
        return await _ArqProducer(where, f"bench-aio-{tag}").open()
    return await _SaqProducer(where, f"bench-aio-{tag}", s.in_flight).open()


# ----------------------------------------------------------------------------------------------------------------
# Row 1: async adds from one event loop


async def _add_run(impl: str, where: str, s: AioSettings) -> dict[str, Any]:
    p = await _producer(impl, where, s)
    try:
        await p.warm(min(s.in_flight, s.adds))
        t0, t1, oks = await _bounded(s.adds, s.in_flight, p.add)
    finally:
        await p.close()
    seconds = t1 - t0
    ok = sum(1 for x in oks if x)
    return {"impl": impl, "version": _version(impl), "count": s.adds, "ok": ok, "in_flight": s.in_flight,
            "seconds": round(seconds, 6), "rate": round(ok / seconds, 1) if seconds > 0 else 0.0,
            "complete": ok == s.adds}


def run_add(impl: str, where: str, s: AioSettings) -> dict[str, Any]:
    """One run of the add row for ``impl`` (``where``: ZooKeeper hosts for zkqueue, a Redis URL for the peers)."""
    return asyncio.run(_add_run(impl, where, s))


# ----------------------------------------------------------------------------------------------------------------
# Row 2: end to end, a worker process per system


class _WorkerProc:
    """A ``python -m benchmarks.aio_peers worker ...`` subprocess; its ``TAG {json}`` lines arrive on a queue."""

    def __init__(self, argv: list[str], sleep_s: float) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = _REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        env["AIO_BENCH_SLEEP"] = repr(sleep_s)
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.aio_peers", "worker", *argv],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     cwd=_REPO_ROOT, env=env, text=True, bufsize=1, start_new_session=True)
        self.lines: queue_mod.Queue[tuple[str, dict[str, Any]] | None] = queue_mod.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            tag, _, rest = line.strip().partition(" ")
            if tag in ("READY", "DONE"):
                with contextlib.suppress(ValueError):
                    self.lines.put((tag, json.loads(rest or "{}")))
        self.lines.put(None)

    def expect(self, tag: str, timeout: float) -> dict[str, Any] | None:
        """The payload of the next ``tag`` line; None on timeout; raises if the worker exited first."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                got = self.lines.get(timeout=left)
            except queue_mod.Empty:
                return None
            if got is None:
                self.proc.wait(5)
                raise RuntimeError(f"aio worker exited ({self.proc.returncode}) before {tag}: {self.stderr_tail()}")
            if got[0] == tag:
                return got[1]

    def stderr_tail(self, n: int = 2000) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-n:]

    def close(self) -> None:
        """Close its stdin (the worker stops and exits); kill it if it does not within a few seconds."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self._stderr.close()


async def _e2e_run(impl: str, where: str, s: AioSettings) -> dict[str, Any]:
    p = await _producer(impl, where, s)
    worker: _WorkerProc | None = None
    try:
        queue = p.path if isinstance(p, _ZkProducer) else p.queue  # type: ignore[attr-defined]
        t_spawn = time.monotonic()
        worker = _WorkerProc([impl, "--where", where, "--queue", queue, "--count", str(s.jobs),
                              "--concurrency", str(s.concurrency), "--in-flight", str(s.in_flight)], s.sleep_s)
        if await asyncio.to_thread(worker.expect, "READY", 60.0) is None:
            raise RuntimeError(f"{impl} worker not ready in 60 s: {worker.stderr_tail()}")
        worker_start = time.monotonic() - t_spawn
        await p.warm(min(s.in_flight, s.jobs))
        t0, t_added, oks = await _bounded(s.jobs, s.in_flight, p.add)
        done_at: float | None = None
        if isinstance(p, _ZkProducer):
            while time.time() - t0 < s.max_seconds:
                if await p.completed_count() >= s.jobs:
                    done_at = time.time()
                    break
                await asyncio.sleep(0.005)
        else:
            msg = await asyncio.to_thread(worker.expect, "DONE", max(0.0, t0 + s.max_seconds - time.time()))
            done_at = float(msg["t_done"]) if msg else None
        t_end = done_at or t0 + s.max_seconds
        ok = await p.results(s.jobs)
    finally:
        if worker is not None:
            await asyncio.to_thread(worker.close)
        await p.close()
    seconds = t_end - t0
    return {"impl": impl, "version": _version(impl), "count": s.jobs, "ok": ok, "added": sum(1 for x in oks if x),
            "concurrency": s.concurrency, "sleep_s": s.sleep_s, "seconds": round(seconds, 6),
            "rate": round(ok / seconds, 1) if seconds > 0 else 0.0, "enqueue_seconds": round(t_added - t0, 6),
            "worker_start_seconds": round(worker_start, 3), "complete": done_at is not None and ok == s.jobs}


def run_e2e(impl: str, where: str, s: AioSettings) -> dict[str, Any]:
    """One run of the end-to-end row for ``impl``."""
    return asyncio.run(_e2e_run(impl, where, s))


# ----------------------------------------------------------------------------------------------------------------
# The worker processes


def _say(tag: str, payload: dict[str, Any] | None = None) -> None:
    sys.stdout.write(f"{tag} {json.dumps(payload or {})}\n")
    sys.stdout.flush()


def _stdin_closed(loop: asyncio.AbstractEventLoop) -> asyncio.Event:
    """An event set when stdin reaches EOF (the parent is done with this worker, or gone)."""
    closed = asyncio.Event()

    def read() -> None:
        with contextlib.suppress(Exception):
            while sys.stdin.readline():
                pass
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(closed.set)

    threading.Thread(target=read, daemon=True).start()
    return closed


async def _zk_worker(a: argparse.Namespace) -> None:
    from zkqueue.aio import AsyncJobQueue, connect, disconnect

    client = await connect(a.where)
    async with AsyncJobQueue(client, a.queue) as jq:
        worker = jq.work(zk_job, concurrency=a.concurrency)
        _say("READY")
        await _stdin_closed(asyncio.get_running_loop()).wait()
        await worker.stop()
    await disconnect(client)


class _Counter:
    """Counts job ends in a peer's hook and says DONE with the time of the ``count``-th."""

    def __init__(self, count: int) -> None:
        self.count, self.seen = count, 0

    async def hook(self, ctx: Any) -> None:
        self.seen += 1
        if self.seen == self.count:
            _say("DONE", {"t_done": time.time(), "seen": self.seen})


async def _arq_worker(a: argparse.Namespace) -> None:
    from arq.connections import RedisSettings
    from arq.worker import Worker

    counter = _Counter(a.count)
    ready = asyncio.Event()

    async def startup(ctx: Any) -> None:
        ready.set()

    worker = Worker(functions=[io_job], redis_settings=RedisSettings.from_dsn(a.where), queue_name=a.queue,
                    max_jobs=a.concurrency, poll_delay=0.01, handle_signals=False, after_job_end=counter.hook,
                    on_startup=startup)
    closed = _stdin_closed(asyncio.get_running_loop())
    task = asyncio.ensure_future(worker.main())
    await ready.wait()
    _say("READY")
    await closed.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await worker.close()


async def _saq_worker(a: argparse.Namespace) -> None:
    from saq import Queue, Worker

    counter = _Counter(a.count)
    queue = Queue.from_url(a.where, name=a.queue, max_concurrent_ops=a.in_flight)
    await queue.connect()
    # The worker's first sweep runs as it starts; a job moved to the active list while it runs, before the job
    # is marked active, is "swept" (aborted). Idle means after that first sweep (the next one is 60 s later).
    swept = asyncio.Event()
    sweep = queue.sweep

    async def first_sweep(*args: Any, **kwargs: Any) -> Any:
        try:
            return await sweep(*args, **kwargs)
        finally:
            swept.set()

    queue.sweep = first_sweep  # type: ignore[method-assign]
    worker = Worker(queue, functions=[io_job], concurrency=a.concurrency, after_process=counter.hook)
    closed = _stdin_closed(asyncio.get_running_loop())
    task = asyncio.ensure_future(worker.start())
    await swept.wait()
    _say("READY")
    await closed.wait()
    await worker.stop()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await queue.disconnect()


def worker_main(argv: list[str]) -> int:
    """``python -m benchmarks.aio_peers worker IMPL --where W --queue Q --count N --concurrency C``: READY once
    idle and listening; arq and SAQ say ``DONE {"t_done": ...}`` when their hook saw the N-th job end; all stop
    and exit when stdin closes."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.aio_peers worker")
    ap.add_argument("impl", choices=IMPLS)
    ap.add_argument("--where", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--in-flight", type=int, default=500)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    run = {"zkqueue": _zk_worker, "arq": _arq_worker, "saq": _saq_worker}[a.impl]
    asyncio.run(run(a))
    return 0


# ----------------------------------------------------------------------------------------------------------------
# The harness's aio section


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


def run_section(zk_hosts: str, s: AioSettings, impls: tuple[str, ...] = IMPLS) -> dict[str, Any]:
    """The ``aio`` workload of ``python -m benchmarks``: both rows for zkqueue, arq and SAQ, ``s.repeats``
    interleaved runs each (the order rotating per repeat); medians, and the ratios zkqueue / max(arq, SAQ). A peer
    is "n/a" with the reason when redis-server or its package is missing."""
    na: dict[str, str] = {}
    for name in impls:
        if name != "zkqueue":
            try:
                __import__(name)
            except ImportError:
                na[name] = f"{name} is not installed (pip install -e '.[bench]')"
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {"add": {n: [] for n in impls}, "e2e": {n: [] for n in impls}}
    stack = contextlib.ExitStack()
    url: str | None = None
    if any(n != "zkqueue" and n not in na for n in impls):
        try:
            url = stack.enter_context(redis_server()).url
        except RedisServerMissing as exc:
            for name in impls:
                if name != "zkqueue":
                    na.setdefault(name, str(exc))
    with stack:
        for r in range(s.repeats):
            order = list(impls[r % len(impls):] + impls[: r % len(impls)])
            for row, fn in (("add", run_add), ("e2e", run_e2e)):
                for name in order:
                    if name in na:
                        continue
                    where = zk_hosts if name == "zkqueue" else url
                    try:
                        rows[row][name].append(fn(name, where, s))  # type: ignore[arg-type]
                    except Exception as exc:  # noqa: BLE001 - recorded; the other runs go on
                        log.warning("aio %s run of %s failed: %r", row, name, exc)
                        rows[row][name].append({"impl": name, "error": repr(exc)[:300], "rate": 0.0,
                                                "complete": False})
    medians = {row: {n: _median([x["rate"] for x in runs]) for n, runs in by.items() if runs}
               for row, by in rows.items()}
    ratios: dict[str, float | None] = {}
    for row, meds in medians.items():
        peers = [meds[n] for n in PEERS if meds.get(n)]
        ratios[row] = round(meds["zkqueue"] / max(peers), 2) if meds.get("zkqueue") and peers else None
    passed = {row: (None if ratio is None else ratio >= TARGET) for row, ratio in ratios.items()}
    return {"status": "ok", "settings": asdict(s), "runs": rows, "na": na, "medians": medians, "ratios": ratios,
            "target": f">= {TARGET:g}x the faster of arq and SAQ", "pass": passed,
            "versions": {n: _version(n) for n in impls}}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        return worker_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m benchmarks.aio_peers", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adds", type=int, default=AioSettings.adds)
    ap.add_argument("--jobs", type=int, default=AioSettings.jobs)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--impl", default=",".join(IMPLS), help="comma-separated: zkqueue, arq, saq")
    ap.add_argument("--zk-hosts", help="use this ZooKeeper instead of starting an embedded 3-node ensemble")
    args = ap.parse_args(argv)
    impls = tuple(x.strip() for x in args.impl.split(",") if x.strip())
    if "zkqueue" not in impls or set(impls) - set(IMPLS):
        ap.error(f"--impl takes zkqueue and any of arq, saq; got {args.impl!r}")
    s = AioSettings(adds=args.adds, jobs=args.jobs, repeats=args.repeats)
    with machine.ensemble_hosts(args.zk_hosts) as hosts:
        section = run_section(hosts, s, impls)
    print(json.dumps(section, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
