"""One benchmark consumer, run as its own process and ZooKeeper session:

    python -m benchmarks.consumer_proc --connect HOSTS --path P [--impl zkqueue|kazoo-queue|kazoo-locking]
        [--lock-path L] [--count N] [--max-seconds X] [--batch-size B] [--large-items] [--verify]
        [--wait-empty PATH]

Protocol on stdout (the same as the Curator peer's ``bench-consume``): ``READY`` once connected; it starts
consuming on a ``GO`` line on stdin and stops at N items, at stdin EOF or after X seconds, then prints
``RESULT {json}`` with consumed, t_go, t_first, t_last (epoch seconds) and rss_kb (peak resident memory).

For the large-items workload: ``--large-items`` turns the queue's large items on; ``--verify`` checks every item
(its first 32 bytes are the SHA-256 of the rest) before counting it and adds ``digests`` (those 32 bytes in hex, in
delivery order) and ``bad`` to the result; ``--wait-empty PATH``, once N items arrived, waits until PATH has no
children (the queue's blobs deleted with their last ack) and adds ``t_drained``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from kazoo.client import KazooClient

from zkqueue.transport.handler import new_client

log = logging.getLogger("zkqueue.benchmarks.consumer_proc")


def peak_rss_kb() -> int:
    """Peak resident memory of this process in KiB (VmHWM), -1 if unknown."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


class Tally:
    """Counts items and stamps the first and last; sets ``done`` at the target count."""

    def __init__(self, target: int | None) -> None:
        self.n = 0
        self.first = 0.0
        self.last = 0.0
        self.target = target
        self.done = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, _item: Any) -> None:
        t = time.time()
        with self._lock:
            if self.n == 0:
                self.first = t
            self.n += 1
            self.last = t
            if self.target is not None and self.n >= self.target:
                self.done.set()


class Verify:
    """Checks self-checking items (SHA-256 of the rest in the first 32 bytes), then hands them to ``tally``."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.digests: list[str] = []
        self.bad = 0
        self._lock = threading.Lock()

    def __call__(self, item: bytes) -> None:
        view = memoryview(item)
        ok = len(item) >= 32 and hashlib.sha256(view[32:]).digest() == item[:32]
        with self._lock:
            self.digests.append(bytes(view[:32]).hex())
            if not ok:
                self.bad += 1
        self.tally(item)


def _wait_empty(client: KazooClient, path: str, timeout: float) -> float | None:
    """Epoch time at which ``path`` was seen without children (or missing); None if not within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        stat = client.exists(path)
        if stat is None or stat.numChildren == 0:
            return time.time()
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.002)


def _watch_eof(stop: threading.Event) -> None:
    def run() -> None:
        for _ in sys.stdin:
            pass
        stop.set()

    threading.Thread(target=run, name="stdin-eof", daemon=True).start()


def _run_zkqueue(client: KazooClient, args: argparse.Namespace, tally: Any, stop: threading.Event) -> Any:
    from zkqueue.builder import QueueBuilder  # noqa: PLC0415
    from zkqueue.formats.serializers import BytesSerializer  # noqa: PLC0415

    b = QueueBuilder.builder(client, tally, BytesSerializer(), args.path)
    if args.batch_size is not None:
        b = b.batch_size(args.batch_size)
    if args.lock_path:
        b = b.lock_path(args.lock_path)
    if args.large_items:
        b = b.large_items(max_item_bytes=args.max_item_bytes)
    q = b.build_queue()
    q.start()
    return q


def _run_kazoo(client: KazooClient, args: argparse.Namespace, tally: Tally, stop: threading.Event) -> None:
    from kazoo.recipe.queue import LockingQueue, Queue  # noqa: PLC0415

    deadline = time.monotonic() + args.max_seconds
    if args.impl == "kazoo-queue":
        q = Queue(client, args.path)
        while not stop.is_set() and not tally.done.is_set() and time.monotonic() < deadline:
            item = q.get()
            if item is None:
                stop.wait(0.005)  # kazoo's Queue has no blocking get
                continue
            tally(item)
    else:
        lq = LockingQueue(client, args.path)
        while not stop.is_set() and not tally.done.is_set() and time.monotonic() < deadline:
            item = lq.get(0.2)
            if item is None:
                continue
            if lq.consume():
                tally(item)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connect", required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--impl", choices=("zkqueue", "kazoo-queue", "kazoo-locking"), default="zkqueue")
    parser.add_argument("--lock-path")
    parser.add_argument("--count", type=int)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--batch-size", type=int, default=None, help="default: the library's")
    parser.add_argument("--large-items", action="store_true", help="zkqueue: QueueBuilder.large_items(...) on")
    parser.add_argument("--max-item-bytes", type=int, default=64 * 2**20, help="with --large-items")
    parser.add_argument("--verify", action="store_true",
                        help="zkqueue: check each item (its first 32 bytes are the SHA-256 of the rest)")
    parser.add_argument("--wait-empty", metavar="PATH",
                        help="after the count: wait until PATH has no children, report t_drained")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    # zkqueue runs on its recommended client (zkqueue.transport.handler.new_client: one poll(2) per wait); kazoo's recipes
    # on kazoo's default client, as their users run them.
    client = (new_client(args.connect, timeout=15.0) if args.impl == "zkqueue"
              else KazooClient(hosts=args.connect, timeout=15.0))
    client.start(timeout=30)
    print("READY", flush=True)
    go = sys.stdin.readline().strip()
    if go != "GO":
        print(f"expected GO on stdin, got {go!r}", file=sys.stderr)
        return 2
    stop = threading.Event()
    _watch_eof(stop)
    tally = Tally(args.count)
    verify = Verify(tally) if args.verify and args.impl == "zkqueue" else None
    t_go = time.time()
    queue = None
    if args.impl == "zkqueue":
        queue = _run_zkqueue(client, args, verify or tally, stop)
        deadline = time.monotonic() + args.max_seconds
        while not tally.done.is_set() and not stop.is_set() and time.monotonic() < deadline:
            tally.done.wait(0.02)
    else:
        _run_kazoo(client, args, tally, stop)
    t_drained = _wait_empty(client, args.wait_empty, 30.0) if args.wait_empty and tally.done.is_set() else None
    result: dict[str, Any] = {"consumed": tally.n, "t_go": t_go, "t_first": tally.first, "t_last": tally.last,
                              "rss_kb": peak_rss_kb()}
    if t_drained is not None:
        result["t_drained"] = t_drained
    if verify is not None:
        result["digests"] = list(verify.digests)
        result["bad"] = verify.bad
    if queue is not None:
        stats = queue.stats().as_dict()
        result["stats"] = {k: v for k, v in stats.items() if v}
    print("RESULT " + json.dumps(result), flush=True)
    # The result is out: release the session (and its lock nodes) and leave without waiting on anything else.
    try:
        if queue is not None:
            queue.close()
        client.stop()
        client.close()
    finally:
        os._exit(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
