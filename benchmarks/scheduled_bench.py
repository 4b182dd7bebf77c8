"""The ``scheduled`` row of ``python -m benchmarks``: a delay queue holding a deep backlog of far-future items, and
how late a trickle of near-term items arrives (issue 19).

An untimed 2 s trickle on an empty queue comes first (``warmup_seconds``), so the first measured row does not
pay for a cold ensemble; the rows then run in the order below (the empty queue after the parked one, on servers
its prefill warmed up). Every run has the same shape:

1. prefill (untimed for lateness, timed for its own rate): ``depth`` items due uniformly between now + 2 min and
   now + 30 days; zkqueue through ``DistributedDelayQueue.put(item, due_ms)`` from ``producer_threads`` threads
   on one session (background puts, the default), waited for with ``flush_puts()``; Redis with ``ZADD`` +
   ``HSET`` pipelines of 10,000;
2. one consumer process (its own session; zkqueue's is lock-safe, ``QueueBuilder.lock_path``) is started and
   reports READY once its queue is started and has listed it once;
3. GO: a trickle of ``rate`` items/s for ``trickle_seconds`` from the harness process, each due 1 s after its put;
4. the consumer reports once it got every trickle item (or after ``drain`` seconds more).

Each item carries its put time and due time, so the consumer computes **lateness** = (wall time at which its
callback got the item) - (due time), for the trickle items: p50, p99, max, and **early** deliveries (lateness < 0;
must be 0). **Consumer CPU s/s** is the consumer process's own user + system CPU (``os.times``) from GO to the
last trickle item, over that wall time. Producer and consumer run on the same machine (one clock).

Rows:

- ``zkqueue_parked``: zkqueue, ``depth`` parked, ``park_after=60`` (items due more than 60 s ahead are parked in
  time buckets under ``<queue>-schedule/`` and moved into the queue shortly before due by an elected mover). The
  prefill producer is closed before the consumer starts, and the trickle producer stays out of the mover
  election (``QueueBuilder.run_mover(False)``), so the consumer process is the mover: its CPU includes the
  mover's (its ``stats.unparked`` counts what it moved). ``zk_txns_per_item``: ZooKeeper transactions (zxid
  delta: a multi is one) per parked item during the prefill; ``znodes_per_item``: the nodes of the queue and
  its schedule (buckets included) per item after it; the producers' counters (``stats()``) as they are;
- ``zkqueue_empty``: the same trickle on an empty delay queue (same ``park_after``);
- ``redis_parked``: the seed design (``shared/reference/seeds/001``) on a private local ``redis-server``:
  ``ZADD jobs <due ms> <id>`` plus ``HSET payloads <id> <payload>`` (one MULTI per trickle put); the poller
  process loops ``ZRANGEBYSCORE jobs 0 <now ms>``, claims each id with ``ZREM`` (1 = ours), then ``HGET`` +
  ``HDEL`` of the payload (one pipeline); when a round finds nothing due it sleeps ``poll_ms`` (10 ms);
- ``zkqueue_flat`` (optional, ``flat_depth`` > 0): zkqueue with ``park_after=None`` (every item a child of the
  queue node: the layout before parking) and a smaller backlog, to show that layout's cost.

Targets: zkqueue parked p99 <= 50 ms, and <= 1.5x the empty queue's p99; no early delivery.

    python -m benchmarks.scheduled_bench section [--hosts HOSTS] [--depth 1000000] [--seconds 20] [--flat-depth N]
                                                 [--threads 2] [--sessions 1] [--cleanup]
    python -m benchmarks.scheduled_bench consumer --impl zkqueue --hosts H --path P --lock-path L [--park-after S]
    python -m benchmarks.scheduled_bench consumer --impl redis --redis-url URL [--poll-ms 10]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import queue as queue_mod
import random
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("zkqueue.benchmarks.scheduled_bench")

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)

#: payload head: kind (b"T" trickle, b"P" parked), index, put time (epoch s), due time (epoch ms)
_HEAD = struct.Struct("!cQdq")
TRICKLE, PARKED = b"T", b"P"
PARK_MIN_S = 120.0  # parked items are due from now + 2 min ...
PARK_MAX_S = 30 * 86400.0  # ... to now + 30 days
REDIS_ZSET, REDIS_HASH = "jobs", "payloads"


@dataclass
class ScheduledSettings:
    """Sizes of the ``scheduled`` row."""

    depth: int = 1_000_000  # parked items (zkqueue and Redis)
    trickle_seconds: float = 20.0
    rate: float = 50.0  # trickle items/s
    due_after: float = 1.0  # each trickle item is due this long after its put
    park_after: float = 60.0
    flat_depth: int = 100_000  # zkqueue with park_after=None at this depth; 0 skips that row
    flat_seconds: float = 10.0  # trickle length of the flat row
    warmup_seconds: float = 2.0  # an untimed trickle on an empty queue first (cold ensemble, first consumer); 0: none
    producer_threads: int = 2  # prefill threads, spread over the producer sessions
    producer_sessions: int = 1  # prefill producers, each a delay queue on its own ZooKeeper session
    size: int = 100  # payload bytes
    poll_ms: float = 10.0  # Redis poller's sleep when nothing is due
    drain: float = 30.0  # seconds the consumer may take after the last trickle put
    p99_target_ms: float = 50.0
    ratio_target: float = 1.5


def make_item(kind: bytes, index: int, due_ms: int, size: int, put_time: float | None = None) -> bytes:
    """An item that tells the consumer its kind, index, put time and due time; padded to ``size`` bytes."""
    head = _HEAD.pack(kind, index, time.time() if put_time is None else put_time, due_ms)
    return head + b"x" * max(0, size - len(head))


def read_item(data: bytes) -> tuple[bytes, int, float, int]:
    """(kind, index, put time, due ms) of an item made by :func:`make_item`."""
    return _HEAD.unpack_from(data)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _peak_rss_kb() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


# ----------------------------------------------------------------------------------------------------------------
# The consumer process


class Recorder:
    """The consumer's callback: stamps every item with the wall time it arrived and keeps what the report needs."""

    def __init__(self) -> None:
        self.lateness_ms: list[float] = []  # trickle items only
        self.trickle_seen: set[int] = set()
        self.duplicates = 0
        self.early_trickle = 0
        self.early_all = 0
        self.parked = 0
        self.last_trickle = 0.0
        self.changed = threading.Condition()

    def __call__(self, data: bytes) -> None:
        got_ms = time.time() * 1000.0
        kind, index, _put, due_ms = read_item(data)
        late = got_ms - due_ms
        with self.changed:
            if late < 0:
                self.early_all += 1
            if kind != TRICKLE:
                self.parked += 1
                return
            if index in self.trickle_seen:
                self.duplicates += 1
                return
            self.trickle_seen.add(index)
            self.lateness_ms.append(round(late, 3))
            if late < 0:
                self.early_trickle += 1
            self.last_trickle = got_ms / 1000.0
            self.changed.notify_all()

    def wait_trickle(self, n: int, timeout: float) -> bool:
        """Wait until ``n`` distinct trickle items arrived; False on timeout."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while len(self.trickle_seen) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
            return True


def _build_delay_queue(builder: Any, park_after: float | None) -> Any:
    """``builder.build_delay_queue(park_after=...)``, ``None`` passed explicitly (the flat layout; the default is
    60 s); on a zkqueue without parking only ``None`` is accepted, and the argument is left out."""
    if parking_supported():
        return builder.build_delay_queue(park_after=park_after)
    if park_after is not None:
        raise RuntimeError("this zkqueue's build_delay_queue has no park_after")
    return builder.build_delay_queue()


def _start_zkqueue_consumer(args: argparse.Namespace, rec: Recorder) -> tuple[Any, Any]:
    from zkqueue.builder import QueueBuilder  # noqa: PLC0415
    from zkqueue.formats.serializers import BytesSerializer  # noqa: PLC0415
    from zkqueue.transport.handler import new_client  # noqa: PLC0415

    client = new_client(args.hosts, timeout=15.0)
    client.start(timeout=30)
    builder = QueueBuilder.builder(client, rec, BytesSerializer(), args.path).lock_path(args.lock_path)
    q = _build_delay_queue(builder, args.park_after)
    q.start()
    deadline = time.monotonic() + 120
    while q.stats().listings < 1 and time.monotonic() < deadline:  # the first listing is start-up, not steady state
        time.sleep(0.01)
    return client, q


class _RedisPoller:
    """The seed design's worker: ``ZRANGEBYSCORE jobs 0 <now>``, ``ZREM`` to claim, then the payload."""

    def __init__(self, url: str, rec: Recorder, poll_s: float) -> None:
        from redis import Redis  # noqa: PLC0415

        self.r = Redis.from_url(url)
        self.r.ping()
        self.rec = rec
        self.poll_s = poll_s
        self.stop = threading.Event()
        self.polls = 0
        self.thread = threading.Thread(target=self._run, name="redis-poller", daemon=True)

    def _run(self) -> None:
        r = self.r
        while not self.stop.is_set():
            ids = r.zrangebyscore(REDIS_ZSET, 0, time.time_ns() // 1_000_000)
            self.polls += 1
            for job_id in ids:
                if not r.zrem(REDIS_ZSET, job_id):
                    continue  # another worker claimed it
                pipe = r.pipeline(transaction=False)
                pipe.hget(REDIS_HASH, job_id)
                pipe.hdel(REDIS_HASH, job_id)
                data, _ = pipe.execute()
                if data is not None:
                    self.rec(data)
            if not ids:
                self.stop.wait(self.poll_s)


def run_consumer(args: argparse.Namespace) -> int:
    """The consumer process (see the module doc): READY, then GO, then ``END n timeout``, then ``RESULT {json}``."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    rec = Recorder()
    queue = client = poller = None
    if args.impl == "zkqueue":
        client, queue = _start_zkqueue_consumer(args, rec)
    else:
        poller = _RedisPoller(args.redis_url, rec, args.poll_ms / 1000.0)
        poller.thread.start()
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "GO":
        return 2
    t_go, cpu_go = time.time(), _cpu()
    stats_go = queue.stats().as_dict() if queue is not None else {}
    words = sys.stdin.readline().split()
    n, timeout = (int(words[1]), float(words[2])) if len(words) == 3 and words[0] == "END" else (0, 0.0)
    complete = rec.wait_trickle(n, timeout)
    t_end, cpu_end = time.time(), _cpu()
    with rec.changed:
        result: dict[str, Any] = {
            "received": len(rec.trickle_seen), "complete": complete, "lateness_ms": list(rec.lateness_ms),
            "early": rec.early_trickle, "early_all": rec.early_all, "duplicates": rec.duplicates,
            "parked_delivered": rec.parked, "cpu_s": round(cpu_end - cpu_go, 4), "wall_s": round(t_end - t_go, 4),
            "rss_kb": _peak_rss_kb(),
        }
    if queue is not None:
        stats = queue.stats().as_dict()
        result["stats"] = {k: v for k, v in stats.items() if v}
        result["stats_during"] = {k: v - stats_go.get(k, 0) for k, v in stats.items()
                                  if isinstance(v, (int, float)) and v - stats_go.get(k, 0)}
    if poller is not None:
        result["polls"] = poller.polls
    print("RESULT " + json.dumps(result), flush=True)
    try:
        if poller is not None:
            poller.stop.set()
        if queue is not None:
            queue.close()
        if client is not None:
            client.stop()
            client.close()
    finally:
        os._exit(0)
    return 0


# ----------------------------------------------------------------------------------------------------------------
# The harness side


class _Consumer:
    """A consumer subprocess; its ``READY`` / ``RESULT`` lines arrive on a queue."""

    def __init__(self, argv: list[str]) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = _REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.scheduled_bench", "consumer", *argv],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     cwd=_REPO_ROOT, env=env, text=True, bufsize=1)
        self.lines: queue_mod.Queue[str | None] = queue_mod.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, tag: str, timeout: float) -> str:
        """The rest of the next line starting with ``tag``; raises on timeout or exit."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue_mod.Empty:
                raise RuntimeError(f"consumer: no {tag} within {timeout:.0f} s: {self.stderr_tail()}") from None
            if line is None:
                raise RuntimeError(f"consumer exited before {tag}: {self.stderr_tail()}")
            if line.split(" ", 1)[0] == tag:
                return line[len(tag):].strip()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stderr_tail(self, n: int = 1500) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-n:]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._stderr.close()


