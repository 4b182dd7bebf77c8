"""A producer process for the restart scenario of the exactly-once puts: ``python seqproducer.py <json config>``.

It puts numbered batches with ``put_multi(items, sequence=n)`` under a fixed ``producer_id`` and journals
``send n`` before each put and ``ack n`` after it. Started again after a SIGKILL, it replays the last batch it
sent (acknowledged or not) and goes on: the marker keeps a replayed batch that had committed from being stored
twice."""

from __future__ import annotations

import json
import sys
import time

from kazoo.client import KazooClient

from zkqueue.builder import QueueBuilder
from zkqueue.formats.serializers import StrSerializer


def main() -> None:
    cfg = json.loads(sys.argv[1])
    sent = 0
    try:
        with open(cfg["journal"], encoding="utf-8") as journal:
            for line in journal:
                kind, _, number = line.strip().partition(" ")
                if kind == "send" and number.isdigit():
                    sent = int(number)
    except FileNotFoundError:
        pass
    client = KazooClient(hosts=cfg["hosts"], timeout=10.0)
    client.start(timeout=60)
    queue = (QueueBuilder.builder(client, None, StrSerializer(), cfg["path"]).put_in_background(False)
             .producer_id(cfg["producer_id"]).build_queue())
    queue.start()
    with open(cfg["journal"], "a", buffering=1, encoding="utf-8") as journal:
        for number in range(max(1, sent), cfg["batches"] + 1):  # the last batch sent goes again
            journal.write(f"send {number}\n")
            queue.put_multi([f"b{number}-{k}" for k in range(cfg["batch_size"])], sequence=number)
            journal.write(f"ack {number}\n")
            time.sleep(cfg.get("pause", 0.0))
        journal.write("done\n")
    queue.close()
    client.stop()
    client.close()


if __name__ == "__main__":
    main()
