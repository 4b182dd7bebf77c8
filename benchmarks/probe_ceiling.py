"""Background puts against the ensemble's own ceiling, alternating, each run's nodes deleted before the next.

    .venv/bin/python -m benchmarks.probe_ceiling [--items 40000] [--repeats 3] [--hosts HOSTS]

The ceiling is the Curator peer's bare ZooKeeper handle (``bench-raw-create``: the same 100-byte sequential creates
as async multis, several batch/in-flight shapes) with no recipe around it; zkqueue runs its background puts on
``zkqueue.new_client``. Without ``--hosts`` it starts an embedded 3-node ensemble. Prints one line per repeat
(items/s). Not a test: numbers depend on the host.
"""

from __future__ import annotations

import argparse
import contextlib
import logging

from benchmarks.peers import CuratorImpl, ZkqueueImpl
from benchmarks.prefill import wipe
from zkqueue.transport.handler import new_client
from zkqueue.interop.curator_peer import bench_run

SHAPES = ((1000, 2), (1000, 4), (500, 4), (2000, 2))  # (creates per multi, multis in flight)

log = logging.getLogger("zkqueue.benchmarks.probe_ceiling")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=40_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--hosts", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with contextlib.ExitStack() as stack:
        hosts = args.hosts
        if hosts is None:
            from zkqueue.server.embedded import ZooKeeperEnsemble  # noqa: PLC0415

            hosts = stack.enter_context(ZooKeeperEnsemble(size=3)).connect_string
        client = new_client(hosts, timeout=30.0)
        client.start(timeout=30)
        stack.callback(client.close)
        stack.callback(client.stop)
        curator = CuratorImpl(hosts, args.size)
        stack.callback(curator.close)
        zkqueue = ZkqueueImpl(hosts, args.size)

        def bare(path: str, batch: int, inflight: int) -> float:
            r = bench_run(curator.peer, "bench-raw-create", path,
                          ["--count", str(args.items), "--size", str(args.size), "--batch", str(batch),
                           "--inflight", str(inflight)], timeout=300)
            return float(r["items"]) / float(r["seconds"])

        # untimed warm-up of the servers' JIT and both clients
        bare("/probe-ceiling-warm", 1000, 2)
        zkqueue.put("/probe-ceiling-warm-zq", args.items, 1, True, 0, 60)
        wipe(client, "/probe-ceiling-warm")
        wipe(client, "/probe-ceiling-warm-zq")
        for rep in range(args.repeats):
            rates: dict[str, float] = {}
            for batch, inflight in SHAPES:
                path = f"/probe-ceiling-{rep}-{batch}x{inflight}"
                rates[f"bare {batch}x{inflight}"] = bare(path, batch, inflight)
                wipe(client, path)
            path = f"/probe-ceiling-{rep}-zkqueue"
            rates["zkqueue put bg"] = zkqueue.put(path + "/q", args.items, 1, True, 0, 60).rate
            wipe(client, path)
            print(f"repeat {rep}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in rates.items()), flush=True)


if __name__ == "__main__":
    main()