def _parked_due_ms(rng: random.Random, t0: float) -> int:
    return int((t0 + rng.uniform(PARK_MIN_S, PARK_MAX_S)) * 1000)


def _trickle(put: Any, s: ScheduledSettings, seconds: float) -> int:
    """Put ``rate`` items/s for ``seconds`` (absolute schedule), each due ``due_after`` after its put; the count."""
    n = int(round(s.rate * seconds))
    t_start = time.monotonic()
    for i in range(n):
        wait = t_start + i / s.rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        t_put = time.time()
        due_ms = int(t_put * 1000) + int(s.due_after * 1000)
        put(make_item(TRICKLE, i, due_ms, s.size, t_put), due_ms)
    return n


def _summary(res: dict[str, Any], sent: int) -> dict[str, Any]:
    lat = res.pop("lateness_ms")
    wall = res.get("wall_s") or 0.0
    return {
        **res, "sent": sent, "complete": bool(res.get("complete")) and res.get("received") == sent,
        "p50_ms": _round(percentile(lat, 50)), "p99_ms": _round(percentile(lat, 99)),
        "max_ms": _round(max(lat) if lat else None), "min_ms": _round(min(lat) if lat else None),
        "cpu_s_per_s": round(res["cpu_s"] / wall, 4) if wall > 0 else None,
        "rss_mb": round(res["rss_kb"] / 1024, 1) if res.get("rss_kb", -1) > 0 else None,
    }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def _last_zxid(client: Any, path: str) -> int:
    """The ensemble's current zxid as seen by a write: create and delete a probe node under ``path``."""
    probe = client.create(f"{path}/zxid-", b"", sequence=True)
    zxid = client.exists(probe).czxid
    client.delete(probe)
    return int(zxid)


