"""The ``jobs`` workload's peers: RQ and Celery, each on a private local ``redis-server``.

The workload, the same for every implementation: enqueue ``count`` jobs, each with a small JSON-able params dict
(``{"n": i, "pad": "x" * 80}``); then ONE worker process handles them, and the queue system STORES the result of
each (``params["n"] * 2``): RQ in Redis (its results), Celery in its Redis result backend.

Timing, the same for both:

- the worker process is started first, outside timing, and timing begins once it reported that it is connected and
  idle (``worker_start_seconds`` says how long that took);
- t0: the first job is enqueued; ``enqueue_seconds``: until the last one was enqueued;
- the worker is then released (RQ: a ``GO`` line, and ``SimpleWorker.work(burst=True)``; Celery: remote control
  ``add_consumer`` of the job queue, the worker having listened on an empty queue only, then a no-op task on that
  queue to end its pending 1 s BRPOP): enqueueing and processing do not overlap; ``process_seconds``: from the
  release until the last result was stored (Celery's ``first_task_after_release`` shows what the release cost);
- ``seconds``: from t0 until the last result was stored (``enqueue_seconds + process_seconds``, plus the release);
  ``rate`` = jobs / seconds.

"Last result stored" is reported by the worker: RQ's burst ``work()`` returns after the last job's result was
written; Celery's ``task_postrun`` signal for the N-th task fires after ``mark_as_done`` wrote the result. After
timing, every result is read back from Redis and checked (``params["n"] * 2``); ``jobs`` counts the correct ones
and ``complete`` is true only if all ``count`` are there, correct, within ``max_seconds``. A run that does not
finish in ``max_seconds`` (from t0) returns ``complete=False`` with the count of results stored by then.

Each side uses its documented fast paths and defaults: RQ's ``Queue.enqueue_many`` (one pipeline), its
``SimpleWorker`` (no fork per job) in burst mode, default result TTL; Celery's ``apply_async`` with one producer
for all jobs, Redis broker and result backend, ``--pool solo``, concurrency 1, default prefetch (4), results stored.
Both workers log at WARNING (no line per job).

    python -m benchmarks.jobs_peers --count 2000 [--impl rq,celery] [--max-seconds 120]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue as queue_mod
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

#: The folder holding the ``benchmarks`` package, so worker subprocesses import it from anywhere.
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)

INSTALL_HINT = "apt-get install -y redis-server"


class RedisServerMissing(RuntimeError):
    """No ``redis-server`` executable: the message says how to install it."""


def find_redis_server() -> str | None:
    """Path of the ``redis-server`` executable: ``$REDIS_SERVER`` if set, else the one on PATH; None if none."""
    env = os.environ.get("REDIS_SERVER")
    if env:
        return env if os.access(env, os.X_OK) else None
    found = shutil.which("redis-server")
    if found:
        return found
    for candidate in ("/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass
class RedisServer:
    """A running private ``redis-server``."""

    host: str
    port: int
    pid: int
    version: str
    dir: str

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def __str__(self) -> str:
        return self.url


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _redis_command(host: str, port: int, *words: str, timeout: float = 1.0) -> bytes:
    """One inline command over a plain socket (no client library needed); the raw reply."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall((" ".join(words) + "\r\n").encode())
        data = b""
        while True:
            head, sep, _ = data.partition(b"\r\n")
            if sep and (head[:1] != b"$" or int(head[1:]) < 0 or len(data) >= len(head) + 2 + int(head[1:]) + 2):
                return data
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk


