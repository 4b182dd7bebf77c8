"""The blob reaper: reclaims what large-item puts and consumers left behind, on a thread of every queue that has
``large_items`` set.

Two kinds of garbage (see :mod:`zkqueue.engine.blobs`):

- a blob still ``writing`` whose ``owner`` is gone: its writer died (or gave up) before the commit multi;
- a ``committed`` blob whose recorded reference node no longer exists: something deleted the reference without
  its chunks (a Curator consumer that failed on it, a purge, a delete by hand).

A blob is reclaimed only after it was seen in one of these states, at the same version, for ``orphan_grace``
seconds, and the reclaim is one multi led by a version check of the blob node: a commit, requeue or move that
touched the blob meanwhile makes it fail. Blobs that are ``moving`` (their reference's new name is not recorded
yet) or ``quarantined`` are kept. A pass lists only ``<queue>-blobs`` (as many children as large items in
flight) and reads the blob, owner and reference nodes in multiReads; it never lists the queue.
"""

from __future__ import annotations

import logging
import threading
import time
from kazoo.exceptions import NoNodeError

from zkqueue.engine.backoff import Backoff
from zkqueue.engine.blobs import LargeItems, blob_root
from zkqueue.engine.commit import CONNECTION_ERRORS, check_op, delete_op
from zkqueue.engine.context import QueueContext
from zkqueue.errors import CorruptItemError
from zkqueue.formats import large_ref, naming
from zkqueue.formats.large_ref import BlobState
from zkqueue.transport import protocol

log = logging.getLogger("zkqueue.engine.blob_reaper")

#: Longest wait between passes, whatever the grace period.
_MAX_INTERVAL = 30.0
#: Shortest wait between passes.
_MIN_INTERVAL = 0.2
#: Wait after a pass that failed (doubling up to the longest interval; a failure never loops hot).
_ERROR_BACKOFF = 1.0


class BlobReaper:
    """Finds and reclaims orphaned blobs of one queue; :meth:`start` runs it on thread ``zkqueue-blobs-<path>``."""

    def __init__(self, ctx: QueueContext, settings: LargeItems) -> None:
        self._ctx = ctx
        self._grace = float(settings.orphan_grace)
        self.root = blob_root(ctx.queue_path)
        self._seen: dict[str, tuple[int, float]] = {}  # blob -> (version seen reclaimable, since)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reclaimed = 0

    @property
    def interval(self) -> float:
        return min(_MAX_INTERVAL, max(_MIN_INTERVAL, self._grace / 2))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"zkqueue-blobs-{self._ctx.queue_path}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10.0)

    def _run(self) -> None:
        backoff = Backoff(initial=_ERROR_BACKOFF, maximum=_MAX_INTERVAL)
        wait = self.interval
        while not self._stop.wait(wait):
            try:
                if self._ctx.connection.connected.is_set():
                    self.reap()
                wait = self.interval
                backoff.succeeded()
            except Exception:
                self._ctx.counters.add("loop_errors")
                wait = backoff.failed()
                log.exception("blob reaper of %s (it continues in %.1fs)", self._ctx.queue_path, wait)

    # ------------------------------------------------------------------------------------------ one pass
    def reap(self, now: float | None = None) -> int:
        """One pass: note blobs that look orphaned, reclaim those that stayed so for the grace period; returns how
        many were reclaimed."""
        client = self._ctx.client
        now = time.monotonic() if now is None else now
        try:
            names = [n for n in client.get_children(self.root) if n.startswith("b-")]
        except NoNodeError:
            self._seen.clear()
            return 0
        paths = [naming.join(self.root, n) for n in names]
        heads = protocol.multi_read(client, paths, limit=self._ctx.jute_max_buffer) if paths else []
        writing: list[tuple[str, int]] = []
        committed: list[tuple[str, int, str]] = []
        for path, res in zip(paths, heads):
            if isinstance(res, BaseException):
                continue  # gone meanwhile (acked) or unreadable: nothing to do now
            data, stat = res
            try:
                state = BlobState.decode(data)
            except CorruptItemError as exc:
                log.warning("blob %s: %s (left alone)", path, exc)
                continue
            if state.state == "writing":
                writing.append((path, stat.version))
            elif state.state == "committed" and state.item:
                committed.append((path, stat.version, state.item))
        orphans: dict[str, int] = {}
        probes = [naming.join(p, large_ref.OWNER) for p, _v in writing] + [item for _p, _v, item in committed]
        found = protocol.multi_read(client, probes, limit=self._ctx.jute_max_buffer) if probes else []
        for (path, version), res in zip(writing + [(p, v) for p, v, _i in committed], found):
            if isinstance(res, NoNodeError):
                orphans[path] = version
        for path in list(self._seen):
            if orphans.get(path) != self._seen[path][0]:
                del self._seen[path]
        reclaimed = 0
        for path, version in orphans.items():
            since = self._seen.setdefault(path, (version, now))[1]
            if now - since >= self._grace and self._reclaim(path, version):
                self._seen.pop(path, None)
                reclaimed += 1
        return reclaimed

    def _reclaim(self, blob: str, version: int) -> bool:
        client = self._ctx.client
        try:
            children = client.get_children(blob)
        except NoNodeError:
            return False
        ops = [check_op(blob, version)] + [delete_op(naming.join(blob, c)) for c in sorted(children)]
        ops.append(delete_op(blob))
        try:
            result = protocol.run_multi(client, ops, limit=self._ctx.jute_max_buffer)
        except CONNECTION_ERRORS as exc:
            log.info("reclaiming blob %s lost its reply (%r); the next pass sees", blob, exc)
            return False
        if not result.ok:
            log.info("blob %s changed while being reclaimed (%r); left alone", blob, result.failure)
            return False
        self.reclaimed += 1
        self._ctx.counters.add("blobs_reclaimed")
        log.warning("reclaimed orphaned blob %s (%d node(s))", blob, len(children) + 1)
        return True