def count_nodes(client: Any, path: str, list_limit: int = 100_000) -> int:
    """Znodes under ``path`` (itself excluded), from child stats (multiRead); a node with more than
    ``list_limit`` children is not listed: its children are counted as leaves."""
    from kazoo.exceptions import NoNodeError  # noqa: PLC0415

    from zkqueue.transport.protocol import multi_read  # noqa: PLC0415

    stat = client.exists(path)
    if stat is None or not stat.numChildren:
        return 0
    if stat.numChildren > list_limit:
        return int(stat.numChildren)
    children = [f"{path}/{name}" for name in client.get_children(path)]
    total = len(children)
    for child, read in zip(children, multi_read(client, children, timeout=120), strict=True):
        if not isinstance(read, (BaseException, NoNodeError)) and read[1].numChildren:
            total += count_nodes(client, child, list_limit)
    return total


def wipe_tree(client: Any, root: str, chunk: int = 500, in_flight: int = 8) -> int:
    """Delete ``root`` and everything under it: the tree is listed level by level (getChildren multiReads, several
    in flight), then deleted deepest level first in multis of ``chunk`` deletes. A schedule of 1M parked items
    has 43,920 buckets, which :func:`benchmarks.prefill.wipe` (one listing round trip per bucket) takes minutes
    over. Returns the number of nodes found under ``root``."""
    from kazoo.exceptions import NoNodeError  # noqa: PLC0415

    from zkqueue.transport.protocol import DeleteOp, send_multi, send_multi_read  # noqa: PLC0415

    if client.exists(root) is None:
        return 0
    levels: list[list[str]] = [[root]]
    while levels[-1]:
        frontier, below = levels[-1], []
        for lo in range(0, len(frontier), chunk * in_flight):
            paths = [frontier[i : i + chunk] for i in range(lo, min(len(frontier), lo + chunk * in_flight), chunk)]
            pending = [send_multi_read(client, group, children=True) for group in paths]
            for group, reads in zip(paths, pending, strict=True):
                for path, names in zip(group, reads.result(120), strict=True):
                    if not isinstance(names, BaseException):
                        below.extend(f"{path}/{name}" for name in names)
        levels.append(below)
    for level in reversed(levels[1:]):
        for lo in range(0, len(level), chunk * in_flight):
            pending = [send_multi(client, [DeleteOp(p) for p in level[i : i + chunk]])
                       for i in range(lo, min(len(level), lo + chunk * in_flight), chunk)]
            for result in pending:
                with contextlib.suppress(Exception):  # a failed chunk is left to the recursive delete below
                    result.result(timeout=120)
    with contextlib.suppress(NoNodeError):
        client.delete(root, recursive=True)
    return sum(len(level) for level in levels[1:])


