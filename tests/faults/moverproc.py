"""A process that only takes part in the election of a parking queue's mover (the fault suite kills it mid-move).

argv[1]: JSON config with hosts, path, session_timeout and the layout fields."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading

from kazoo.client import KazooClient

from zkqueue.builder import QueueBuilder
from zkqueue.formats import buckets
from zkqueue.formats.serializers import JsonSerializer


def main() -> None:
    cfg = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    client = KazooClient(hosts=cfg["hosts"], timeout=cfg["session_timeout"])
    client.start(timeout=60)
    layout = buckets.Layout(**cfg["layout"])
    queue = (QueueBuilder.builder(client, None, JsonSerializer(), cfg["path"]).schedule_layout(layout)
             .build_delay_queue(park_after=0.0))
    with queue:
        print("READY", flush=True)
        stop.wait()
    client.stop()


if __name__ == "__main__":
    main()