def _stop(proc: subprocess.Popen[Any], grace: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(grace)


@contextlib.contextmanager
def redis_server(port: int | None = None, host: str = "127.0.0.1",
                 startup_timeout: float = 15.0, appendonly: bool = False) -> Iterator[RedisServer]:
    """Start a private ``redis-server`` on ``host:port`` (a free loopback port by default) with persistence off
    (``--save '' --appendonly no``), in a temporary directory; yield it once it answers PING; stop it on exit,
    exceptions included. ``appendonly``: keep an append-only file instead, fsynced every second (``--appendonly
    yes --appendfsync everysec``, Redis's recommended durable set-up). Raises :class:`RedisServerMissing`
    (mentioning ``apt-get install -y redis-server``) if there is no ``redis-server``."""
    exe = find_redis_server()
    if exe is None:
        where = (f"$REDIS_SERVER={os.environ['REDIS_SERVER']} is not executable" if os.environ.get("REDIS_SERVER")
                 else "not on PATH")
        raise RedisServerMissing(f"redis-server not found ({where}); install it with: {INSTALL_HINT}")
    tries = 1 if port is not None else 3  # a free port picked here may be taken before redis binds it
    last_error = ""
    for _ in range(tries):
        the_port = port if port is not None else _free_port(host)
        tmp = tempfile.mkdtemp(prefix="zkqueue-redis-")
        log_path = os.path.join(tmp, "redis.log")
        proc: subprocess.Popen[Any] | None = None
        try:
            with open(log_path, "wb") as log_fh:
                proc = subprocess.Popen(
                    [exe, "--bind", host, "--port", str(the_port), "--save", "",
                     *(["--appendonly", "yes", "--appendfsync", "everysec"] if appendonly else ["--appendonly", "no"]),
                     "--dir", tmp, "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning"],
                    stdin=subprocess.DEVNULL, stdout=log_fh, stderr=subprocess.STDOUT, cwd=tmp,
                    start_new_session=True,  # a Ctrl-C of the harness reaches it only through our cleanup
                )
            deadline = time.monotonic() + startup_timeout
            version = ""
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    if _redis_command(host, the_port, "PING").startswith(b"+PONG"):
                        info = dict(ln.split(":", 1) for ln in _redis_command(host, the_port, "INFO", "server")
                                    .decode(errors="replace").splitlines() if ":" in ln)
                        if info.get("process_id", "").strip() == str(proc.pid):  # ours, not another on that port
                            version = info.get("redis_version", "").strip()
                            break
                except OSError:
                    pass
                time.sleep(0.02)
            else:
                with open(log_path, encoding="utf-8", errors="replace") as fh:
                    last_error = fh.read()[-2000:]
                continue  # finally stops it; try another port
            yield RedisServer(host=host, port=the_port, pid=proc.pid, version=version, dir=tmp)
            return
        finally:
            if proc is not None:
                _stop(proc)
            shutil.rmtree(tmp, ignore_errors=True)
    raise RuntimeError(f"redis-server did not start and answer PING on {host}:{port or '(free port)'}; its log:\n{last_error}")


# ----------------------------------------------------------------------------------------------------------------
# The worker subprocess


class WorkerProcess:
    """A ``benchmarks.jobs_worker`` subprocess (or ``command`` + ``argv``: any process speaking the same protocol);
    its protocol lines (``TAG {json}``, a tag of ``tags``) arrive on a queue. ``env``: variables added to this
    process's environment."""

    def __init__(self, argv: list[str], command: list[str] | None = None,
                 tags: tuple[str, ...] = ("STARTED", "READY", "DONE"), env: dict[str, str] | None = None) -> None:
        env = {**os.environ, **(env or {})}
        env["PYTHONPATH"] = _REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._tags = tags
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([*(command or [sys.executable, "-m", "benchmarks.jobs_worker"]), *argv],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     cwd=_REPO_ROOT, env=env, text=True, bufsize=1, start_new_session=True)
        self.lines: queue_mod.Queue[tuple[str, dict[str, Any]] | None] = queue_mod.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            tag, _, rest = line.strip().partition(" ")
            if tag in self._tags:
                try:
                    self.lines.put((tag, json.loads(rest or "{}")))
                except ValueError:
                    pass
        self.lines.put(None)  # EOF

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
                raise RuntimeError(f"worker process exited ({self.proc.returncode}) before {tag}: "
                                   f"{self.stderr_tail()}")
            if got[0] == tag:
                return got[1]

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        """Stop it at once (a run past its time cap), so that the partial count is the count at the cap."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)

    def stderr_tail(self, n: int = 2000) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-n:]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(3)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._stderr.close()


def _ready_worker(label: str, argv: list[str]) -> tuple[WorkerProcess, float]:
    """Start a worker process and wait until it reports READY; (the worker, seconds it took)."""
    t_spawn = time.monotonic()
    worker = WorkerProcess(argv)
    if worker.expect("READY", 60.0) is None:
        tail = worker.stderr_tail()
        worker.close()
        raise RuntimeError(f"{label} worker not ready in 60 s: {tail}")
    return worker, time.monotonic() - t_spawn


def _params(i: int) -> dict[str, Any]:
    return {"n": i, "pad": "x" * 80}


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _server_version(redis_url: str) -> str:
    from redis import Redis

    with contextlib.closing(Redis.from_url(redis_url)) as r:
        return str(r.info("server").get("redis_version", ""))


def _result(impl: str, count: int, done: int, t0: float, t_end: float, t_enqueued: float, t_release: float,
            complete: bool, worker_start: float, redis_url: str, **extra: Any) -> dict[str, Any]:
    seconds = t_end - t0
    return {
        "impl": impl, "version": _version(impl), "jobs": done, "count": count,
        "seconds": round(seconds, 6), "rate": round(done / seconds, 1) if seconds > 0 else 0.0,
        "enqueue_seconds": round(t_enqueued - t0, 6), "process_seconds": round(t_end - t_release, 6),
        "complete": complete, "worker_start_seconds": round(worker_start, 3),
        "redis_version": _server_version(redis_url), "redis_py_version": _version("redis"), **extra,
    }


# ----------------------------------------------------------------------------------------------------------------
# RQ


def _rq_count_correct(conn: Any, ids: list[str]) -> int:
    """How many of the jobs have a stored, correct result (read back from Redis)."""
    from rq.job import Job

    ok = 0
    for i, job in enumerate(Job.fetch_many(ids, connection=conn)):
        if job is not None and job.return_value(refresh=True) == i * 2:
            ok += 1
    return ok


def run_rq(count: int, redis_url: str, max_seconds: float) -> dict[str, Any]:
    """One RQ run of the jobs workload on ``redis_url`` (see the module doc for what is timed)."""
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count}")
    from redis import Redis
    from rq import Queue

    from benchmarks.jobs_worker import RQ_FUNC

    qname = f"zkqueue-bench-{uuid.uuid4().hex[:8]}"
    conn = Redis.from_url(redis_url)
    q = Queue(qname, connection=conn)
    worker, worker_start = _ready_worker("RQ", ["rq", "--redis-url", redis_url, "--queue", qname])
    try:
        conn.ping()  # connected outside timing
        t0 = time.time()
        jobs = q.enqueue_many([Queue.prepare_data(RQ_FUNC, args=(_params(i),)) for i in range(count)])
        t_enqueued = time.time()
        worker.send("GO")
        done_msg = worker.expect("DONE", max(0.0, t0 + max_seconds - time.time()))
        if done_msg is None:
            worker.kill()
        t_end = float(done_msg["t_done"]) if done_msg else t0 + max_seconds
        ids = [j.id for j in jobs]
        done = _rq_count_correct(conn, ids)
        complete = done_msg is not None and done == count
        return _result("rq", count, done, t0, t_end, t_enqueued, float(done_msg["t_go"]) if done_msg else t_enqueued,
                       complete, worker_start, redis_url,
                       worker_finished=done_msg.get("finished") if done_msg else None,
                       worker_failed=done_msg.get("failed") if done_msg else None)
    finally:
        worker.close()
        with contextlib.suppress(Exception):
            q.delete(delete_jobs=True)
        conn.close()


# ----------------------------------------------------------------------------------------------------------------
# Celery


def _celery_count_correct(app: Any, ids: list[str], chunk: int = 1000) -> int:
    """How many of the tasks have a stored SUCCESS result equal to ``n * 2`` (read back from the result backend)."""
    backend = app.backend
    ok = 0
    for start in range(0, len(ids), chunk):
        part = ids[start:start + chunk]
        raws = backend.mget([backend.get_key_for_task(tid) for tid in part])
        for i, raw in enumerate(raws, start):
            if raw is None:
                continue
            meta = backend.decode_result(raw)
            if meta.get("status") == "SUCCESS" and meta.get("result") == i * 2:
                ok += 1
    return ok


def run_celery(count: int, redis_url: str, max_seconds: float) -> dict[str, Any]:
    """One Celery run of the jobs workload on ``redis_url`` (see the module doc for what is timed)."""
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count}")
    from benchmarks.jobs_worker import CELERY_TASK_NAME, CELERY_WAKE_NAME, make_celery_app

    tag = uuid.uuid4().hex[:8]
    qname, idle, hostname = f"zkqueue-bench-{tag}", f"zkqueue-bench-idle-{tag}", f"bench-{tag}@localhost"
    app = make_celery_app(redis_url, qname)
    task = app.tasks[CELERY_TASK_NAME]
    t_spawn = time.monotonic()
    worker = WorkerProcess(["celery", "--redis-url", redis_url, "--queue", qname, "--idle-queue", idle,
                      "--hostname", hostname, "--count", str(count)])
    try:
        if worker.expect("READY", 120.0) is None:
            raise RuntimeError(f"Celery worker not ready in 120 s: {worker.stderr_tail()}")
        worker_start = time.monotonic() - t_spawn
        app.backend.client.ping()  # connected outside timing, like RQ's client below (not per-job work)
        with app.producer_or_acquire() as producer:
            producer.connection.ensure_connection(max_retries=3)
            t0 = time.time()
            ids = [task.apply_async(args=(_params(i),), producer=producer).id for i in range(count)]
            t_enqueued = time.time()
        replies = app.control.add_consumer(qname, destination=[hostname], reply=True, timeout=10.0, limit=1)
        t_release = t_enqueued
        if not replies:
            raise RuntimeError(f"Celery worker did not answer add_consumer({qname}): {worker.stderr_tail()}")
        app.send_task(CELERY_WAKE_NAME, queue=idle, ignore_result=True)  # see jobs_worker.CELERY_WAKE_NAME
        done_msg = worker.expect("DONE", max(0.0, t0 + max_seconds - time.time()))
        if done_msg is None:
            worker.kill()
        t_end = float(done_msg["t_done"]) if done_msg else t0 + max_seconds
        done = _celery_count_correct(app, ids)
        complete = done_msg is not None and done == count
        return _result("celery", count, done, t0, t_end, t_enqueued, t_release, complete, worker_start, redis_url,
                       worker_handled=done_msg.get("handled") if done_msg else None,
                       first_task_after_release=round(float(done_msg["t_first"]) - t_release, 6)
                       if done_msg else None)
    finally:
        worker.close()
        with contextlib.suppress(Exception):
            app.close()


# ----------------------------------------------------------------------------------------------------------------
# CLI

RUNNERS = {"rq": run_rq, "celery": run_celery}


# ----------------------------------------------------------------------------------------------------------------
# the harness's jobs section


def run_section(zk_hosts: str, count: int, repeats: int, max_seconds: float) -> dict[str, Any]:
    """The ``jobs`` workload of ``python -m benchmarks``: zkqueue, RQ and Celery, ``repeats`` interleaved runs each
    (the order rotating per repeat), on the harness's ZooKeeper and a private redis-server. Medians and the ratios
    zkqueue / peer; the peers are "n/a" with the reason when redis-server or their packages are missing."""
    impls = ["zkqueue", "rq", "celery"]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in impls}
    na: dict[str, str] = {}
    for name in ("rq", "celery"):
        try:
            __import__({"rq": "rq", "celery": "celery"}[name])
        except ImportError:
            na[name] = f"{name} is not installed (pip install -e '.[bench]')"
    stack = contextlib.ExitStack()
    url = None
    if len(na) < 2:
        try:
            url = stack.enter_context(redis_server()).url
        except RedisServerMissing as exc:
            for name in ("rq", "celery"):
                na.setdefault(name, str(exc))
    with stack:
        for r in range(repeats):
            order = impls[r % len(impls):] + impls[: r % len(impls)]
            for name in order:
                if name in na:
                    continue
                try:
                    if name == "zkqueue":
                        runs[name].append(run_zkqueue(count, zk_hosts, max_seconds))
                    else:
                        runs[name].append(RUNNERS[name](count, url, max_seconds))  # type: ignore[arg-type]
                except Exception as exc:  # noqa: BLE001 - recorded; the other runs go on
                    runs[name].append({"impl": name, "error": repr(exc)[:300], "rate": 0.0, "complete": False})
    medians = {name: sorted(r["rate"] for r in rs)[len(rs) // 2] for name, rs in runs.items() if rs}
    ratios = {name: round(medians["zkqueue"] / medians[name], 2)
              for name in ("rq", "celery") if medians.get(name) and medians.get("zkqueue")}
    return {"status": "ok", "count": count, "repeats": repeats, "runs": runs, "na": na, "medians": medians,
            "ratios": ratios, "target": ">= 2x each peer",
            "pass": bool(ratios) and len(ratios) == 2 and all(v >= 2.0 for v in ratios.values())}


# ----------------------------------------------------------------------------------------------------------------
# zkqueue


def run_zkqueue(count: int, hosts: str, max_seconds: float) -> dict[str, Any]:
    """One zkqueue run of the jobs workload on the ZooKeeper at ``hosts``, timed like the peers: the worker process
    starts first (untimed); t0 is the first add (``add_all``, as RQ's ``enqueue_many``); the worker is released
    after the last add; the end is when the last completed record (with its result) is stored, seen by a stat of
    the completed node every 5 ms. Every result is read back and checked."""
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count}")
    from zkqueue.jobs import JobQueue
    from zkqueue.transport.handler import new_client

    path = f"/bench-jobs-{uuid.uuid4().hex[:8]}"
    client = new_client(hosts, timeout=15.0)
    client.start(timeout=30)
    jq = JobQueue(client, path)
    jq.start()
    worker, worker_start = _ready_worker("zkqueue", ["zkqueue", "--hosts", hosts, "--queue", path])
    try:
        t0 = time.time()
        rejected = jq.add_all((f"j{i}", _params(i)) for i in range(count))
        t_enqueued = time.time()
        if rejected:
            raise RuntimeError(f"{len(rejected)} adds rejected")
        worker.send("GO")
        t_release = time.time()
        completed = jq.paths.completed
        done_at = None
        while time.time() - t0 < max_seconds:
            stat = client.exists(completed)
            if stat is not None and stat.numChildren >= count:
                done_at = time.time()
                break
            time.sleep(0.005)
        t_end = done_at or t0 + max_seconds
        worker.close()
        results = {j.id: j.result for j in jq.completed()}
        done = sum(1 for i in range(count) if results.get(f"j{i}") == i * 2)
        seconds = t_end - t0
        return {
            "impl": "zkqueue", "version": _version("zkqueue"), "jobs": done, "count": count,
            "seconds": round(seconds, 6), "rate": round(done / seconds, 1) if seconds > 0 else 0.0,
            "enqueue_seconds": round(t_enqueued - t0, 6), "process_seconds": round(t_end - t_release, 6),
            "complete": done_at is not None and done == count, "worker_start_seconds": round(worker_start, 3),
        }
    finally:
        worker.close()
        with contextlib.suppress(Exception):
            jq.close()
            client.delete(path, recursive=True)
        client.stop()
        client.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.jobs_peers", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--impl", default="zkqueue,rq,celery", help="comma-separated: zkqueue, rq, celery")
    ap.add_argument("--zk-hosts", help="zkqueue: use this ZooKeeper instead of starting an embedded 3-node ensemble")
    ap.add_argument("--redis-url", help="use this Redis instead of starting a private redis-server")
    args = ap.parse_args(argv)
    impls = [s.strip() for s in args.impl.split(",") if s.strip()]
    for name in impls:
        if name not in RUNNERS and name != "zkqueue":
            ap.error(f"unknown impl {name!r}; choose from zkqueue, {', '.join(RUNNERS)}")
    stack = contextlib.ExitStack()
    zk_hosts = args.zk_hosts
    if "zkqueue" in impls and not zk_hosts:
        from zkqueue.server.embedded import ZooKeeperEnsemble

        zk_hosts = stack.enter_context(ZooKeeperEnsemble(size=3)).connect_string

    def run_all(url: str | None) -> list[dict[str, Any]]:
        return [run_zkqueue(args.count, zk_hosts, args.max_seconds) if name == "zkqueue"  # type: ignore[arg-type]
                else RUNNERS[name](args.count, url, args.max_seconds) for name in impls]

    with stack:
        if not any(name in RUNNERS for name in impls):
            results = run_all(None)
            print(json.dumps(results, indent=2), flush=True)
            return 0 if all(r["complete"] for r in results) else 1
        return _run_with_redis(args, run_all)


def _run_with_redis(args: argparse.Namespace, run_all: Any) -> int:
    if args.redis_url:
        results = run_all(args.redis_url)
    else:
        try:
            with redis_server() as server:
                results = run_all(server.url)
        except RedisServerMissing as e:
            print(json.dumps({"skipped": str(e)}), flush=True)
            return 2
    print(json.dumps(results, indent=2), flush=True)
    return 0 if all(r["complete"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
