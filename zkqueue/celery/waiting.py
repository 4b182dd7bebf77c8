"""Waiting for results on ZooKeeper watches: ``AsyncResult.get()`` and ``join`` without polling the server.

A waiter reads the nodes it waits for (one multiRead), leaves a one-shot watch on each that is not ready yet
(``exists`` with a watch: it fires on the node's creation, change or deletion) and sleeps until a watch fires; then
it reads again only the nodes whose watch fired. When the session is lost kazoo fires every watch with no path:
the waiter then reads every node again and leaves new watches. Between wake-ups no request is sent; the sleep is
cut into ``tick`` slices only to call Celery's ``on_interval`` hook (which checks a chain's parents) and to
honour the timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from zkqueue.celery.result_store import ResultStore, Stored

log = logging.getLogger("zkqueue.celery.waiting")

T = TypeVar("T")


class WaitTimeout(Exception):
    """The results waited for were not all ready within the timeout."""


class _Wake:
    """A kazoo watch callback shared by every node one waiter watches: notes which paths fired."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._fired: set[str | None] = set()

    def __call__(self, watched: Any) -> None:  # kazoo's event thread: never block
        with self._lock:
            self._fired.add(getattr(watched, "path", None) or None)
        self.event.set()

    def take(self) -> set[str | None]:
        with self._lock:
            fired, self._fired = self._fired, set()
            self.event.clear()
        return fired


def wait_many(store: ResultStore, paths: list[str], ready: Callable[[Stored | None], T | None], *,
              timeout: float | None = None, tick: float = 0.5,
              on_tick: Callable[[], None] | None = None) -> Iterator[tuple[str, T]]:
    """Yield ``(path, ready(stored))`` for each of ``paths`` as soon as ``ready`` says it is (returns non-None),
    in the order they become ready. :class:`WaitTimeout` when ``timeout`` seconds pass first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = list(dict.fromkeys(paths))
    wake = _Wake()
    to_read = list(pending)
    while True:
        versions: dict[str, int | None] = {}
        for path, stored in zip(to_read, store.read_many(to_read)):
            value = ready(stored)
            if value is not None:
                pending.remove(path)
                yield path, value
            else:
                versions[path] = None if stored is None else stored.version
        if not pending:
            return
        changed = _arm(store, wake, versions)
        if changed:
            to_read = changed  # changed between the read and the watch: read again at once
            continue
        while not wake.event.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise WaitTimeout(f"{len(pending)} result(s) not ready within {timeout} s")
            if wake.event.wait(tick if left is None else min(tick, left)):
                break
            if on_tick is not None:
                on_tick()
        fired = wake.take()
        to_read = list(pending) if None in fired else [p for p in pending if p in fired]
        if not to_read:  # a watch of a node no longer waited for
            to_read = []
            continue


def _arm(store: ResultStore, wake: _Wake, versions: dict[str, int | None]) -> list[str]:
    """Leave ``wake`` as a watch on each path (pipelined ``exists`` calls); the paths whose node changed since it
    was read (its version or existence differs), to be read again."""
    if not versions:
        return []
    calls = [(path, store.client.exists_async(path, watch=wake)) for path in versions]
    changed = []
    for path, pending in calls:
        stat = store.retrying(lambda p=pending, q=path: _stat(store, p, q, wake), f"watch {path}")
        now = None if stat is None else stat.version
        if now != versions[path]:
            changed.append(path)
    return changed


def _stat(store: ResultStore, pending: Any, path: str, wake: _Wake) -> Any:
    """The reply of a pipelined ``exists``; when that request failed (a connection error), ask again."""
    try:
        return pending.get()
    except Exception:  # noqa: BLE001 - a failed pipelined request: ask again synchronously
        # the retry of read_retrying calls this again: send a fresh request then
        return store.client.exists(path, watch=wake)
