"""A producer process for the large-item fault test: puts small items and one large item, slowly.

argv[1] is JSON: hosts, path, size (bytes of the large item), seed, chunk_delay (seconds before each chunk write,
so the parent can kill it mid-blob), session_timeout. It prints ``put <n>`` after each put returns.
"""

from __future__ import annotations

import json
import random
import sys
import time

from zkqueue import BytesSerializer, QueueBuilder
from zkqueue.engine import blobs
from zkqueue.server.testing import make_client


def main() -> None:
    cfg = json.loads(sys.argv[1])
    delay = float(cfg.get("chunk_delay", 0.0))
    if delay:
        real = blobs.protocol.send_multi

        def slow_send_multi(client, ops, **kw):  # noqa: ANN001, ANN202 - slows chunk writes only
            ops = list(ops)
            if any("/c-" in getattr(op, "path", "") for op in ops):
                time.sleep(delay)
            return real(client, ops, **kw)

        blobs.protocol.send_multi = slow_send_multi  # type: ignore[assignment]
    client = make_client(cfg["hosts"], timeout=float(cfg.get("session_timeout", 4.0)))
    rnd = random.Random(cfg["seed"])
    queue = (QueueBuilder.builder(client, None, BytesSerializer(), cfg["path"])
             .put_in_background(False).large_items(orphan_grace=1.0).build_queue())
    with queue:
        queue.put(b"before")
        print("put 1", flush=True)
        queue.put(rnd.randbytes(int(cfg["size"])))
        print("put 2", flush=True)
        queue.put(b"after")
        print("put 3", flush=True)


if __name__ == "__main__":
    main()
