"""The stored processed index of one consumer: a znode written with a version-checked ``set`` (compare-and-set),
fenced by the active consumer's election node in the same multi.

Layout under the progress path (its data: ``{"index": N, "by": "<host:pid:id>"}``)::

    leader/          kazoo Lock (election) contenders; the lowest one is the active consumer
    done/<index>     hand-off markers: jobs above the stored index already finished in a hand-off multi
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, ConnectionClosedError, ConnectionLoss, NodeExistsError, NoNodeError

from zkqueue.errors import ProgressFencedError, ProgressFormatError
from zkqueue.engine.api import wait_connected
from zkqueue.progress.txn import UNKNOWN_OUTCOME, MultiFailed, Op, commit

log = logging.getLogger("zkqueue.progress.store")

LEADER = "leader"
DONE = "done"


def encode(index: int, by: str) -> bytes:
    return json.dumps({"index": index, "by": by}).encode()


def decode(data: bytes, path: str) -> int:
    try:
        value = json.loads(data)["index"]
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError
    except (ValueError, TypeError, KeyError):
        raise ProgressFormatError(f"{path} holds {data[:60]!r}, not a stored processed index") from None
    return value


def read_index(client: KazooClient, path: str) -> tuple[int, int] | None:
    """(stored processed index, node version) at ``path``, or None when nothing is stored."""
    try:
        data, stat = client.get(path)
    except NoNodeError:
        return None
    if not data:  # created empty as the election's parent before anything was stored
        return None
    return decode(data, path), stat.version


def done_name(index: int) -> str:
    return f"{index:020d}" if index >= 0 else f"-{-index:019d}"


class ProgressStore:
    """Reads and writes one consumer's processed index. ``write`` only moves forward and only while
    ``fence`` (the writer's election node) exists: a consumer whose session expired cannot write."""

    def __init__(self, client: KazooClient, path: str, identifier: str) -> None:
        self.client = client
        self.path = path
        self.identifier = identifier
        self.index: int | None = None
        self.version = -1
        self.fence: str | None = None
        self.writes = 0

    def load(self, default_index: int) -> int:
        """Read the stored index (storing ``default_index`` first if there is none); the stored index."""
        while True:
            found = read_index(self.client, self.path)
            if found is not None:
                self.index, self.version = found
                return self.index
            data = encode(default_index, self.identifier)
            try:
                _, stat = self.client.get(self.path)
            except NoNodeError:
                parent = self.path.rsplit("/", 1)[0]
                if parent:
                    self.client.ensure_path(parent)
                try:
                    self.client.create(self.path, data)
                except NodeExistsError:
                    pass
                continue
            try:  # the node is there without an index (made empty as the election's parent)
                self.client.set(self.path, data, version=stat.version)
            except (BadVersionError, NoNodeError):
                pass

    def done_path(self, index: int) -> str:
        return f"{self.path}/{DONE}/{done_name(index)}"

    def done_above(self, index: int) -> set[int]:
        """Indexes above ``index`` with a hand-off marker (finished in a hand-off multi, not yet in the index)."""
        try:
            names = self.client.get_children(f"{self.path}/{DONE}")
        except NoNodeError:
            return set()
        out = set()
        for name in names:
            try:
                i = int(name)
            except ValueError:
                log.warning("ignoring %s/%s/%s: not a marker", self.path, DONE, name)
                continue
            if i > index:
                out.add(i)
        return out

    def fence_ops(self) -> list[Op]:
        """The op that makes a multi fail unless this store's writer is still the elected one."""
        if self.fence is None:
            raise ProgressFencedError(f"{self.path}: not the active consumer (no election node)")
        return [("check", self.fence, -1)]

    def write(self, index: int) -> None:
        """Store ``index`` (must be >= the stored one) with compare-and-set, fenced by the election node."""
        if self.index is None:
            raise ProgressFencedError(f"{self.path}: write before load")
        if index < self.index:
            raise ValueError(f"progress of {self.path} cannot move back from {self.index} to {index}")
        if index == self.index:
            return
        data = encode(index, self.identifier)
        ops = self.fence_ops() + [("set", self.path, data, self.version)]
        for _ in range(3):
            try:
                results = commit(self.client, ops)
            except MultiFailed as exc:
                if isinstance(exc.error, NoNodeError) and exc.index == 0:
                    raise ProgressFencedError(f"{self.path}: our election node {self.fence} is gone; "
                                              f"progress {index} not written") from None
                if isinstance(exc.error, BadVersionError):
                    raise ProgressFencedError(f"{self.path}: the stored progress changed under us "
                                              f"(version {self.version} expected)") from None
                raise exc.error from None
            except UNKNOWN_OUTCOME as exc:
                if isinstance(exc, ConnectionClosedError) or not wait_connected(self.client, 30.0):
                    raise  # a closed client never reconnects
                now = self._read_after_loss()
                if now[1].version == self.version + 1 and now[0] == data:
                    log.debug("progress write of %s landed before the connection dropped", self.path)
                    self._wrote(index, now[1].version)
                    return
                if now[1].version != self.version:
                    raise ProgressFencedError(f"{self.path}: the stored progress changed under us") from exc
                continue
            self._wrote(index, results[-1].version)
            return
        raise ProgressFencedError(f"{self.path}: progress {index} not written after 3 tries")

    def _read_after_loss(self) -> tuple[bytes, Any]:
        """The stored progress, read to learn whether a write whose reply was lost landed: a connection lost again
        meanwhile is waited out (up to three times), so a write that did land is not taken for a failure (the
        consumer would step down and run the jobs above the stored index again)."""
        for tries in range(3):
            try:
                return self.client.get(self.path)  # type: ignore[no-any-return]
            except ConnectionLoss:
                if tries == 2 or not wait_connected(self.client, 30.0):
                    raise
        raise AssertionError("unreachable")

    def _wrote(self, index: int, version: int) -> None:
        self.index = index
        self.version = version
        self.writes += 1

    def drop_markers(self, indexes: list[int]) -> None:
        """Delete hand-off markers the stored index now covers (best effort: a leftover is ignored)."""
        for i in indexes:
            self.client.delete_async(self.done_path(i))

    def describe(self) -> dict[str, Any]:
        return {"path": self.path, "index": self.index, "version": self.version, "writes": self.writes}
