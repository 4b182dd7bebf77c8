"""The registry of live workers: each running ``zkqueue worker`` keeps an ephemeral node under the app's
``/<namespace>/workers`` with what it is (host, pid, queues, pool, concurrency, when it started) and the ids of
the jobs it runs now. The node goes with the worker's session, so the listing is the live workers
(``zkqueue workers``, the dashboard)."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError

from zkqueue.formats import naming

log = logging.getLogger("zkqueue.tasks.live")


@dataclass(frozen=True)
class WorkerInfo:
    """One live worker as its registry node says."""

    name: str
    host: str
    pid: int
    queues: tuple[str, ...]
    pool: str
    concurrency: int
    started: float  # seconds since the epoch
    running: tuple[str, ...] = field(default=())

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> WorkerInfo:
        raw = json.loads(data)
        return cls(name=str(raw["name"]), host=str(raw["host"]), pid=int(raw["pid"]),
                   queues=tuple(raw["queues"]), pool=str(raw["pool"]), concurrency=int(raw["concurrency"]),
                   started=float(raw["started"]), running=tuple(raw.get("running", ())))


class Registration:
    """This process's registry node: :meth:`update` rewrites the running job ids when they changed."""

    def __init__(self, client: Any, workers_path: str, *, queues: list[str], pool: str, concurrency: int) -> None:
        host = socket.gethostname()
        self._client = client
        self.info = WorkerInfo(name=f"{host}.{os.getpid()}.{uuid.uuid4().hex[:6]}", host=host, pid=os.getpid(),
                               queues=tuple(queues), pool=pool, concurrency=concurrency, started=time.time())
        self.path = naming.join(workers_path, self.info.name)
        client.ensure_path(workers_path)
        client.create(self.path, self.info.encode(), ephemeral=True)

    def update(self, running: list[str]) -> None:
        """Write the running job ids if they changed (a lost write is tried again at the next call)."""
        ids = tuple(running)
        if ids == self.info.running:
            return
        info = WorkerInfo(**{**asdict(self.info), "running": ids})
        try:
            self._client.set(self.path, info.encode())
        except NoNodeError:  # the session expired and took the node: register again
            self._client.create(self.path, info.encode(), ephemeral=True)
        self.info = info

    def close(self) -> None:
        try:
            self._client.delete(self.path)
        except Exception:  # noqa: BLE001 - it goes with the session anyway
            log.debug("deleting %s failed", self.path, exc_info=True)


def live_workers(client: Any, workers_path: str) -> list[WorkerInfo]:
    """The live workers registered under ``workers_path``, by name (an empty list when there is none)."""
    try:
        names = sorted(client.get_children(workers_path))
    except NoNodeError:
        return []
    out = []
    for name in names:
        try:
            data, _stat = client.get(naming.join(workers_path, name))
            out.append(WorkerInfo.decode(data))
        except NoNodeError:  # it stopped meanwhile
            continue
        except (ValueError, KeyError, TypeError):
            log.warning("worker node %s holds no worker record; skipped", name)
    return out


__all__ = ["Registration", "WorkerInfo", "live_workers"]
