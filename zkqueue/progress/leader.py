"""Which of several processes running the same consumer is the active one: kazoo's ``Lock`` recipe (the
election kazoo's ``Election`` wraps) at ``<progress path>/leader``. The winner's lock node is its fence: every
progress write checks it in the same multi, so a process whose session expired cannot write."""

from __future__ import annotations

import logging
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import CancelledError, KazooException
from kazoo.recipe.lock import Lock

log = logging.getLogger("zkqueue.progress.leader")


class Leadership:
    """``campaign()`` blocks until this process is elected (and returns its fence path) or ``cancel()``."""

    def __init__(self, client: KazooClient, path: str, identifier: str) -> None:
        self.client = client
        self.path = path
        self.identifier = identifier
        self._lock: Lock | None = None
        self._guard = threading.Lock()
        self._cancelled = False

    def campaign(self) -> str | None:
        """Wait to be elected; the path of our election node, or None when cancelled."""
        with self._guard:
            if self._cancelled:
                return None
            lock = self._lock = Lock(self.client, self.path, self.identifier)
        try:
            if not lock.acquire(blocking=True):
                return None
        except CancelledError:
            return None
        return f"{lock.path}/{lock.node}"

    def resign(self) -> None:
        """Leave the election (delete our node if it is still there)."""
        with self._guard:
            lock, self._lock = self._lock, None
        if lock is None:
            return
        try:
            lock.cancel()
            if lock.is_acquired:
                lock.release()
        except KazooException as exc:  # the session is gone: so is the node
            log.debug("resigning from %s: %r", self.path, exc)

    def cancel(self) -> None:
        """Stop a campaign in progress, and every later one."""
        with self._guard:
            self._cancelled = True
            lock = self._lock
        if lock is not None:
            lock.cancel()

    def leader(self) -> str | None:
        """The identifier of the active process, if any."""
        try:
            contenders = Lock(self.client, self.path).contenders()
        except KazooException:
            return None
        return contenders[0] if contenders else None
