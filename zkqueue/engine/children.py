"""Versioned child cache of one ZooKeeper node (Curator's ChildrenCache, with its stalls fixed).

The cache holds ``(children, version)``; every successful listing stores a new snapshot and bumps the
version, so waiters can block until "something newer than what I saw". It is fed by one-shot child watches
re-armed on every listing, and re-synced when kazoo reconnects after SUSPENDED or LOST (CURATOR-623).
Listings are coalesced: at most one is in flight; events arriving meanwhile cause exactly one more.
If the node disappears, it is recreated (counted, logged) instead of stalling silently.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, NoNodeError, SessionExpiredError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent

from zkqueue.listeners import Dispatcher
from zkqueue.transport import protocol

log = logging.getLogger("zkqueue.engine.children")

_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


@dataclass(frozen=True)
class Snapshot:
    """One listing: the child names, the cache version it was stored under, the parent's czxid (changes
    when the node was deleted and recreated, which restarts the sequence counter) and cversion (the next
    sequence number: a listing with cversion > n includes every change up to the create of sequence n)."""

    children: tuple[str, ...]
    version: int
    czxid: int
    cversion: int = 0
    at: float = 0.0  # time.monotonic() when the listing arrived


class ChildrenCache:
    """Watched child list of ``path`` on ``client``."""

    def __init__(
        self,
        client: KazooClient,
        path: str,
        *,
        on_state: Callable[[str], None] | None = None,
        name: str | None = None,
        lazy: bool = False,
        acl: Any = None,
    ) -> None:
        """``lazy``: a watch event only marks the cache stale; the relisting happens when somebody waits for
        a change (``wait_for_change``) or right away if somebody already waits. A consumer working through a
        big snapshot then relists once per pass instead of once per change it causes."""
        self._client = client
        self._acl = acl  # for recreating a deleted queue node with the queue's ACL
        self._lazy = lazy
        self._stale = False
        self._waiters = 0
        self._path = path
        self._on_state = on_state
        self._cond = threading.Condition()
        self._snapshot = Snapshot((), 0, 0, 0)
        self._closed = False
        self._started = False
        self._in_flight = False
        self._dirty = False
        self._failures = 0
        self._last_kazoo_state: str | None = None
        self._dispatcher = Dispatcher(name or f"zkqueue-cache-{path}")
        # counters (read by the queue's stats)
        self.listings = 0
        self.recreated = 0
        self.list_errors = 0
        self.resyncs = 0

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._dispatcher.start()
        self._last_kazoo_state = self._client.state
        self._client.add_listener(self._state_listener)
        self.request_sync()

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        try:
            self._client.remove_listener(self._state_listener)
        except Exception:  # pragma: no cover - kazoo's remove_listener does not raise in practice
            log.debug("remove_listener failed", exc_info=True)
        # kazoo has no way to remove a one-shot watch; the watch callback checks _closed.
        self._dispatcher.stop()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def path(self) -> str:
        return self._path

    # -- reading -------------------------------------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def version(self) -> int:
        return self._snapshot.version

    @property
    def stale(self) -> bool:
        """True when a change was signalled that no listing reflects yet (lazy caches only)."""
        return self._stale

    def changed_since(self, version: int) -> bool:
        """True if a listing newer than ``version`` exists or a change is known to be pending."""
        return self._snapshot.version != version or self._stale

    def wait_for_change(self, version: int, timeout: float | None = None) -> Snapshot:
        """Block until the cache version differs from ``version``, the timeout passes or the cache closes;
        return the current snapshot either way."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._waiters += 1
            sync = self._stale
        try:
            if sync:
                self.request_sync()
            with self._cond:
                while self._snapshot.version == version and not self._closed:
                    if deadline is None:
                        self._cond.wait()
                    else:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self._cond.wait(remaining)
                return self._snapshot
        finally:
            with self._cond:
                self._waiters -= 1

    def wait_until(self, predicate: Callable[[Snapshot], bool], timeout: float | None = None) -> bool:
        """Block until ``predicate(snapshot)`` is true (checked on every new version); False on timeout/close."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not predicate(self._snapshot):
                if self._closed:
                    return False
                if deadline is None:
                    self._cond.wait()
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
            return True

    # -- syncing -------------------------------------------------------------------------------------
    def request_sync(self) -> None:
        """Ask for a fresh listing (coalesced with one already in flight). Never blocks."""
        with self._cond:
            if self._closed:
                return
            if self._in_flight:
                self._dirty = True
                return
            self._in_flight = True
            self._dirty = False
            self._stale = False
        self._issue()

    def _issue(self) -> None:
        # The reply is applied on kazoo's connection thread as it is read: a claim sent after this listing then
        # finds it applied when its own reply comes (ZooKeeper answers one session in order).
        protocol.send_get_children(self._client, self._path, self._on_result, watch=self._watch)

    def _on_result(self, value: Any, exc: BaseException | None) -> None:  # kazoo's connection thread: never block
        if exc is not None:
            self._done(None, exc)
            return
        children, stat = value
        self._done((children, stat.czxid, stat.cversion), None)

    def _done(self, value: tuple[list[str], int, int] | None, exc: BaseException | None) -> None:
        reissue = False
        with self._cond:
            self._in_flight = False
            if self._closed:
                self._cond.notify_all()
                return
            if value is not None:
                children, czxid, cversion = value
                self._failures = 0
                self.listings += 1
                self._snapshot = Snapshot(tuple(children), self._snapshot.version + 1, czxid, cversion,
                                          time.monotonic())
                self._cond.notify_all()
                reissue = self._dirty
            else:
                self.list_errors += 1
        if value is not None:
            if reissue:
                self.request_sync()
            return
        assert exc is not None
        if isinstance(exc, NoNodeError):
            log.warning("queue node %s is gone; recreating it so consumers do not stall", self._path)
            self._dispatcher.submit(self._recreate)
        elif isinstance(exc, (ConnectionLoss, SessionExpiredError)):
            # The state listener re-syncs on CONNECTED; if that already happened, _dirty is set.
            log.debug("listing %s interrupted by %r; waiting for reconnect", self._path, exc)
            with self._cond:
                again = self._dirty
            if again:
                self.request_sync()
        elif isinstance(exc, ConnectionClosedError):
            log.debug("client closed; cache of %s idle", self._path)
        else:
            log.warning("listing %s failed: %r; retrying", self._path, exc)
            self._dispatcher.submit(self._retry_later)

    def _retry_later(self) -> None:
        self._failures += 1
        delay = _RETRY_DELAYS[min(self._failures, len(_RETRY_DELAYS)) - 1]
        with self._cond:
            if self._closed:
                return
            self._cond.wait(delay)
        self.request_sync()

    def _recreate(self) -> None:
        if self._closed:
            return
        try:
            self._client.ensure_path(self._path, acl=self._acl)
            self.recreated += 1
        except Exception as exc:
            log.warning("could not recreate %s: %r", self._path, exc)
            self._retry_later()
            return
        self.request_sync()

    def _watch(self, event: WatchedEvent) -> None:  # kazoo's watch thread
        if self._closed:
            return
        if event.type == EventType.NONE:
            return  # connection-state event; the state listener re-syncs on CONNECTED
        if self._lazy:
            with self._cond:
                if self._waiters == 0 and not self._in_flight:
                    self._stale = True
                    return
        self.request_sync()

    def _state_listener(self, state: str) -> None:  # kazoo's connection thread: never block
        previous = self._last_kazoo_state
        self._last_kazoo_state = state
        if state == KazooState.CONNECTED and previous in (KazooState.SUSPENDED, KazooState.LOST):
            self.resyncs += 1
            self._dispatcher.submit(self.request_sync)
        if self._on_state is not None:
            self._on_state(state)
