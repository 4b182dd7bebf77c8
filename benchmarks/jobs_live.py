"""The ``jobs_live`` section of ``python -m benchmarks`` (issue 28): jobs added while the worker works, the shape
users run. The worker process is started first and is running and idle (it has completed one warm-up job, untimed;
``worker_start_seconds`` says how long that took); then the producer adds ``jobs`` jobs in chunks of ``chunk``
while the worker works; the clock runs from the first add until every result is stored. Rows:

- ``raw``: zkqueue's job layer. ``JobQueue.add_all`` per chunk from the harness's process; a worker process
  (``python -m benchmarks.jobs_live worker``) running ``JobQueue.work(double, concurrency=8)``, whose results are
  stored in the completed records. The end: the parent stats the queue's ``completed`` node every 5 ms until it
  holds every job (the stat does not read the records).
- ``bullmq``: BullMQ 6.7.0 on Node (``benchmarks/bullmq_live.mjs``): a producer process adding with
  ``Queue.addBulk`` per chunk, a worker process with a ``Worker`` at concurrency 8 (return values kept: BullMQ's
  default), on a private ``redis-server`` with ``appendonly yes`` and ``appendfsync everysec``. The end: the
  worker's ``completed`` event for the last job. BullMQ and its default client ioredis are installed with npm into
  ``benchmarks/.node/`` (git-ignored) when the section starts; the row is "n/a" with the reason when Node, npm, the
  registry or ``redis-server`` is missing.
- ``task``: zkqueue's task API. ``double.enqueue_many`` per chunk from the harness's process; a ``zkqueue worker
  benchmarks.live_app:app --queues bench --concurrency 8`` process. The end: as ``raw``, on the completed node of
  the queue that holds the warm-up job's record (found once, untimed); if no such node is found, by each job's
  handle (``handle.result``), which reads every record.
- ``cpu_thread`` and ``cpu_process``: ``cpu_jobs`` jobs of about 20 ms of pure-Python CPU each
  (:func:`benchmarks.live_tasks.burn`, calibrated once per section), through ``zkqueue worker ... --pool thread
  --concurrency 2`` and ``--pool process --concurrency 2``.

- ``raw_otel`` and ``task_otel`` (only with ``ZKQ_BENCH_OTEL=1`` in the environment, or ``--rows ...,otel``): the
  ``raw`` and ``task`` rows with OpenTelemetry on (``zkqueue.otel.instrument()`` with an SDK ``TracerProvider`` and
  a ``BatchSpanProcessor`` to an exporter that drops the spans: :func:`benchmarks.live_tasks.otel_tracing`) in the
  producer and in the worker process: a ``send`` span per chunk, a ``process`` span per job. ``otel_cost`` gives
  each one's median over its plain row's (no target).

The task rows need ``zkqueue.App`` and the ``zkqueue worker`` command; while either is missing they are "n/a" with
that reason. Every result is read back and checked after the clock stops; ``ok`` counts the correct ones and
``complete`` is true only if all are there within ``max_seconds``. Ratios of the medians, with their targets:
raw / BullMQ >= 1.0, task / raw >= 0.9, process / thread >= 1.6.

    python -m benchmarks.jobs_live [--jobs 5000] [--cpu-jobs 400] [--repeats 1] [--rows raw,bullmq,task,cpu,otel]
    python -m benchmarks.jobs_live worker --hosts HOSTS --queue PATH [--concurrency 8] [--otel]  (the raw row's worker)
    ZKQ_BENCH_OTEL=1 python -m benchmarks --only jobs_live --no-spark --out DIR      (adds the OpenTelemetry rows)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import live_tasks, machine, report
from benchmarks.jobs_peers import RedisServer, RedisServerMissing, WorkerProcess, redis_server
from benchmarks.prefill import wipe

log = logging.getLogger("zkqueue.benchmarks.jobs_live")

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
_MJS = str(Path(__file__).with_name("bullmq_live.mjs"))

BULLMQ_VERSION = "6.7.0"
#: BullMQ 6 loads its default Redis client, ioredis, as an optional peer: this is the version BullMQ 6.7.0's own
#: tests run on.
IOREDIS_VERSION = "5.11.1"
#: Where the harness installs the Node packages (git-ignored).
NODE_DIR = Path(__file__).with_name(".node")

ROWS = ("raw", "bullmq", "task", "cpu_thread", "cpu_process")
TASK_ROWS = ("task", "cpu_thread", "cpu_process")
#: The zkqueue rows with OpenTelemetry on (``$ZKQ_BENCH_OTEL`` = 1, or ``--rows ...,otel``), and the plain row each
#: one's cost is measured against.
OTEL_ROWS = {"raw_otel": "raw", "task_otel": "task"}
#: The ratios: name -> (numerator row, denominator row, target).
RATIOS = {"raw_bullmq": ("raw", "bullmq", 1.0), "task_raw": ("task", "raw", 0.9),
          "process_thread": ("cpu_process", "cpu_thread", 1.6)}


@dataclass
class LiveSettings:
    """The sizes of the ``jobs_live`` section (quick: 300 jobs in chunks of 100, 40 CPU jobs, one run)."""

    jobs: int = 5_000
    chunk: int = 1_000
    concurrency: int = 8
    cpu_jobs: int = 400
    cpu_ms: float = 20.0
    cpu_concurrency: int = 2
    repeats: int = 3
    max_seconds: float = 120.0

    def __post_init__(self) -> None:
        for key in ("jobs", "chunk", "concurrency", "cpu_jobs", "cpu_concurrency", "repeats"):
            if getattr(self, key) < 1:
                raise ValueError(f"LiveSettings.{key} must be at least 1, not {getattr(self, key)}")
        if self.cpu_ms <= 0 or self.max_seconds <= 0:
            raise ValueError("LiveSettings.cpu_ms and max_seconds must be > 0")


class PeerUnavailable(RuntimeError):
    """A row cannot run on this machine; the message says why (shown as "n/a")."""


def _chunks(count: int, size: int) -> list[range]:
    return [range(start, min(count, start + size)) for start in range(0, count, size)]


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _client(hosts: str) -> Any:
    from zkqueue.transport.handler import new_client  # noqa: PLC0415

    client = new_client(hosts, timeout=15.0)
    client.start(timeout=30)
    return client


def _wait_children(client: Any, path: str, n: int, deadline: float, alive: Any) -> float | None:
    """Stat ``path`` every 5 ms until it has ``n`` children: the time it did; None past ``deadline`` (epoch
    seconds); raises if ``alive()`` turns false (the worker process died)."""
    while time.time() < deadline:
        stat = client.exists(path)
        if stat is not None and stat.numChildren >= n:
            return time.time()
        if not alive():
            raise RuntimeError("the worker process exited during the run")
        time.sleep(0.005)
    return None


def _run_dict(row: str, count: int, ok: int, t0: float, t_added: float, t_end: float, done: bool,
              worker_start: float, **extra: Any) -> dict[str, Any]:
    seconds = t_end - t0
    return {"impl": row, "count": count, "ok": ok, "seconds": round(seconds, 6),
            "rate": round(ok / seconds, 1) if seconds > 0 else 0.0, "enqueue_seconds": round(t_added - t0, 6),
            "worker_start_seconds": round(worker_start, 3), "complete": done and ok == count, **extra}


# ----------------------------------------------------------------------------------------------------------------
# Row 1: the raw JobQueue path


def _run_raw_worker(hosts: str, queue: str, concurrency: int, otel: bool = False) -> int:
    """The raw row's worker process: ``JobQueue.work(double, concurrency)``; READY once working; stops when stdin
    closes. ``otel``: with OpenTelemetry on (the raw_otel row)."""
    from zkqueue.jobs import JobQueue  # noqa: PLC0415

    if otel:
        live_tasks.otel_tracing().__enter__()  # for the process's life
    client = _client(hosts)
    jq = JobQueue(client, queue)
    jq.start()
    worker = jq.work(lambda job: live_tasks.double(int(job.params["n"])), concurrency=concurrency)
    print(f"READY {json.dumps({'pid': os.getpid()})}", flush=True)
    for _ in sys.stdin:  # runs until the parent closes stdin
        pass
    worker.stop()
    jq.close()
    client.stop()
    client.close()
    return 0


def run_raw(hosts: str, s: LiveSettings, *, otel: bool = False) -> dict[str, Any]:
    """One run of the raw row (see the module doc); ``otel``: the raw_otel row's worker (the caller instruments
    this process)."""
    from zkqueue.jobs import JobQueue  # noqa: PLC0415

    path = f"/bench-live-{uuid.uuid4().hex[:8]}"
    client = _client(hosts)
    jq = JobQueue(client, path)
    jq.start()
    worker: WorkerProcess | None = None
    try:
        t_spawn = time.monotonic()
        worker = WorkerProcess(["worker", "--hosts", hosts, "--queue", path, "--concurrency", str(s.concurrency),
                                *(["--otel"] if otel else [])], command=[sys.executable, "-m", "benchmarks.jobs_live"])
        if worker.expect("READY", 60.0) is None:
            raise RuntimeError(f"raw worker not ready in 60 s: {worker.stderr_tail()}")
        alive = lambda: worker.proc.poll() is None  # noqa: E731
        if jq.add_all([("warm-up", {"n": -1})]):
            raise RuntimeError("the warm-up job was rejected")
        if _wait_children(client, jq.paths.completed, 1, time.time() + 60, alive) is None:
            raise RuntimeError(f"the raw worker did not complete the warm-up job in 60 s: {worker.stderr_tail()}")
        worker_start = time.monotonic() - t_spawn
        t0 = time.time()
        for part in _chunks(s.jobs, s.chunk):
            rejected = jq.add_all((f"j{i}", {"n": i}) for i in part)
            if rejected:
                raise RuntimeError(f"{len(rejected)} adds rejected")
        t_added = time.time()
        done_at = _wait_children(client, jq.paths.completed, s.jobs + 1, t0 + s.max_seconds, alive)
        t_end = done_at or time.time()
        if done_at is None:
            worker.kill()  # cut short: the count below is the count at the cap
        results = {job.id: job.result for job in jq.completed()}
        ok = sum(1 for i in range(s.jobs) if results.get(f"j{i}") == live_tasks.double(i))
        return _run_dict("raw_otel" if otel else "raw", s.jobs, ok, t0, t_added, t_end, done_at is not None,
                         worker_start,
                         chunk=s.chunk, concurrency=s.concurrency, version=_version("zkqueue"))
    finally:
        if worker is not None:
            worker.close()
        with contextlib.suppress(Exception):
            jq.close()
        with contextlib.suppress(Exception):
            wipe(client, path)
        client.stop()
        client.close()


# ----------------------------------------------------------------------------------------------------------------
# Row 2: BullMQ


def _installed_version(home: Path, package: str) -> str | None:
    try:
        return str(json.loads((home / "node_modules" / package / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def ensure_bullmq(home: Path | None = None, timeout: float = 300.0) -> Path:
    """The directory holding BullMQ 6.7.0 and ioredis (``node_modules/``), installed with ``npm install`` on the
    first call (``NODE_DIR/bullmq-6.7.0`` by default; a file lock keeps two harnesses from installing at once).
    Raises :class:`PeerUnavailable` saying why when Node or npm is missing or the install fails."""
    home = home or NODE_DIR / f"bullmq-{BULLMQ_VERSION}"
    wanted = {"bullmq": BULLMQ_VERSION, "ioredis": IOREDIS_VERSION}

    def installed() -> bool:
        return all(_installed_version(home, name) == version for name, version in wanted.items())

    if node_executable() is None:
        raise PeerUnavailable("node is not installed (apt-get install -y nodejs npm): BullMQ cannot run")
    if installed():
        return home
    npm = shutil.which("npm")
    if npm is None:
        raise PeerUnavailable(f"npm is not on PATH (apt-get install -y npm): cannot install bullmq@{BULLMQ_VERSION}")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".install-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed():
            return home
        package = home / "package.json"
        if not package.exists():
            package.write_text(json.dumps({"private": True, "description": "BullMQ for zkqueue's benchmarks"}) + "\n")
        argv = [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--fetch-retries=1",
                "--fetch-retry-mintimeout=2000", "--fetch-retry-maxtimeout=10000", "--fetch-timeout=30000",
                *(f"{name}@{version}" for name, version in wanted.items())]
        try:
            done = subprocess.run(argv, cwd=home, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(f"npm install bullmq@{BULLMQ_VERSION} did not finish in {timeout:g} s "
                                  "(is the npm registry reachable?)") from None
        if done.returncode != 0 or not installed():
            head = " ".join((done.stderr or done.stdout).split())[:300]
            raise PeerUnavailable(f"npm install bullmq@{BULLMQ_VERSION} failed (exit {done.returncode}): {head}")
    return home


def node_executable() -> str | None:
    """``node`` on PATH, else /usr/bin/node; None if neither."""
    found = shutil.which("node")
    if found:
        return found
    return "/usr/bin/node" if os.access("/usr/bin/node", os.X_OK) else None


def _node_version() -> str:
    node = node_executable()
    if node is None:
        return "not installed"
    done = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=False)
    return done.stdout.strip() or "unknown"


def run_bullmq(server: RedisServer, home: Path, s: LiveSettings) -> dict[str, Any]:
    """One run of the BullMQ row on ``server`` with the packages in ``home`` (see the module doc)."""
    queue = f"bench-live-{uuid.uuid4().hex[:8]}"
    node = node_executable()
    if node is None:
        raise PeerUnavailable("node is not installed")
    common = ["--host", server.host, "--port", str(server.port), "--queue", queue, "--count", str(s.jobs)]
    tags, env = ("READY", "DONE", "ADDED", "CHECKED"), {"BULLMQ_HOME": str(home)}
    worker: WorkerProcess | None = None
    producer: WorkerProcess | None = None
    try:
        t_spawn = time.monotonic()
        worker = WorkerProcess(["worker", *common, "--concurrency", str(s.concurrency)], command=[node, _MJS],
                               tags=tags, env=env)
        if worker.expect("READY", 60.0) is None:
            raise RuntimeError(f"BullMQ worker not ready in 60 s: {worker.stderr_tail()}")
        worker_start = time.monotonic() - t_spawn
        producer = WorkerProcess(["produce", *common, "--chunk", str(s.chunk)], command=[node, _MJS], tags=tags,
                                 env=env)
        if producer.expect("READY", 60.0) is None:
            raise RuntimeError(f"BullMQ producer not ready in 60 s: {producer.stderr_tail()}")
        producer.send("GO")
        added = producer.expect("ADDED", s.max_seconds)
        if added is None:
            raise RuntimeError(f"BullMQ producer did not finish its adds in {s.max_seconds:g} s: "
                               f"{producer.stderr_tail()}")
        t0, t_added = float(added["t0"]), float(added["t_added"])
        done = worker.expect("DONE", max(0.0, t0 + s.max_seconds - time.time()))
        # The run ends once every job completed and the producer has every add acknowledged, as zkqueue's rows end
        # (they look for the end only after their adds returned): the worker process can see the last job complete
        # before the producer's process has read the acknowledgement of its last add.
        t_end = max(float(done["t_done"]), t_added) if done else time.time()
        if done is None:
            worker.kill()  # cut short: the count below is the count at the cap
        producer.send("CHECK")
        checked = producer.expect("CHECKED", 120.0) or {}
        return _run_dict("bullmq", s.jobs, int(checked.get("correct", 0)), t0, t_added, t_end, done is not None,
                         worker_start, chunk=s.chunk, concurrency=s.concurrency,
                         version=_installed_version(home, "bullmq"), completed=checked.get("completed"))
    finally:
        for proc in (producer, worker):
            if proc is not None:
                proc.close()


# ----------------------------------------------------------------------------------------------------------------
# Rows 3 and 4: the task API and the zkqueue worker command


def worker_command() -> list[str]:
    """How to run the ``zkqueue`` command: the console script beside this interpreter, else its entry point."""
    script = Path(sys.executable).with_name("zkqueue")
    if os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-c", "import sys; from zkqueue.ops.cli import main; sys.exit(main())"]


def task_api_missing(command: list[str] | None = None) -> str | None:
    """Why the task rows cannot run in this checkout (None when they can): they need ``zkqueue.App`` and the
    ``zkqueue worker`` command (issue 28's task API), checked by import and by ``zkqueue worker --help``."""
    import zkqueue  # noqa: PLC0415

    missing = []
    if not hasattr(zkqueue, "App"):
        missing.append("zkqueue.App")
    try:
        done = subprocess.run([*(command or worker_command()), "worker", "--help"], capture_output=True, text=True,
                              timeout=60, check=False)
        if done.returncode != 0:
            missing.append("the `zkqueue worker` command")
    except (OSError, subprocess.TimeoutExpired) as exc:
        missing.append(f"the `zkqueue worker` command ({exc!r})")
    if not missing:
        return None
    return (f"{' and '.join(missing)} not in this checkout yet (issue 28's task API): the row runs once "
            f"{'they land' if len(missing) > 1 else 'it lands'}")


class _CliWorker:
    """A ``zkqueue worker`` process; its output goes to a file (shown when it fails)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=_REPO_ROOT, env=env, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 2000) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-n:]

    def kill(self) -> None:
        """SIGKILL to its process group (its pool's children too) at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM (a warm shutdown), then SIGKILL to its process group (its pool's children too) after ``grace``."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        self.kill()  # whatever it left behind (its own session)
        self._log.close()


def _find_completed(client: Any, root: str, node: str, max_depth: int = 6) -> str | None:
    """The path of a ``completed`` node under ``root`` that holds a child ``node`` (the warm-up job's record), by a
    breadth-first walk; None if there is none. Run once per task run, before the clock starts."""
    level = [root]
    for _ in range(max_depth):
        below = []
        for path in level:
            try:
                children = client.get_children(path)
            except Exception:  # noqa: BLE001 - gone meanwhile
                continue
            if "completed" in children and client.exists(f"{path}/completed/{node}") is not None:
                return f"{path}/completed"
            if len(children) <= 1000:  # not a queue's items
                below.extend(f"{path.rstrip('/')}/{c}" for c in children)
        level = below
    return None


def _stored_result(handle: Any) -> Any:
    """The handle's stored result (the job is done), or None if it failed or cannot be read."""
    try:
        return handle.result(timeout=5.0)
    except Exception as exc:  # noqa: BLE001 - counted as not ok
        log.debug("job %s has no result: %r", getattr(handle, "id", "?"), exc)
        return None


def run_task(hosts: str, s: LiveSettings, *, row: str = "task", pool: str | None = None,
             command: list[str] | None = None, cpu_iters: int | None = None, otel: bool = False) -> dict[str, Any]:
    """One run of a task row: ``row="task"`` (trivial :func:`~benchmarks.live_tasks.double` jobs, ``s.jobs`` of
    them, concurrency ``s.concurrency``) or a CPU row (``cpu_iters`` steps of :func:`~benchmarks.live_tasks.burn`,
    ``s.cpu_jobs`` jobs, ``--pool pool --concurrency s.cpu_concurrency``). Each run gets a fresh chroot. ``otel``:
    the worker runs with OpenTelemetry on (``$ZKQ_BENCH_OTEL``; the caller instruments this process)."""
    from zkqueue.jobs.names import node_id  # noqa: PLC0415

    cpu = cpu_iters is not None
    count, concurrency = (s.cpu_jobs, s.cpu_concurrency) if cpu else (s.jobs, s.concurrency)
    chroot = f"/bench-live-task-{uuid.uuid4().hex[:8]}"
    connect = f"{hosts}{chroot}"
    client = _client(hosts)
    client.ensure_path(chroot)
    app: Any = None
    worker: _CliWorker | None = None
    try:
        app, tasks = live_tasks.make_app(connect)
        task = tasks["burn" if cpu else "double"]
        args_of = (lambda i: (i, cpu_iters)) if cpu else (lambda i: (i,))
        env = dict(os.environ, ZKQUEUE_CONNECT=connect, PYTHONUNBUFFERED="1")
        env[live_tasks.OTEL_ENV] = "1" if otel else "0"  # only the otel row's worker is instrumented
        env["PYTHONPATH"] = _REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        argv = [*(command or worker_command()), "worker", "benchmarks.live_app:app", "--queues", live_tasks.QUEUE,
                "--concurrency", str(concurrency), *(["--pool", pool] if pool else [])]
        t_spawn = time.monotonic()
        worker = _CliWorker(argv, env)
        (probe,) = task.enqueue_many([args_of(-1)])
        deadline = time.monotonic() + 120
        while True:  # the warm-up job: the worker is running and idle once it is done
            try:
                probe.result(timeout=1.0)
                break
            except TimeoutError:
                if not worker.alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"zkqueue worker did not complete the warm-up job: {worker.log_tail()}") \
                        from None
        worker_start = time.monotonic() - t_spawn
        completed = _find_completed(client, chroot, node_id(str(probe.id)))
        t0 = time.time()
        handles: list[Any] = []
        for part in _chunks(count, s.chunk):
            handles.extend(task.enqueue_many([args_of(i) for i in part]))
        t_added = time.time()
        if completed is not None:
            done_at = _wait_children(client, completed, count + 1, t0 + s.max_seconds, worker.alive)
        else:
            done_at = None
            with contextlib.suppress(TimeoutError):
                for handle in handles:
                    handle.result(timeout=max(0.001, t0 + s.max_seconds - time.time()))
                done_at = time.time()
        t_end = done_at or time.time()
        if done_at is None:
            worker.kill()  # cut short: the count below is the count at the cap
        results = [_stored_result(h) for h in handles] if done_at else []
        if done_at:
            ok = sum(1 for i, r in enumerate(results) if isinstance(r, dict) and r.get("n") == i
                     and (cpu or r == live_tasks.double(i)))
        else:  # cut short: the jobs done by the cap (one read each, not the results)
            ok = sum(1 for h in handles if str(getattr(h.state, "name", h.state)).upper() == "COMPLETED")
        extra: dict[str, Any] = {"pool": pool or "default", "concurrency": concurrency, "chunk": s.chunk,
                                 "end_seen_by": "completed node" if completed else "handles"}
        if cpu:
            spent = sorted(r["cpu_ms"] for r in results if isinstance(r, dict) and "cpu_ms" in r)
            extra.update(cpu_iters=cpu_iters, cpu_ms_per_job=spent[len(spent) // 2] if spent else None)
        return _run_dict(row, count, ok, t0, t_added, t_end, done_at is not None, worker_start, **extra)
    finally:
        if worker is not None:
            worker.stop()
        if app is not None and hasattr(app, "close"):
            with contextlib.suppress(Exception):
                app.close()
        with contextlib.suppress(Exception):
            wipe(client, chroot)
        client.stop()
        client.close()


# ----------------------------------------------------------------------------------------------------------------
# The section


def _rotate(names: list[str], r: int) -> list[str]:
    k = r % len(names) if names else 0
    return names[k:] + names[:k]


def _bullmq_peer(stack: contextlib.ExitStack, na: dict[str, str]) -> tuple[RedisServer, Path] | None:
    """BullMQ's packages and a private redis-server with AOF everysec (stopped by ``stack``); None, with
    ``na["bullmq"]`` saying why, if either cannot be had."""
    try:
        home = ensure_bullmq()
        return stack.enter_context(redis_server(appendonly=True)), home
    except (PeerUnavailable, RedisServerMissing) as exc:
        na["bullmq"] = str(exc)
    except RuntimeError as exc:  # redis-server did not start
        na["bullmq"] = f"redis-server did not start: {exc}"[:300]
    return None


def run_section(zk_hosts: str, s: LiveSettings, rows: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The ``jobs_live`` section: every row of ``rows`` ``s.repeats`` times, interleaved (the order rotating per
    repeat); a summary (median, min, max, spread) per row, the ratios of the medians and their pass marks. Rows that
    cannot run here are in ``na`` with the reason. ``rows`` None: :data:`ROWS`, and the OpenTelemetry rows when
    ``$ZKQ_BENCH_OTEL`` is 1."""
    if rows is None:
        rows = ROWS + (tuple(OTEL_ROWS) if os.environ.get(live_tasks.OTEL_ENV) == "1" else ())
    started = time.monotonic()
    na: dict[str, str] = {}
    if any(r in TASK_ROWS or r == "task_otel" for r in rows):
        reason = task_api_missing()
        if reason:
            na.update({r: reason for r in (*TASK_ROWS, "task_otel") if r in rows})
    if any(r in OTEL_ROWS for r in rows):
        reason = live_tasks.otel_missing()
        if reason:
            na.update({r: reason for r in OTEL_ROWS if r in rows})
    runs: dict[str, list[dict[str, Any]]] = {r: [] for r in rows}
    cpu_iters = live_tasks.calibrate(s.cpu_ms) if any(r.startswith("cpu_") and r not in na for r in rows) else None
    redis_version = None
    with contextlib.ExitStack() as stack:
        peer = _bullmq_peer(stack, na) if "bullmq" in rows else None
        if peer is not None:
            redis_version = peer[0].version
        for r in range(s.repeats):
            order = _rotate([x for x in ("raw", "bullmq", "task", *OTEL_ROWS) if x in rows], r)
            order += _rotate([x for x in ("cpu_thread", "cpu_process") if x in rows], r)
            for row in order:
                if row in na:
                    continue
                try:
                    if row == "raw":
                        run = run_raw(zk_hosts, s)
                    elif row == "bullmq":
                        assert peer is not None
                        run = run_bullmq(peer[0], peer[1], s)
                    elif row == "task":
                        run = run_task(zk_hosts, s)
                    elif row in OTEL_ROWS:  # the producer (this process) instrumented too, for this run only
                        with live_tasks.otel_tracing():
                            run = (run_raw(zk_hosts, s, otel=True) if row == "raw_otel"
                                   else run_task(zk_hosts, s, row=row, otel=True))
                    else:
                        run = run_task(zk_hosts, s, row=row, pool=row.removeprefix("cpu_"), cpu_iters=cpu_iters)
                except Exception as exc:  # noqa: BLE001 - recorded; the other runs go on
                    log.warning("jobs_live %s run failed: %r", row, exc)
                    run = {"impl": row, "error": repr(exc)[:500], "rate": 0.0, "complete": False}
                runs[row].append(run)
    summary = {row: report.summarize([x for x in rs if not x.get("error")], "rate") for row, rs in runs.items()}
    ratios: dict[str, float | None] = {}
    passed: dict[str, bool | None] = {}
    for name, (top, bottom, target) in RATIOS.items():
        a, b = (summary.get(top) or {}).get("median"), (summary.get(bottom) or {}).get("median")
        ratios[name] = round(a / b, 2) if a and b else None
        whole = all(x.get("complete") for x in runs.get(top, []) + runs.get(bottom, []))
        passed[name] = None if ratios[name] is None else (ratios[name] >= target and whole)
    otel_cost: dict[str, float | None] = {}
    for row, plain in OTEL_ROWS.items():  # jobs/s with OpenTelemetry on over jobs/s without (no target)
        if row in rows:
            a, b = (summary.get(row) or {}).get("median"), (summary.get(plain) or {}).get("median")
            otel_cost[row] = round(a / b, 2) if a and b else None
    return {"status": "ok", "settings": asdict(s), "rows": list(rows), "runs": runs, "na": na, "summary": summary,
            "medians": {row: sm["median"] for row, sm in summary.items()}, "ratios": ratios, "pass": passed,
            **({"otel_cost": otel_cost} if otel_cost else {}),
            "targets": {name: target for name, (_a, _b, target) in RATIOS.items()}, "cpu_iters": cpu_iters,
            "versions": {"zkqueue": _version("zkqueue"), "bullmq": BULLMQ_VERSION, "ioredis": IOREDIS_VERSION,
                         "node": _node_version(), "redis": redis_version},
            "redis_config": "appendonly yes, appendfsync everysec", "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        wp = argparse.ArgumentParser(prog="python -m benchmarks.jobs_live worker")
        wp.add_argument("--hosts", required=True)
        wp.add_argument("--queue", required=True)
        wp.add_argument("--concurrency", type=int, default=8)
        wp.add_argument("--otel", action="store_true", help="with OpenTelemetry on (the raw_otel row)")
        a = wp.parse_args(argv[1:])
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        return _run_raw_worker(a.hosts, a.queue, a.concurrency, a.otel)
    ap = argparse.ArgumentParser(prog="python -m benchmarks.jobs_live", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=LiveSettings.jobs)
    ap.add_argument("--chunk", type=int, default=LiveSettings.chunk)
    ap.add_argument("--cpu-jobs", type=int, default=LiveSettings.cpu_jobs)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--rows", default="raw,bullmq,task,cpu",
                    help="comma-separated: raw, bullmq, task, cpu, otel (raw_otel and task_otel: OpenTelemetry on)")
    ap.add_argument("--zk-hosts", help="use this ZooKeeper instead of starting an embedded 3-node ensemble")
    args = ap.parse_args(argv)
    wanted = {x.strip() for x in args.rows.split(",") if x.strip()}
    if wanted - {"raw", "bullmq", "task", "cpu", "otel"}:
        ap.error(f"--rows takes raw, bullmq, task, cpu and otel; got {args.rows!r}")
    rows = tuple(r for r in ROWS if r in wanted or (r.startswith("cpu_") and "cpu" in wanted))
    if "otel" in wanted or os.environ.get(live_tasks.OTEL_ENV) == "1":
        rows += tuple(r for r, plain in OTEL_ROWS.items() if plain in wanted)
    s = LiveSettings(jobs=args.jobs, chunk=args.chunk, cpu_jobs=args.cpu_jobs, repeats=args.repeats)
    with machine.ensemble_hosts(args.zk_hosts) as hosts:
        section = run_section(hosts, s, rows)
    print(json.dumps(section, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