def _delay_producer(client: Any, path: str, park_after: float | None, run_mover: bool = True) -> Any:
    """A started producer-only delay queue; ``run_mover=False`` keeps it out of the mover election (when this
    zkqueue has ``QueueBuilder.run_mover``)."""
    from zkqueue.builder import QueueBuilder  # noqa: PLC0415
    from zkqueue.formats.serializers import BytesSerializer  # noqa: PLC0415

    builder = QueueBuilder.builder(client, None, BytesSerializer(), path)
    if not run_mover and park_after is not None and hasattr(builder, "run_mover"):
        builder = builder.run_mover(False)
    q = _build_delay_queue(builder, park_after)
    q.start()
    return q


def prefill_zkqueue(client: Any, path: str, depth: int, s: ScheduledSettings, park_after: float | None,
                    scratch: str, hosts: str | None = None) -> dict[str, Any]:
    """Put ``depth`` far-future items through delay queues' background puts: ``producer_sessions`` producers (the
    first on ``client``, the others on sessions of their own to ``hosts``), ``producer_threads`` threads spread
    over them; then ``flush_puts()`` on each. Rate, ZooKeeper transactions and znodes per item, and the
    producers' counters summed."""
    from zkqueue.transport.handler import new_client  # noqa: PLC0415

    sessions = max(1, s.producer_sessions if hosts else 1)
    threads = max(sessions, s.producer_threads)
    clients = [client]
    queues: list[Any] = []
    errors: list[BaseException] = []
    try:
        for _ in range(sessions - 1):
            extra = new_client(hosts, timeout=30.0)
            extra.start(timeout=30)
            clients.append(extra)
        queues = [_delay_producer(c, path, park_after) for c in clients]
        zxid0 = _last_zxid(client, scratch)
        t0 = time.time()

        def work(k: int) -> None:
            rng = random.Random(k)
            q = queues[k % sessions]
            try:
                for i in range(k, depth, threads):
                    due = _parked_due_ms(rng, t0)
                    q.put(make_item(PARKED, i, due, s.size), due)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(k,), name=f"prefill-{k}") for k in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        t_put = time.time()
        flushed = all([q.flush_puts(600) for q in queues])
        seconds = time.time() - t0
        zxid1 = _last_zxid(client, scratch)
        stats: dict[str, int] = {}
        for q in queues:
            for k, v in q.stats().as_dict().items():
                if v:
                    stats[k] = stats.get(k, 0) + v
    finally:
        for q in queues:
            with contextlib.suppress(Exception):
                q.close()
        for extra in clients[1:]:
            with contextlib.suppress(Exception):
                extra.stop()
                extra.close()
    base = path.rsplit("/", 1)[0]
    nodes = sum(count_nodes(client, f"{base}/{name}") for name in client.get_children(base)
                if name not in ("scratch", "locks"))
    if errors:
        raise RuntimeError(f"prefill failed: {errors[0]!r}") from errors[0]
    if not flushed or stats.get("put_failed"):
        raise RuntimeError(f"prefill did not flush (flushed={flushed}, stats={stats})")
    txns = zxid1 - zxid0 - 2  # minus the first probe's delete and the second one's create (sessions opened before)
    return {"prefill_seconds": round(seconds, 3), "prefill_put_seconds": round(t_put - t0, 3),
            "prefill_rate": round(depth / seconds, 1) if seconds > 0 else None, "producer_threads": threads,
            "producer_sessions": sessions,
            "zk_txns": txns, "zk_txns_per_item": round(txns / depth, 4) if depth else None,
            "znodes": nodes, "znodes_per_item": round(nodes / depth, 4) if depth else None, "producer_stats": stats,
            # the producers' own count of bucket creates sent (stats().bucket_writes, where the queue has it)
            "bucket_writes_per_item": round(stats["bucket_writes"] / depth, 4) if depth and "bucket_writes" in stats
            else None}


