"""The implementations under test, behind one small interface.

Each method runs ONE measured run and returns a :class:`Run`. Queues live at fresh paths chosen by the caller.
Timing starts once clients are connected and queues started (JVM and interpreter start-up are never timed):

- puts: from the first put until the last one completed (background puts: until flushed);
- consumes: from the GO given to all consumer processes (each its own process and ZooKeeper session) until the
  last item was delivered to a consumer callback, over all consumers;
- latency: put-to-callback time of each item at a fixed offered rate, producer and consumer in one process;
- large items: put time (first put until the last returned) plus consume time (GO to the consumer process until
  the last item was delivered, checked and deleted with its chunks); bare kazoo: its writes, then its reads,
  checks and deletes. Rates are MB/s (10^6 bytes) of payload.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from zkqueue.interop.curator_peer import THROUGHPUT_JVM_ARGS, CuratorPeer, bench_run, start_bench_consumer
from zkqueue.transport.handler import new_client

log = logging.getLogger("zkqueue.benchmarks.peers")

#: The folder holding the ``benchmarks`` package, so consumer subprocesses import it from anywhere.
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)

#: Bare kazoo's node size in the large-items workload (zkqueue's chunks are about 1,000,000 bytes).
BARE_NODE_BYTES = 900_000
#: Requests in flight in bare kazoo's pipelined writes, reads and deletes (zkqueue writes 4 chunks at once).
BARE_WINDOW = 4


@dataclass
class Run:
    """One measured run: ``items`` done in ``seconds``; ``complete`` False when a time cap cut it short."""

    items: int
    seconds: float
    complete: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"items": self.items, "seconds": round(self.seconds, 6), "rate": round(self.rate, 1),
                "complete": self.complete, **self.extra}


class Unsupported(Exception):
    """This implementation has no such feature; the message says why (shown as 'n/a')."""


def _client(connect: str, zkqueue_handler: bool = False) -> KazooClient:
    """A started client; zkqueue's runs use its recommended :func:`zkqueue.transport.handler.new_client`, kazoo's runs
    kazoo's default handler."""
    client = new_client(connect, timeout=15.0) if zkqueue_handler else KazooClient(hosts=connect, timeout=15.0)
    client.start(timeout=30)
    return client


