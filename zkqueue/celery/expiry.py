"""Expiry of stored results: the sweep behind the backend's ``cleanup()`` (``result_expires``).

ZooKeeper 3.9 has TTL nodes only when the server enables them (``zookeeper.extendedTypesEnabled``), so the
backend does not rely on them (``supports_autoexpire = False``): Celery beat's daily ``celery.backend_cleanup``
task calls ``cleanup()``, which deletes every task result, saved group and chord counter whose node was last
written more than ``result_expires`` ago (the node's ``mtime``, the server's clock), and the blobs of large values
whose writer died before committing them. Each delete is version-checked against the node it looked at, so a
result written again meanwhile stays.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from kazoo.exceptions import NoNodeError

from zkqueue.celery.result_store import ResultStore
from zkqueue.engine.api import blobs, delete_op, run_multi
from zkqueue.errors import CorruptItemError
from zkqueue.formats import large_ref, naming

log = logging.getLogger("zkqueue.celery.expiry")

#: Nodes whose stats one pipelined batch asks for.
BATCH = 500


@dataclass
class SweepReport:
    """What one sweep deleted."""

    tasks: int = 0
    groups: int = 0
    chords: int = 0
    orphan_blobs: int = 0

    @property
    def total(self) -> int:
        return self.tasks + self.groups + self.chords + self.orphan_blobs


def sweep(store: ResultStore, older_than: float, *, now: float | None = None) -> SweepReport:
    """Delete results, groups and chord counters last written more than ``older_than`` seconds before ``now``
    (default: the local clock), and orphaned large-value blobs as old."""
    cutoff_ms = int(((time.time() if now is None else now) - older_than) * 1000)
    store.ensure()
    report = SweepReport()
    report.tasks = _sweep_results(store, store.tasks, cutoff_ms)
    report.groups = _sweep_results(store, store.groups, cutoff_ms)
    report.chords = _sweep_chords(store, cutoff_ms)
    report.orphan_blobs = _sweep_orphan_blobs(store, cutoff_ms)
    if report.total:
        log.info("expired %d task result(s), %d group(s), %d chord(s), %d orphan blob(s)", report.tasks,
                 report.groups, report.chords, report.orphan_blobs)
    return report


def _stale(store: ResultStore, parent: str, cutoff_ms: int) -> list[tuple[str, int]]:
    """``(path, version)`` of the children of ``parent`` last modified before ``cutoff_ms``."""
    try:
        names = store.retrying(lambda: store.client.get_children(parent), f"list {parent}")
    except NoNodeError:
        return []
    stale = []
    for start in range(0, len(names), BATCH):
        paths = [naming.join(parent, n) for n in names[start:start + BATCH]]
        pending = [store.client.exists_async(p) for p in paths]
        for path, reply in zip(paths, pending):
            stat = store.retrying(lambda r=reply, p=path: _stat(store, r, p), f"stat {path}")
            if stat is not None and stat.mtime < cutoff_ms:
                stale.append((path, stat.version))
    return stale


def _stat(store: ResultStore, reply, path: str):
    try:
        return reply.get()
    except Exception:  # noqa: BLE001 - a failed pipelined request: ask again synchronously
        return store.client.exists(path)


def _sweep_results(store: ResultStore, parent: str, cutoff_ms: int) -> int:
    deleted = 0
    for path, version in _stale(store, parent, cutoff_ms):
        current = store.read(path)
        if current is None or current.version != version:
            continue  # gone, or written again since
        ops = [delete_op(path, version), *store.large_removal_ops(current)]
        result = store.retrying(lambda o=ops: run_multi(store.client, o, limit=store.limit), f"expire {path}")
        deleted += bool(result.ok)
    return deleted


def _sweep_chords(store: ResultStore, cutoff_ms: int) -> int:
    deleted = 0
    for path, _version in _stale(store, store.chords, cutoff_ms):
        try:
            store.delete_tree(path)
            deleted += 1
        except NoNodeError:
            pass
    return deleted


def _sweep_orphan_blobs(store: ResultStore, cutoff_ms: int) -> int:
    """Blobs still ``writing`` with no live owner (their writer died before the commit multi) and old enough."""
    root = blobs.blob_root(store.large)
    deleted = 0
    for path, version in _stale(store, root, cutoff_ms):
        try:
            data, _ = store.retrying(lambda p=path: store.client.get(p), f"read {path}")
            state = large_ref.BlobState.decode(data)
            children = store.retrying(lambda p=path: store.client.get_children(p), f"list {path}")
        except NoNodeError:
            continue
        except CorruptItemError:
            log.warning("blob %s has a corrupt state record; left alone", path)
            continue
        if state.state != "writing" or large_ref.OWNER in children:
            continue
        ops = [*(delete_op(naming.join(path, c)) for c in children), delete_op(path, version)]
        result = store.retrying(lambda o=ops: run_multi(store.client, o, limit=store.limit), f"expire {path}")
        deleted += bool(result.ok)
    return deleted