def run_zkqueue(hosts: str, depth: int, park_after: float | None, s: ScheduledSettings, seconds: float,
                cleanup: bool = True) -> dict[str, Any]:
    """One zkqueue run: prefill ``depth`` (0: none), one consumer process, the trickle; the row's figures."""
    from zkqueue.transport.handler import new_client  # noqa: PLC0415

    root = f"/zkq-bench-scheduled-{uuid.uuid4().hex[:8]}"
    qpath, lock = f"{root}/q", f"{root}/locks"
    client = new_client(hosts, timeout=30.0)
    client.start(timeout=30)
    client.ensure_path(f"{root}/scratch")
    row: dict[str, Any] = {"impl": "zkqueue", "depth": depth, "park_after": park_after,
                           "layout": "flat" if park_after is None else "parked"}
    consumer = producer = None
    try:
        if depth:
            row.update(prefill_zkqueue(client, qpath, depth, s, park_after, f"{root}/scratch", hosts))
        argv = ["--impl", "zkqueue", "--hosts", hosts, "--path", qpath, "--lock-path", lock]
        if park_after is not None:
            argv += ["--park-after", str(park_after)]
        t_spawn = time.monotonic()
        consumer = _Consumer(argv)
        consumer.expect("READY", 180)
        row["consumer_start_s"] = round(time.monotonic() - t_spawn, 3)
        producer = _delay_producer(client, qpath, park_after, run_mover=False)  # the consumer moves
        consumer.send("GO")
        sent = _trickle(producer.put, s, seconds)
        consumer.send(f"END {sent} {s.drain}")
        res = json.loads(consumer.expect("RESULT", s.drain + 30))
        row.update(_summary(res, sent))
        row["trickle_seconds"] = seconds
        return row
    finally:
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.close()
        if consumer is not None:
            consumer.close()
        if cleanup:
            t_wipe = time.monotonic()
            try:
                row["wiped_nodes"] = wipe_tree(client, root)
            except Exception as exc:  # noqa: BLE001 - a leftover only costs server memory
                log.warning("could not delete %s: %r", root, exc)
            row["wipe_seconds"] = round(time.monotonic() - t_wipe, 2)
        client.stop()
        client.close()


