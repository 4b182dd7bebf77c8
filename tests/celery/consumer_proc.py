"""A consumer process for test_worker_death: takes one message, prints it, and waits (to be SIGKILLed)."""

from __future__ import annotations

import sys
import time

import kombu

import zkqueue.celery  # noqa: F401


def main(url: str) -> None:
    conn = kombu.Connection(url, connect_timeout=10)
    queue = conn.SimpleQueue("work")
    message = queue.get(timeout=30)
    print(f"GOT {message.payload}", flush=True)
    time.sleep(600)  # never acks


if __name__ == "__main__":
    main(sys.argv[1])
