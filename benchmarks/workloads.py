"""The workloads of issue 6 and their targets.

A workload runs one implementation once at a fresh queue path (``Workload.run``) and returns a :class:`Run`.
Consume workloads pre-fill their queue first (not timed), in each implementation's own format.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from benchmarks.peers import Impl, Run, Unsupported
from benchmarks.prefill import prefill, wipe

log = logging.getLogger("zkqueue.benchmarks.workloads")

MiB = 2**20


@dataclass
class Settings:
    """Sizes and caps for one benchmark invocation."""

    count: int = 10_000  # items per throughput run
    size: int = 100  # payload bytes
    max_seconds: float = 20.0  # cap per run; a slower implementation reports the rate it reached (partial)
    latency_seconds: float = 5.0  # how long the producer offers items in the latency workload
    latency_rate: float | None = None  # offered rate; default: 50% of zkqueue's max rate measured in this run
    latency_drain: float = 15.0
    deep_counts: tuple[int, ...] = ()  # e.g. (200_000, 1_000_000)
    deep_max_seconds: float = 900.0
    large_count: int = 8  # items per run of the large-items workload
    large_size: int = 10 * MiB  # bytes per large item


@dataclass
class Target:
    """What zkqueue must reach on this workload (issue 6)."""

    text: str
    kind: str  # "ratio" (zkqueue / curator >= value), "latency" (p99 <= curator's), "deep", "ceiling",
    #            "bare" (zkqueue / bare kazoo >= value), "none"
    value: float = 0.0


@dataclass
class Workload:
    name: str
    label: str
    impls: tuple[str, ...]
    target: Target
    kind: str  # put | ceiling | consume | latency | deep | large | spark
    params: dict[str, Any] = field(default_factory=dict)
    deep_only: bool = False

    def count(self, s: Settings) -> int:
        if self.kind == "large":
            return s.large_count
        return int(s.count * self.params.get("count_factor", 1))

    def run(self, impl: Impl, client: KazooClient, root: str, s: Settings, ctx: dict[str, Any]) -> Run:
        """One timed run at a fresh path; the path is deleted afterwards (untimed), so every run meets the same
        small data tree instead of everything the runs before it left."""
        path = f"{root}/{self.name}-{impl.name}-{ctx['seq']}"
        try:
            return self._run_at(path, impl, client, s, ctx)
        finally:
            try:
                wipe(client, path)
            except Exception as exc:  # noqa: BLE001 - a leftover only costs memory on the servers
                log.warning("could not delete %s after the run: %r", path, exc)

    def _run_at(self, path: str, impl: Impl, client: KazooClient, s: Settings, ctx: dict[str, Any]) -> Run:
        p = self.params
        if self.kind == "put":
            return impl.put(path + "/q", self.count(s), p.get("threads", 1), p.get("background", False),
                            p.get("multi", 0), s.max_seconds)
        if self.kind in ("consume", "deep"):
            n = p["pending"] if self.kind == "deep" else self.count(s)
            locked = bool(p.get("lock"))
            qpath = path + "/q"
            parent = f"{qpath}/entries" if impl.style == "kazoo" and locked else qpath
            prefill(client, parent, n, impl.payload, style=impl.style)
            cap = s.deep_max_seconds if self.kind == "deep" else s.max_seconds
            if self.kind == "deep" and impl.name == "curator":
                cap = min(cap, 60.0)  # Curator cannot list such a parent; one minute shows it
            return impl.consume(qpath, n, p.get("consumers", 1), path + "/locks" if locked else None, cap, client)
        if self.kind == "ceiling":
            return impl.raw_creates(path + "/q", self.count(s), s.max_seconds)
        if self.kind == "latency":
            rate = ctx["latency_rate"]
            return impl.latency(path + "/q", rate, s.latency_seconds, s.latency_drain)
        if self.kind == "large":
            # the payloads are made before the run (untimed); the cap is per phase (put, consume)
            return impl.large_items(path, large_payloads(self.count(s), s.large_size), s.max_seconds, client)
        raise ValueError(self.kind)


def large_payloads(count: int, size: int) -> list[bytes]:
    """``count`` incompressible items of ``size`` bytes that check themselves: the first 32 bytes are the SHA-256
    of the rest (random bytes, so zlib's sample check stores them uncompressed)."""
    out = []
    for _ in range(count):
        body = os.urandom(max(0, size - 32))
        out.append(hashlib.sha256(body).digest() + body)
    return out


ALL_IMPLS = ("zkqueue", "curator", "kazoo")


def workloads(s: Settings) -> list[Workload]:
    w = [
        Workload("put_fg_1", "put, foreground, 1 thread", ALL_IMPLS, Target(">= 1x", "ratio", 1.0), "put",
                 {"threads": 1}),
        Workload("put_fg_16", "put, foreground, 16 threads", ALL_IMPLS, Target(">= 2x", "ratio", 2.0), "put",
                 {"threads": 16}),
        Workload("put_bg", "put, background", ("zkqueue", "curator", "kazoo"), Target(">= 10x", "ratio", 10.0),
                 "put", {"background": True, "count_factor": 2}),
        Workload("put_bg_ceiling", "put, background: ensemble ceiling (bare ZooKeeper Java client)", ("curator",),
                 Target("(reference)", "ceiling"), "ceiling", {"count_factor": 2}),
        Workload("put_multi", "put_multi (100 per znode)", ("zkqueue", "curator", "kazoo"),
                 Target(">= 1.5x", "ratio", 1.5), "put", {"background": True, "multi": 100, "count_factor": 10}),
        Workload("consume_plain", "consume, no lock", ALL_IMPLS, Target(">= 20x", "ratio", 20.0), "consume", {}),
        Workload("consume_lock_1", "consume, lock-safe, 1 consumer", ALL_IMPLS, Target(">= 20x", "ratio", 20.0),
                 "consume", {"lock": True}),
        Workload("consume_lock_4", "consume, lock-safe, 4 consumers", ALL_IMPLS, Target("(none)", "none"),
                 "consume", {"lock": True, "consumers": 4}),
        Workload("latency", "end-to-end latency p99", ("zkqueue", "curator"),
                 Target("p99 <= Curator's", "latency"), "latency", {}),
        Workload("large_items", f"large items, {_size_text(s.large_size)}: put, then consume lock-safe (MB/s)",
                 ALL_IMPLS, Target(">= 0.7x bare kazoo", "bare", 0.7), "large", {}),
    ]
    for n in s.deep_counts:
        label = f"deep queue drain, {n // 1000}k pending" if n < 1_000_000 else f"deep queue drain, {n // 1_000_000}M pending"
        w.append(Workload(f"deep_{n}", label, ("zkqueue", "curator"),
                          Target("drains; >= 50% of 10k rate", "deep", 0.5), "deep", {"pending": n}, deep_only=True))
    return w


def _size_text(n: int) -> str:
    if n % MiB == 0:
        return f"{n // MiB} MiB"
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n / 1024:.0f} KiB"