def run_redis(url: str, depth: int, s: ScheduledSettings, seconds: float) -> dict[str, Any]:
    """One Redis run (the seed design): prefill ``depth`` members, one poller process, the trickle."""
    from redis import Redis  # noqa: PLC0415

    r = Redis.from_url(url)
    r.flushdb()
    row: dict[str, Any] = {"impl": "redis", "depth": depth, "layout": "sorted set + hash",
                           "poll_ms": s.poll_ms}
    consumer = None
    try:
        rng = random.Random(1)
        t0 = time.time()
        for lo in range(0, depth, 10_000):
            members, payloads = {}, {}
            for i in range(lo, min(depth, lo + 10_000)):
                due = _parked_due_ms(rng, t0)
                members[f"p{i}"] = due
                payloads[f"p{i}"] = make_item(PARKED, i, due, s.size)
            pipe = r.pipeline(transaction=False)
            pipe.hset(REDIS_HASH, mapping=payloads)
            pipe.zadd(REDIS_ZSET, members)
            pipe.execute()
        if depth:
            took = time.time() - t0
            row.update({"prefill_seconds": round(took, 3), "prefill_rate": round(depth / took, 1)})
            row["used_memory_mb"] = round(int(r.info("memory")["used_memory"]) / 2**20, 1)
        t_spawn = time.monotonic()
        consumer = _Consumer(["--impl", "redis", "--redis-url", url, "--poll-ms", str(s.poll_ms)])
        consumer.expect("READY", 60)
        row["consumer_start_s"] = round(time.monotonic() - t_spawn, 3)

        def put(item: bytes, due_ms: int) -> None:
            job_id = f"t{read_item(item)[1]}"
            pipe = r.pipeline(transaction=True)
            pipe.hset(REDIS_HASH, job_id, item)
            pipe.zadd(REDIS_ZSET, {job_id: due_ms})
            pipe.execute()

        consumer.send("GO")
        sent = _trickle(put, s, seconds)
        consumer.send(f"END {sent} {s.drain}")
        res = json.loads(consumer.expect("RESULT", s.drain + 30))
        row.update(_summary(res, sent))
        row["trickle_seconds"] = seconds
        return row
    finally:
        if consumer is not None:
            consumer.close()
        with contextlib.suppress(Exception):
            r.flushdb()
        r.close()