@contextlib.contextmanager
def _connected(connect: str, zkqueue_handler: bool = False):  # type: ignore[no-untyped-def]
    client = _client(connect, zkqueue_handler)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _threads(n: int, work: Callable[[], None]) -> list[BaseException]:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            errors.append(exc)

    ts = [threading.Thread(target=body, name=f"bench-put-{i}", daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    i = max(0, min(len(sorted_values) - 1, int(-(-q * len(sorted_values) // 1)) - 1))
    return sorted_values[i]


# ---------------------------------------------------------------------------------------------------------------
# consumer processes (zkqueue and kazoo run benchmarks.consumer_proc; Curator runs the peer's bench-consume)


class _PyConsumer:
    """A ``benchmarks.consumer_proc`` process speaking READY / GO / RESULT."""

    def __init__(self, argv: list[str]) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(x for x in (_REPO_ROOT, env.get("PYTHONPATH")) if x)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env)
        self._lines: list[str] = []
        self._err: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._cond:
                self._lines.append(raw.decode("utf-8", "replace").strip())
                self._cond.notify_all()
        with self._cond:
            self._lines.append("<EOF>")
            self._cond.notify_all()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self._err.append(raw.decode("utf-8", "replace").rstrip())
            del self._err[:-50]

    def wait_ready(self, timeout: float = 60.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: "READY" in self._lines or "<EOF>" in self._lines, timeout) or \
                    "READY" not in self._lines:
                self.kill()
                raise RuntimeError("consumer process did not start: " + "\n".join(self._err[-10:]))

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"GO\n")
        self.proc.stdin.flush()

    def has_result(self) -> bool:
        with self._cond:
            return any(line.startswith("RESULT ") for line in self._lines)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()

    def result(self, timeout: float | None = 60.0) -> dict[str, Any]:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        with self._cond:
            self._cond.wait_for(lambda: "<EOF>" in self._lines, 10)
            for line in self._lines:
                if line.startswith("RESULT "):
                    return json.loads(line[len("RESULT "):])
        raise RuntimeError("consumer process gave no result: " + "\n".join(self._err[-10:]))

    def stderr_tail(self) -> str:
        return "\n".join(self._err[-20:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def drive_consumers(handles: list[Any], client: KazooClient, items_parent: str, max_seconds: float,
                    expected: int | None = None, raw: list[dict[str, Any]] | None = None) -> Run:
    """Start ``handles`` together (all READY, then GO to all), wait until ``items_parent`` is empty, every handle
    reported on its own, or the time cap; stop them and merge their results into one Run. Each handle's own
    RESULT is appended to ``raw`` when given."""
    try:
        for h in handles:
            h.wait_ready()
        for h in handles:
            h.go()
        deadline = time.monotonic() + max_seconds + 5
        while time.monotonic() < deadline:
            stat = client.exists(items_parent)
            if stat is None or stat.numChildren == 0 or all(h.has_result() for h in handles):
                break
            time.sleep(0.02)
        for h in handles:
            h.stop()
        results = [h.result(60) for h in handles]
        if raw is not None:
            raw.extend(results)
    finally:
        for h in handles:
            with contextlib.suppress(Exception):
                h.kill()
    consumed = sum(int(r["consumed"]) for r in results)
    t0 = min(float(r["t_go"]) for r in results)
    lasts = [float(r["t_last"]) for r in results if int(r["consumed"])]
    seconds = (max(lasts) - t0) if lasts else max_seconds
    stat = client.exists(items_parent)
    left = stat.numChildren if stat else 0
    extra: dict[str, Any] = {
        "consumers": len(results),
        "per_consumer": [int(r["consumed"]) for r in results],
        "rss_mb_max": round(max(int(r.get("rss_kb", -1)) for r in results) / 1024, 1),
        "left_in_queue": left,
    }
    silent = [h.stderr_tail()[-400:] for h, r in zip(handles, results, strict=True) if not int(r["consumed"])]
    if silent and not consumed:
        extra["stderr_tail"] = silent[0]  # why nothing arrived (e.g. Curator's getChildren over 1 MiB)
    stats = [r["stats"] for r in results if r.get("stats")]
    if stats:
        extra["stats"] = stats
    # A consumer that stops at its count may leave its last item un-acked (Curator deletes after the callback), so
    # "complete" means every expected item reached a consumer callback.
    complete = consumed >= expected if expected is not None else left == 0
    return Run(consumed, seconds, complete=complete, extra=extra)


# ---------------------------------------------------------------------------------------------------------------
# implementations


class Impl:
    name = "?"
    #: prefill style for consume workloads: "curator" (framed queue- nodes) or "kazoo"
    style = "curator"

    def __init__(self, connect: str, size: int) -> None:
        self.connect = connect
        self.size = size
        self.payload = b"x" * size

    def items_parent(self, path: str) -> str:
        return path

    def put(self, path: str, count: int, threads: int, background: bool, multi: int, max_seconds: float) -> Run:
        raise Unsupported("no such put")

    def consume(self, path: str, count: int | None, consumers: int, lock_path: str | None,
                max_seconds: float, client: KazooClient) -> Run:
        raise Unsupported("no such consumer")

    def latency(self, path: str, rate: float, duration: float, drain: float) -> Run:
        raise Unsupported("no latency run")

    def raw_creates(self, path: str, count: int, max_seconds: float) -> Run:
        raise Unsupported("no bare ZooKeeper client")

    def large_items(self, path: str, payloads: list[bytes], max_seconds: float, client: KazooClient) -> Run:
        """Put ``payloads`` (items over one znode, self-checking: see ``workloads.large_payloads``), then consume
        them lock-safe; ``max_seconds`` caps each of the two phases."""
        raise Unsupported("no large items")

    def close(self) -> None:
        pass


def _mb_s(nbytes: int, seconds: float) -> float | None:
    return round(nbytes / 1e6 / seconds, 2) if seconds > 0 else None


def _large_extra(item_bytes: int, put: int, consumed: int, put_seconds: float,
                 consume_seconds: float) -> dict[str, Any]:
    """The large-items numbers shared by both implementations; ``mb_s`` is the workload's metric."""
    return {
        "item_bytes": item_bytes,
        "bytes": consumed * item_bytes,
        "put_seconds": round(put_seconds, 6),
        "consume_seconds": round(consume_seconds, 6),
        "put_mb_s": _mb_s(put * item_bytes, put_seconds),
        "consume_mb_s": _mb_s(consumed * item_bytes, consume_seconds),
        "mb_s": _mb_s(consumed * item_bytes, put_seconds + consume_seconds),
    }


def _pipelined(calls: Iterable[Callable[[], Any]], window: int, timeout: float = 120.0) -> list[Any]:
    """Run kazoo ``*_async`` calls with at most ``window`` in flight; their results in order (errors raise)."""
    results: list[Any] = []
    inflight: deque[Any] = deque()
    for call in calls:
        if len(inflight) >= window:
            results.append(inflight.popleft().get(timeout=timeout))
        inflight.append(call())
    while inflight:
        results.append(inflight.popleft().get(timeout=timeout))
    return results


class ZkqueueImpl(Impl):
    name = "zkqueue"

    def put(self, path: str, count: int, threads: int, background: bool, multi: int, max_seconds: float) -> Run:
        from zkqueue.builder import QueueBuilder  # noqa: PLC0415
        from zkqueue.formats.serializers import BytesSerializer  # noqa: PLC0415

        with _connected(self.connect, zkqueue_handler=True) as client:
            q = QueueBuilder.builder(client, None, BytesSerializer(), path).put_in_background(background).build_queue()
            q.start()
            try:
                step = max(1, multi)
                counter = itertools.count(0, step)
                done = [0]
                lock = threading.Lock()
                payload = self.payload
                batch = [payload] * step
                t0 = time.perf_counter()
                deadline = t0 + max_seconds

                def work() -> None:
                    while time.perf_counter() < deadline:
                        start = next(counter)
                        if start >= count:
                            return
                        n = min(step, count - start)
                        if multi:
                            q.put_multi(batch[:n])
                        else:
                            q.put(payload)
                        with lock:
                            done[0] += n

                errors = _threads(threads, work)
                flushed = q.flush_puts(max(1.0, deadline - time.perf_counter()) + 30) if background else True
                seconds = time.perf_counter() - t0
                stats = q.stats()
            finally:
                q.close()
        if errors:
            raise RuntimeError(f"zkqueue put failed: {errors[0]!r}") from errors[0]
        if stats.put_failed:
            raise RuntimeError(f"zkqueue: {stats.put_failed} puts failed")
        return Run(done[0], seconds, complete=done[0] >= count and flushed,
                   extra={"threads": threads, "znodes": stats.put_ok})

    def consume(self, path: str, count: int | None, consumers: int, lock_path: str | None,
                max_seconds: float, client: KazooClient) -> Run:
        handles = []
        for _ in range(consumers):
            argv = [sys.executable, "-m", "benchmarks.consumer_proc", "--connect", self.connect, "--path", path,
                    "--impl", "zkqueue", "--max-seconds", str(max_seconds)]
            if lock_path:
                argv += ["--lock-path", lock_path]
            if count is not None and consumers == 1:
                argv += ["--count", str(count)]
            handles.append(_PyConsumer(argv))
        return drive_consumers(handles, client, path, max_seconds, count)

    def latency(self, path: str, rate: float, duration: float, drain: float) -> Run:
        from zkqueue.builder import QueueBuilder  # noqa: PLC0415
        from zkqueue.formats.serializers import BytesSerializer  # noqa: PLC0415

        total = max(1, round(rate * duration))
        sent = [0.0] * total
        lat: list[float | None] = [None] * total
        got = [0]
        all_in = threading.Event()
        lock = threading.Lock()

        def on_item(item: bytes) -> None:
            t = time.perf_counter()
            i = int.from_bytes(item[:4], "big")
            with lock:
                if 0 <= i < total and lat[i] is None:
                    lat[i] = t - sent[i]
                    got[0] += 1
                    if got[0] >= total:
                        all_in.set()

        pad = b"x" * max(0, self.size - 4)
        with _connected(self.connect, zkqueue_handler=True) as client:
            q = QueueBuilder.builder(client, on_item, BytesSerializer(), path).build_queue()
            q.start()
            try:
                t0 = time.perf_counter()
                for i in range(total):
                    wait = t0 + i / rate - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                    sent[i] = time.perf_counter()
                    q.put(i.to_bytes(4, "big") + pad)
                offered = time.perf_counter() - t0
                all_in.wait(drain)
            finally:
                q.close()
        values = sorted(v * 1000 for v in lat if v is not None)
        return _latency_run(total, values, offered)

    def large_items(self, path: str, payloads: list[bytes], max_seconds: float, client: KazooClient) -> Run:
        """``QueueBuilder.large_items()``: the items put one after the other by a producer in this process (a
        large put returns once its reference item committed), then drained by ONE lock-safe consumer process (its
        own session, started and connected before the puts) that checks every item; the consume time runs until
        the last item's blob was deleted with its ack. The consumer's peak RSS is ``rss_mb_max``."""
        from zkqueue.builder import QueueBuilder  # noqa: PLC0415
        from zkqueue.engine.blobs import blob_root  # noqa: PLC0415
        from zkqueue.formats.serializers import BytesSerializer  # noqa: PLC0415

        qpath = path + "/q"
        item_bytes = len(payloads[0]) if payloads else 0
        max_item = max(64 * 2**20, item_bytes + 2**20)
        argv = [sys.executable, "-m", "benchmarks.consumer_proc", "--connect", self.connect, "--path", qpath,
                "--impl", "zkqueue", "--lock-path", path + "/locks", "--large-items", "--max-item-bytes",
                str(max_item), "--verify", "--wait-empty", blob_root(qpath), "--max-seconds", str(max_seconds)]
        consumer = _PyConsumer([*argv, "--count", str(len(payloads))])
        try:
            consumer.wait_ready()
            with _connected(self.connect, zkqueue_handler=True) as pclient:
                q = (QueueBuilder.builder(pclient, None, BytesSerializer(), qpath)
                     .large_items(max_item_bytes=max_item).build_queue())
                q.start()
                try:
                    put = 0
                    t0 = time.perf_counter()
                    deadline = t0 + max_seconds
                    for item in payloads:
                        if time.perf_counter() >= deadline:
                            break
                        q.put(item)
                        put += 1
                    flushed = q.flush_puts(30)
                    put_seconds = time.perf_counter() - t0
                    stats = q.stats()
                finally:
                    q.close()
            if stats.put_failed:
                raise RuntimeError(f"zkqueue: {stats.put_failed} large puts failed")
            stored = _first_ref(client, qpath)
        except BaseException:
            consumer.kill()
            raise
        if put < len(payloads):  # (the consumer then stops when the queue is empty: partial)
            log.warning("large items: only %d of %d put within %.0f s", put, len(payloads), max_seconds)
        raw: list[dict[str, Any]] = []
        run = drive_consumers([consumer], client, qpath, max_seconds, put, raw=raw)
        (res,) = raw
        consumed = run.items
        end = res.get("t_drained") or res.get("t_last") or 0.0
        consume_seconds = float(end) - float(res["t_go"]) if consumed else max_seconds
        expected = [p[:32].hex() for p in payloads[:put]]
        digests = list(res.get("digests", []))
        known = set(expected)
        unknown = [d for d in digests if d not in known]
        if res.get("bad") or unknown or len(set(digests)) != len(digests):
            raise RuntimeError(f"zkqueue large items: {res.get('bad')} corrupt, {len(unknown)} unknown, "
                               f"{len(digests) - len(set(digests))} delivered twice")
        extra = _large_extra(item_bytes, put, consumed, put_seconds, consume_seconds)
        extra.update({
            "verified": len(digests),
            "in_order": digests == expected[: len(digests)],
            "drained": "t_drained" in res,
            "first_item_seconds": round(float(res["t_first"]) - float(res["t_go"]), 6) if consumed else None,
            "rss_mb_max": run.extra.get("rss_mb_max"),
            "left_in_queue": run.extra.get("left_in_queue"),
            "large_items_put": stats.large_items_put,
            **stored,
        })
        if run.extra.get("stats"):
            extra["consumer_stats"] = run.extra["stats"][0]
        complete = put == len(payloads) and flushed and run.complete and "t_drained" in res
        return Run(consumed, put_seconds + consume_seconds, complete=complete, extra=extra)


def _first_ref(client: KazooClient, qpath: str) -> dict[str, Any]:
    """How the first queued item is stored (chunks, compression, stored bytes); untimed, between put and GO."""
    from zkqueue.formats import large_ref  # noqa: PLC0415

    try:
        names = sorted(client.get_children(qpath))
        data, _ = client.get(f"{qpath}/{names[0]}")
        ref = large_ref.decode_ref(data)
        return {"chunks_per_item": ref.chunks, "compression": ref.compression, "stored_bytes": ref.stored}
    except Exception as exc:  # noqa: BLE001 - descriptive only
        log.debug("could not read the first large-item reference under %s: %r", qpath, exc)
        return {}


def _latency_run(total: int, values_ms: list[float], offered_seconds: float) -> Run:
    extra = {
        "sent": total,
        "received": len(values_ms),
        "offered_rate": round(total / offered_seconds, 1) if offered_seconds else None,
        "p50_ms": _round(_percentile(values_ms, 0.50)),
        "p99_ms": _round(_percentile(values_ms, 0.99)),
        "max_ms": _round(values_ms[-1] if values_ms else None),
    }
    return Run(len(values_ms), offered_seconds, complete=len(values_ms) == total, extra=extra)


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


class CuratorImpl(Impl):
    name = "curator"

    def __init__(self, connect: str, size: int) -> None:
        super().__init__(connect, size)
        self.peer = CuratorPeer(connect, jvm_args=THROUGHPUT_JVM_ARGS, session_timeout_ms=15_000)

    def put(self, path: str, count: int, threads: int, background: bool, multi: int, max_seconds: float) -> Run:
        options = ["--count", str(count), "--size", str(self.size), "--threads", str(threads),
                   "--max-seconds", str(max_seconds)]
        if background:
            options.append("--background")
        if multi:
            options += ["--multi", str(multi)]
        r = bench_run(self.peer, "bench-put", path, options, timeout=max_seconds + 120)
        return Run(int(r["items"]), float(r["seconds"]), complete=bool(r["complete"]), extra={"threads": threads})

    def raw_creates(self, path: str, count: int, max_seconds: float) -> Run:
        """What the ensemble accepts: the peer's bare ZooKeeper handle sending sequential creates of the same
        payload as async multis of 1000, 2 in flight (no recipe; the reference for background puts)."""
        options = ["--count", str(count), "--size", str(self.size), "--batch", "1000", "--inflight", "2",
                   "--max-seconds", str(max_seconds)]
        r = bench_run(self.peer, "bench-raw-create", path, options, timeout=max_seconds + 120)
        return Run(int(r["items"]), float(r["seconds"]), complete=bool(r["complete"]), extra={"batch": 1000})

    def consume(self, path: str, count: int | None, consumers: int, lock_path: str | None,
                max_seconds: float, client: KazooClient) -> Run:
        handles = [start_bench_consumer(self.peer, path, lock_path=lock_path,
                                        count=count if consumers == 1 else None, max_seconds=max_seconds)
                   for _ in range(consumers)]
        return drive_consumers(handles, client, path, max_seconds, count)

    def large_items(self, path: str, payloads: list[bytes], max_seconds: float, client: KazooClient) -> Run:
        raise Unsupported("Curator's queues store each item in one znode (1 MiB at most)")

    def latency(self, path: str, rate: float, duration: float, drain: float) -> Run:
        options = ["--rate", str(rate), "--duration-s", str(duration), "--size", str(self.size),
                   "--drain-s", str(drain)]
        r = bench_run(self.peer, "bench-latency", path, options, timeout=duration + drain + 120)
        total = int(r["sent"])
        run = Run(int(r["received"]), float(r["offered_seconds"]), complete=int(r["received"]) == total)
        run.extra = {"sent": total, "received": int(r["received"]),
                     "offered_rate": round(total / float(r["offered_seconds"]), 1),
                     "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "max_ms": r["max_ms"]}
        return run


class KazooImpl(Impl):
    """kazoo 2.11's recipes: ``Queue`` (no lock: get deletes before processing) and ``LockingQueue``."""

    name = "kazoo"
    style = "kazoo"

    def put(self, path: str, count: int, threads: int, background: bool, multi: int, max_seconds: float) -> Run:
        if multi:
            raise Unsupported("kazoo has no multi-item znode (LockingQueue.put_all makes one znode per item)")
        if background:
            raise Unsupported("kazoo's queues have no background put")
        from kazoo.recipe.queue import Queue  # noqa: PLC0415

        with _connected(self.connect) as client:
            q = Queue(client, path)
            client.ensure_path(path)
            counter = itertools.count()
            done = [0]
            lock = threading.Lock()
            t0 = time.perf_counter()
            deadline = t0 + max_seconds

            def work() -> None:
                while time.perf_counter() < deadline and next(counter) < count:
                    q.put(self.payload)
                    with lock:
                        done[0] += 1

            errors = _threads(threads, work)
            seconds = time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"kazoo put failed: {errors[0]!r}") from errors[0]
        return Run(done[0], seconds, complete=done[0] >= count, extra={"threads": threads})

    def items_parent(self, path: str) -> str:
        return path  # set per call in consume (LockingQueue keeps items in <path>/entries)

    def consume(self, path: str, count: int | None, consumers: int, lock_path: str | None,
                max_seconds: float, client: KazooClient) -> Run:
        impl = "kazoo-locking" if lock_path else "kazoo-queue"
        handles = []
        for _ in range(consumers):
            argv = [sys.executable, "-m", "benchmarks.consumer_proc", "--connect", self.connect, "--path", path,
                    "--impl", impl, "--max-seconds", str(max_seconds)]
            if count is not None and consumers == 1:
                argv += ["--count", str(count)]
            handles.append(_PyConsumer(argv))
        parent = f"{path}/entries" if lock_path else path
        return drive_consumers(handles, client, parent, max_seconds, count)

    def large_items(self, path: str, payloads: list[bytes], max_seconds: float, client: KazooClient) -> Run:
        """Bare kazoo, no recipe (kazoo's queues refuse items over one znode): the same bytes written as 900 KB
        persistent nodes (``create_async``, 4 in flight), then read back (``get_async``, 4 in flight), each item
        joined and checked like zkqueue's consumer checks it, and deleted (``delete_async``, 4 in flight).
        Put time: the writes; consume time: reads, checks and deletes. Runs in this process on kazoo's default
        client (as the kazoo rows do); ``max_seconds`` is not applied (nothing here waits on a queue)."""
        base = path + "/bare"
        item_bytes = len(payloads[0]) if payloads else 0
        pieces = [(i, off) for i, item in enumerate(payloads) for off in range(0, len(item), BARE_NODE_BYTES)]
        paths = [f"{base}/n-{k:06d}" for k in range(len(pieces))]
        with _connected(self.connect) as kc:
            kc.ensure_path(base)
            t0 = time.perf_counter()
            _pipelined(((lambda p=p, i=i, o=o: kc.create_async(p, payloads[i][o:o + BARE_NODE_BYTES]))
                        for p, (i, o) in zip(paths, pieces, strict=True)), BARE_WINDOW)
            t1 = time.perf_counter()
            reads = _pipelined(((lambda p=p: kc.get_async(p)) for p in paths), BARE_WINDOW)
            got: list[list[bytes]] = [[] for _ in payloads]
            for (i, _off), (data, _stat) in zip(pieces, reads, strict=True):
                got[i].append(data)
            joined = [b"".join(parts) for parts in got]
            bad = sum(hashlib.sha256(memoryview(item)[32:]).digest() != item[:32] for item in joined)
            _pipelined(((lambda p=p: kc.delete_async(p)) for p in paths), BARE_WINDOW)
            t2 = time.perf_counter()
        if bad or joined != payloads:  # (the byte-for-byte comparison is after the clock)
            raise RuntimeError(f"bare kazoo: {bad} of {len(payloads)} items read back corrupt")
        extra = _large_extra(item_bytes, len(payloads), len(payloads), t1 - t0, t2 - t1)
        extra.update({"verified": len(payloads), "node_bytes": BARE_NODE_BYTES, "nodes": len(paths),
                      "window": BARE_WINDOW, "client": "KazooClient (kazoo's default handler)"})
        return Run(len(payloads), (t1 - t0) + (t2 - t1), extra=extra)


IMPLS: dict[str, type[Impl]] = {"zkqueue": ZkqueueImpl, "curator": CuratorImpl, "kazoo": KazooImpl}


def median(values: list[float]) -> float:
    return statistics.median(values)
