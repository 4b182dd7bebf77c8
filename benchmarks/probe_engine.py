"""Quick engine speed probe: background put, plain consume and lock-safe consume (1 consumer, 100-byte items).

    .venv/bin/python benchmarks/probe_engine.py [--items 10000] [--hosts HOST:PORT] [--batch-size 100]

Without --hosts it starts a private 1-node ZooKeeper (zkqueue.server.embedded). Prints items/s per workload, the
ZooKeeper write ops each consumed item cost (creates, deletes and checks sent in multis and single creates, counted
on the client), and the Curator 5.9.0 reference numbers measured on this machine. Not a test: the real benchmark
suite is elsewhere.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import threading
import time
import uuid

from typing import Any

from kazoo.client import KazooClient

from zkqueue.builder import QueueBuilder
from zkqueue.formats.serializers import BytesSerializer

CURATOR = {"put_background": 2800.0, "consume_plain": 261.0, "consume_lock_safe": 164.0}


class Counter:
    def __init__(self, target: int) -> None:
        self.n = 0
        self.target = target
        self.done = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, item: bytes) -> None:
        with self.lock:
            self.n += 1
            if self.n >= self.target:
                self.done.set()


def fill(client: KazooClient, path: str, n: int, payload: bytes) -> float:
    q = QueueBuilder.builder(client, None, BytesSerializer(), path).build_queue()
    with q:
        start = time.perf_counter()
        for _ in range(n):
            q.put(payload)
        if not q.flush_puts(300):
            raise RuntimeError("background puts did not flush")
        elapsed = time.perf_counter() - start
        stats = q.stats()
    if stats.put_ok != n:
        raise RuntimeError(f"only {stats.put_ok} of {n} puts succeeded ({stats.put_failed} failed)")
    return n / elapsed


class OpCounter:
    """Counts the write ops zkqueue sends (through ``zkqueue.transport.protocol``) while active."""

    def __init__(self) -> None:
        from zkqueue.transport import protocol

        self.ops: collections.Counter[str] = collections.Counter()
        self.active = False
        real_send_multi, real_create = protocol.send_multi, protocol.create

        def send_multi(client: Any, ops: Any, **kwargs: Any) -> Any:
            ops = list(ops)
            if self.active:
                self.ops.update(type(op).__name__ for op in ops)
            return real_send_multi(client, ops, **kwargs)

        def create(client: Any, op: Any, **kwargs: Any) -> Any:
            if self.active:
                self.ops[type(op).__name__] += 1
            return real_create(client, op, **kwargs)

        protocol.send_multi, protocol.create = send_multi, create

    def per_item(self, n: int) -> str:
        total = sum(self.ops.values())
        parts = ", ".join(f"{k.removesuffix('Op').lower()} {v / n:.3f}" for k, v in sorted(self.ops.items()))
        return f"{total / n:.2f} ({parts})"


OPS = OpCounter()


def consume(client: KazooClient, path: str, n: int, lock_path: str | None, batch_size: int) -> float:
    counter = Counter(n)
    b = QueueBuilder.builder(client, counter, BytesSerializer(), path).batch_size(batch_size)
    if lock_path:
        b = b.lock_path(lock_path)
    q = b.build_queue()
    OPS.ops.clear()
    OPS.active = True
    start = time.perf_counter()
    with q:
        if not counter.done.wait(600):
            raise RuntimeError(f"consumed only {counter.n} of {n}")
        elapsed = time.perf_counter() - start
        stats = q.stats()
    OPS.active = False
    if stats.consumed != n or stats.loop_errors:
        raise RuntimeError(f"unexpected stats: {stats}")
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=300)
    parser.add_argument("--hosts", default=None)
    parser.add_argument("--warmup", type=int, default=10_000, help="items run through every workload first, untimed")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    payload = b"x" * args.size

    with contextlib.ExitStack() as stack:
        hosts = args.hosts
        if hosts is None:
            from zkqueue.server.embedded import ZooKeeperEnsemble

            hosts = stack.enter_context(ZooKeeperEnsemble(size=1)).connect_string
        client = KazooClient(hosts=hosts)
        client.start()
        stack.callback(client.close)
        stack.callback(client.stop)
        root = f"/probe-{uuid.uuid4().hex[:8]}"
        if args.warmup:  # a fresh JVM is several times slower for its first few thousand requests
            fill(client, f"{root}/warm", args.warmup, payload)
            consume(client, f"{root}/warm", args.warmup, None, args.batch_size)
            fill(client, f"{root}/warm", args.warmup, payload)
            consume(client, f"{root}/warm", args.warmup, f"{root}/warm-locks", args.batch_size)
        results = {}
        results["put_background"] = fill(client, f"{root}/plain", args.items, payload)
        results["consume_plain"] = consume(client, f"{root}/plain", args.items, None, args.batch_size)
        writes = {"consume_plain": OPS.per_item(args.items)}
        fill(client, f"{root}/locked", args.items, payload)
        results["consume_lock_safe"] = consume(client, f"{root}/locked", args.items, f"{root}/locks", args.batch_size)
        writes["consume_lock_safe"] = OPS.per_item(args.items)
        client.delete(root, recursive=True)

    import os

    load = os.getloadavg()[0]
    print(f"{args.items} items of {args.size} bytes, batch_size {args.batch_size}, load average {load:.1f}")
    print(f"{'workload':<20} {'items/s':>10} {'Curator':>9} {'x':>6}  write ops per item")
    for name, rate in results.items():
        print(f"{name:<20} {rate:>10.0f} {CURATOR[name]:>9.0f} {rate / CURATOR[name]:>6.1f}  {writes.get(name, '')}")


if __name__ == "__main__":
    main()