def _na(impl: str, exc: BaseException) -> dict[str, Any]:
    return {"impl": impl, "status": "n/a", "reason": repr(exc)[:400]}


def _guard(impl: str, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - recorded in the row; the other rows go on
        log.warning("scheduled %s failed: %r", impl, exc)
        return _na(impl, exc)


def parking_supported() -> bool:
    """Whether this zkqueue's ``build_delay_queue`` takes ``park_after``."""
    import inspect  # noqa: PLC0415

    from zkqueue.builder import QueueBuilder  # noqa: PLC0415

    return "park_after" in inspect.signature(QueueBuilder.build_delay_queue).parameters


def run_section(hosts: str, s: ScheduledSettings, cleanup: bool = True) -> dict[str, Any]:
    """All rows of the ``scheduled`` workload (see the module doc) and their ratios against the targets."""
    started = time.monotonic()
    rows: dict[str, dict[str, Any]] = {}
    park = s.park_after if parking_supported() else None
    if s.warmup_seconds > 0:  # so that the first row measured does not pay for a cold ensemble
        warm = _guard("zkqueue", run_zkqueue, hosts, 0, park, s, s.warmup_seconds, cleanup)
        if warm.get("status") == "n/a":
            log.warning("scheduled warm-up failed: %s", warm.get("reason"))
    # The parked row first: its prefill warms the ensemble up, and the empty row after it meets the same warm
    # servers. (Measured the other way round, empty first, the empty row's p99 came out about twice the parked
    # row's in two 1M runs: 15.9 / 9.0 ms and 17.7 / 8.5 ms.)
    if park is None:
        reason = "this zkqueue's build_delay_queue has no park_after yet"
        rows["zkqueue_parked"] = {"impl": "zkqueue", "status": "n/a", "reason": reason}
    else:
        rows["zkqueue_parked"] = _guard("zkqueue", run_zkqueue, hosts, s.depth, park, s, s.trickle_seconds, cleanup)
    rows["zkqueue_empty"] = _guard("zkqueue", run_zkqueue, hosts, 0, park, s, s.trickle_seconds, cleanup)
    rows["redis_parked"] = _run_redis_row(s)
    if s.flat_depth:
        rows["zkqueue_flat"] = _guard("zkqueue", run_zkqueue, hosts, s.flat_depth, None, s, s.flat_seconds, cleanup)
    out: dict[str, Any] = {
        "status": "ok", "depth": s.depth, "flat_depth": s.flat_depth, "trickle_rate": s.rate,
        "trickle_seconds": s.trickle_seconds, "flat_seconds": s.flat_seconds, "due_after_s": s.due_after,
        "park_after": park, "poll_ms": s.poll_ms, "producer_threads": s.producer_threads,
        "producer_sessions": s.producer_sessions, "size": s.size,
        "targets": {"p99_ms": s.p99_target_ms, "p99_ratio": s.ratio_target}, "rows": rows,
    }
    out.update(evaluate(rows, s))
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def _run_redis_row(s: ScheduledSettings) -> dict[str, Any]:
    from benchmarks.jobs_peers import RedisServerMissing, redis_server  # noqa: PLC0415

    try:
        import redis  # noqa: F401, PLC0415
    except ImportError:
        return {"impl": "redis", "status": "n/a", "reason": "redis-py missing: pip install -e '.[bench]'"}
    try:
        with redis_server() as server:
            row = _guard("redis", run_redis, server.url, s.depth, s, s.trickle_seconds)
            row["redis_version"] = server.version
            return row
    except RedisServerMissing as exc:
        return {"impl": "redis", "status": "n/a", "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - recorded in the row
        return _na("redis", exc)


def evaluate(rows: dict[str, dict[str, Any]], s: ScheduledSettings) -> dict[str, Any]:
    """Ratios (parked / empty p99 and CPU) and the verdicts: p99 <= target, ratio <= target, no early delivery."""
    parked, empty = rows.get("zkqueue_parked", {}), rows.get("zkqueue_empty", {})
    out: dict[str, Any] = {"p99_ratio": None, "cpu_ratio": None, "pass": None}
    if parked.get("p99_ms") is not None and empty.get("p99_ms"):
        out["p99_ratio"] = round(parked["p99_ms"] / empty["p99_ms"], 2)
    if parked.get("cpu_s_per_s") is not None and empty.get("cpu_s_per_s"):
        out["cpu_ratio"] = round(parked["cpu_s_per_s"] / empty["cpu_s_per_s"], 2)
    if out["p99_ratio"] is not None:
        out["pass"] = (parked["p99_ms"] <= s.p99_target_ms and out["p99_ratio"] <= s.ratio_target
                       and parked.get("early_all", 1) == 0 and bool(parked.get("complete")))
    out["early_total"] = sum(r.get("early_all", 0) for r in rows.values())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scheduled_bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("section", "consumer"))
    ap.add_argument("--hosts", help="ZooKeeper connect string (section: default an embedded 3-node ensemble)")
    ap.add_argument("--impl", choices=("zkqueue", "redis"), default="zkqueue", help="consumer: which one")
    ap.add_argument("--path", help="consumer: the delay queue's path")
    ap.add_argument("--lock-path", help="consumer: its lock path")
    ap.add_argument("--park-after", type=float, help="consumer: park_after (default: none, the flat layout)")
    ap.add_argument("--redis-url", help="consumer (redis): the server")
    ap.add_argument("--poll-ms", type=float, default=ScheduledSettings.poll_ms)
    ap.add_argument("--depth", type=int, default=ScheduledSettings.depth)
    ap.add_argument("--seconds", type=float, default=ScheduledSettings.trickle_seconds)
    ap.add_argument("--flat-depth", type=int, default=ScheduledSettings.flat_depth)
    ap.add_argument("--flat-seconds", type=float, default=ScheduledSettings.flat_seconds)
    ap.add_argument("--threads", type=int, default=ScheduledSettings.producer_threads)
    ap.add_argument("--sessions", type=int, default=ScheduledSettings.producer_sessions,
                    help="prefill producers, each on its own session")
    ap.add_argument("--cleanup", action="store_true",
                    help="delete each run's nodes afterwards (default only with --hosts: an embedded ensemble is "
                         "thrown away whole)")
    args = ap.parse_args(argv)
    if args.mode == "consumer":
        return run_consumer(args)
    logging.basicConfig(level=logging.WARNING)
    s = ScheduledSettings(depth=args.depth, trickle_seconds=args.seconds, flat_depth=args.flat_depth,
                          flat_seconds=args.flat_seconds, producer_threads=args.threads,
                          producer_sessions=args.sessions, poll_ms=args.poll_ms)
    with contextlib.ExitStack() as stack:
        hosts = args.hosts
        if not hosts:
            from zkqueue.server.embedded import ZooKeeperEnsemble  # noqa: PLC0415

            heap = 2048 if max(s.depth, s.flat_depth) >= 300_000 else 512
            hosts = stack.enter_context(ZooKeeperEnsemble(size=3, heap_mb=heap)).connect_string
        print(json.dumps(run_section(hosts, s, cleanup=args.cleanup or bool(args.hosts)), indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
