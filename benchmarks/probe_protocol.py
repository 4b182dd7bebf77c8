"""Probe: what zkqueue.transport.protocol's batching buys over kazoo's per-request calls.

Reads: multi_read of N nodes vs pipelined get_async (get_many) vs a loop of sync get.
Writes: run_multi of N creates vs pipelined create_async (create_many) vs a loop of sync create.

    .venv/bin/python benchmarks/probe_protocol.py                 # starts a 1-node ZooKeeper, then stops it
    .venv/bin/python benchmarks/probe_protocol.py --hosts 127.0.0.1:2181 --batch 100 --rounds 50

Prints items/s per method (median of the rounds). Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import time
import uuid
from collections.abc import Callable, Iterator

from kazoo.client import KazooClient

from zkqueue.transport.protocol import CreateOp, create_many, get_many, multi_read, run_multi

log = logging.getLogger("zkqueue.benchmarks.probe_protocol")


@contextlib.contextmanager
def _server(hosts: str | None, force_sync: bool) -> Iterator[str]:
    if hosts:
        yield hosts
        return
    from zkqueue.server.embedded import ZooKeeperEnsemble  # noqa: PLC0415 - only needed without --hosts

    with ZooKeeperEnsemble(size=1, force_sync=force_sync) as zk:
        yield zk.connect_string


def _rate(batch: int, rounds: int, run: Callable[[int], None]) -> float:
    """Median items/s over ``rounds`` calls of ``run(round_index)``, after one warm-up call."""
    run(-1)
    rates = []
    for r in range(rounds):
        start = time.perf_counter()
        run(r)
        rates.append(batch / (time.perf_counter() - start))
    return statistics.median(rates)


def probe(client: KazooClient, batch: int, rounds: int, size: int) -> dict[str, float]:
    base = f"/probe-{uuid.uuid4().hex[:8]}"
    client.ensure_path(f"{base}/read")
    payload = b"p" * size
    paths = [f"{base}/read/n{i:05d}" for i in range(batch)]
    assert run_multi(client, [CreateOp(p, payload) for p in paths]).ok

    def check_reads(results: list) -> None:
        if any(isinstance(r, Exception) or r[0] != payload for r in results):
            raise RuntimeError("a read failed")

    out: dict[str, float] = {}
    out["read multi_read"] = _rate(batch, rounds, lambda r: check_reads(multi_read(client, paths)))
    out["read pipelined get_async"] = _rate(batch, rounds, lambda r: check_reads(get_many(client, paths)))
    out["read sync get"] = _rate(batch, rounds, lambda r: check_reads([client.get(p) for p in paths]))

    def parent(kind: str, r: int) -> str:
        path = f"{base}/{kind}{r + 1}"
        client.create(path)
        return path

    def via_multi(r: int) -> None:
        p = parent("m", r)
        result = run_multi(client, [CreateOp(f"{p}/queue-", payload, sequence=True) for _ in range(batch)])
        result.raise_for_failure()

    def via_async(r: int) -> None:
        p = parent("a", r)
        results = create_many(client, [(f"{p}/queue-", payload, {"sequence": True}) for _ in range(batch)])
        if any(isinstance(x, Exception) for x in results):
            raise RuntimeError("a create failed")

    def via_sync(r: int) -> None:
        p = parent("s", r)
        for _ in range(batch):
            client.create(f"{p}/queue-", payload, sequence=True)

    # the per-round parent create is inside the timed call for all three, an equal small handicap
    out["create run_multi"] = _rate(batch, rounds, via_multi)
    out["create pipelined create_async"] = _rate(batch, rounds, via_async)
    out["create sync create"] = _rate(batch, max(3, rounds // 5), via_sync)
    client.delete(base, recursive=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", help="connect string; default: start a 1-node ZooKeeper")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--size", type=int, default=100, help="bytes per node")
    parser.add_argument("--force-sync", action="store_true", help="fsync the txn log (embedded server only)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with _server(args.hosts, args.force_sync) as hosts:
        client = KazooClient(hosts)
        client.start(timeout=30)
        try:
            rates = probe(client, args.batch, args.rounds, args.size)
        finally:
            client.stop()
            client.close()
    if args.json:
        print(json.dumps({k: round(v) for k, v in rates.items()}))
        return
    print(f"batch={args.batch} size={args.size}B rounds={args.rounds} (median items/s)")
    for name, rate in rates.items():
        print(f"  {name:32s} {rate:10,.0f}")


if __name__ == "__main__":
    main()