# ---------------------------------------------------------------------------------------------------------------
# Spark (benchmarks/spark_probe.py is written by the Spark helper; used only when present)

SPARK_PROBE = Path(__file__).with_name("spark_probe.py")


def run_spark(connect: str, quick: bool, timeout: float = 900.0) -> dict[str, Any]:
    """Run ``benchmarks/spark_probe.py`` (the Spark helper's probe: a local[2] SparkSession against ``connect``)
    if present and return its JSON numbers, else the reason it could not."""
    if not SPARK_PROBE.is_file():
        return {"status": "n/a", "reason": "benchmarks/spark_probe.py is not in the repository yet"}
    if quick:
        return {"status": "n/a", "reason": "skipped in --quick (Spark start-up alone takes tens of seconds)"}
    argv = [sys.executable, str(SPARK_PROBE), "--hosts", connect]
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              cwd=str(SPARK_PROBE.parent.parent))
    except subprocess.TimeoutExpired:
        return {"status": "n/a", "reason": f"spark_probe did not finish within {timeout:.0f} s"}
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"status": "n/a", "reason": f"spark_probe exited {done.returncode}: {' | '.join(tail)}"}
    text = done.stdout
    brace = text.rfind("\n{")
    try:
        value = json.loads(text[brace + 1 if brace >= 0 else text.find("{"):])
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return {"status": "n/a", "reason": "spark_probe printed no JSON result"}
    return {"status": "ok", "seconds": round(time.monotonic() - start, 1), "result": value}
