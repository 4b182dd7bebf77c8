"""Producer and consumer processes of the fault suite: ``python worker.py <role> <json config>``.

Every event goes to the process's own journal (JSON lines, flushed per line, so a SIGKILL loses at most the line
being written): ``ack`` (a put the server acknowledged), ``uncertain`` (a put that raised: it may or may not be
stored), ``deliver`` (an item handed to this consumer, with its session id), ``lost`` (this process's session
ended), ``ready`` and ``done``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.protocol.states import KazooState

from zkqueue.builder import QueueBuilder
from zkqueue.formats.serializers import StrSerializer
from zkqueue.server.testing import FAST_RECONNECT


class Journal:
    def __init__(self, path: str) -> None:
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        self._lock = threading.Lock()

    def write(self, event: str, **fields: object) -> None:
        line = json.dumps({"ev": event, "t": time.time(), "pid": os.getpid(), **fields})
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


def connect(cfg: dict, journal: Journal, stop: threading.Event) -> KazooClient:
    for attempt in range(5):
        client = KazooClient(hosts=cfg["hosts"], timeout=cfg["session_timeout"],
                             connection_retry=dict(FAST_RECONNECT))
        try:
            client.start(timeout=60)
            break
        except ConnectionLoss:
            # The server this worker reached went away while kazoo's start() checked the chroot (a scenario's kill
            # can land while a late worker starts): start again on a new client, before anything is journaled.
            client.stop()
            client.close()
            if attempt == 4:
                raise
            time.sleep(0.5)

    def listener(state: str) -> None:  # kazoo's connection thread: only a line write
        if state == KazooState.LOST and not stop.is_set():  # client.stop() at the end is LOST too: not a loss
            journal.write("lost")

    client.add_listener(listener)
    return client


def _wait_connected(client: KazooClient, stop: threading.Event) -> None:
    while not client.connected and not stop.is_set():
        time.sleep(0.05)


class _PutJournal:
    """A background producer's put listener: the put thread reports each put's outcome."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal

    def put_completed(self, item: str) -> None:
        self._journal.write("ack", id=item)

    def put_multi_completed(self, items: list) -> None:
        for item in items:
            self._journal.write("ack", id=item)

    def put_failed(self, item: str, exc: BaseException) -> None:
        self._journal.write("uncertain", id=item, error=repr(exc)[:200])


def produce(cfg: dict, journal: Journal, stop: threading.Event) -> None:
    if cfg.get("background"):
        produce_in_background(cfg, journal, stop)
        return
    client = connect(cfg, journal, stop)
    queue = QueueBuilder.builder(client, None, StrSerializer(), cfg["queue"]).put_in_background(False).build_queue()
    queue.start()
    journal.write("ready")
    serial = 0
    pause = cfg.get("pause", 0.0)
    while serial < cfg["count"] and not stop.is_set():
        item = f"{cfg['name']}-{serial:06d}"
        serial += 1
        try:
            queue.put(item)
        except Exception as exc:  # noqa: BLE001 - the outcome is unknown: recorded, and we move on
            journal.write("uncertain", id=item, error=repr(exc)[:200])
            _wait_connected(client, stop)
            continue
        journal.write("ack", id=item)
        if pause:
            time.sleep(pause)
    journal.write("done")
    stop.set()
    queue.close()
    client.stop()
    client.close()


def produce_in_background(cfg: dict, journal: Journal, stop: threading.Event) -> None:
    """Background puts: ``put`` queues the item; the put thread's listener journals the outcome."""
    client = connect(cfg, journal, stop)
    queue = QueueBuilder.builder(client, None, StrSerializer(), cfg["queue"]).build_queue()
    queue.put_listeners.add(_PutJournal(journal))
    queue.start()
    journal.write("ready")
    serial = 0
    pause = cfg.get("pause", 0.0)
    while serial < cfg["count"] and not stop.is_set():
        queue.put(f"{cfg['name']}-{serial:06d}")
        serial += 1
        time.sleep(pause or 0.002)  # a steady stream, so that faults meet puts in flight
    queue.flush_puts(120)
    journal.write("done")
    stop.set()
    queue.close()
    client.stop()
    client.close()


def consume(cfg: dict, journal: Journal, stop: threading.Event) -> None:
    client = connect(cfg, journal, stop)
    item_seconds = cfg.get("item_seconds", 0.0)

    hold_file = cfg.get("hold_file")

    def on_item(item: str) -> None:
        session = client.client_id[0] if client.client_id else None
        journal.write("deliver", id=item, sid=session)
        if hold_file and os.path.exists(hold_file):
            journal.write("holding", id=item)  # the test SIGKILLs us now: provably mid-item
            stop.wait()
        if item_seconds:
            time.sleep(item_seconds)  # "work": a SIGKILL now lands mid-item

    builder = QueueBuilder.builder(client, on_item, StrSerializer(), cfg["queue"]).batch_size(cfg.get("batch", 10))
    if cfg.get("lock"):
        builder = builder.lock_path(cfg["lock"])
    queue = builder.build_queue()
    queue.start()
    journal.write("ready", sid=client.client_id[0] if client.client_id else None)
    while not stop.wait(0.2):
        pass
    queue.flush_acks(10)
    queue.close()
    stats = queue.stats().as_dict()
    journal.write("done", stats=stats)
    client.stop()
    client.close()


def start_worker(cfg_json: str) -> tuple[dict, Journal, threading.Event]:
    """A worker script's start: its config, its journal, and a stop event that SIGTERM sets."""
    cfg = json.loads(cfg_json)
    journal = Journal(cfg["journal"])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return cfg, journal, stop


def main() -> None:
    cfg, journal, stop = start_worker(sys.argv[2])
    {"producer": produce, "consumer": consume}[sys.argv[1]](cfg, journal, stop)


if __name__ == "__main__":
    main()
