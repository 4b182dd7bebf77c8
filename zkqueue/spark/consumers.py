"""Draining queues with Spark: lock-safe consumers inside executor tasks, and a bounded read into a DataFrame.

:func:`consume` runs ``parallelism`` Spark tasks. Each task is one lock-safe zkqueue consumer (the engine of
:class:`zkqueue.DistributedQueue` with a lock path) that calls ``handler(item)`` for every item *inside the
task*, then acks that item (deletes it, its lock and its fence in one multi). Side effects happen per item in
the executor. Items never travel back to the driver, because Spark discards the output of a failed task attempt
but not the deletes it already made.

Crash safety: an item is taken by creating EPHEMERAL lock nodes owned by the worker process's ZooKeeper
session. If the worker dies (``os._exit``, OOM kill, a lost executor), nobody deletes them; ZooKeeper removes
them when the session expires (``session_timeout`` seconds later), and the item is delivered again, to another
task or to Spark's retry of the failed one. An item whose handler was running at the crash is therefore handled
at least twice: handlers must be idempotent (at-least-once). Counts come only from task attempts that
succeeded, so after a crash the summed ``processed`` can be lower than the number of handler calls. A lost
connection does not fail a task while its session survives (kazoo reconnects; locks stay held); a session that
ends while the task waits on ZooKeeper fails it with :class:`~zkqueue.spark.clients.SessionLostError`.

:func:`read_queue` is a bounded read on the driver: it takes up to ``max_items`` items, removes exactly those
from ZooKeeper once their data is in driver memory, and returns them as a DataFrame built from that local data.
"""

from __future__ import annotations

import logging
import operator
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from zkqueue.engine.api import CONNECTION_ERRORS, DEFAULT_BATCH_SIZE, blobs
from zkqueue.formats import framing, large_ref, naming
from zkqueue.engine import api
from zkqueue.engine.leases import item_claim_ops, item_finish_ops
from zkqueue.errors import ConfigurationError
from zkqueue.spark.multis import commit_groups
from zkqueue.spark.clients import (
    DEFAULT_SESSION_TIMEOUT,
    SessionLostError,
    ZkSettings,
    call_with_reconnect,
    get_client,
    parse_auth,
    session_id,
)

log = logging.getLogger("zkqueue.spark.consumers")

KINDS = ("plain", "priority", "delay", "id")
ERROR_MODES = ("requeue", "delete")


@dataclass(frozen=True)
class ConsumerSpec:
    """Picklable settings of one executor consumer task."""

    zk: ZkSettings
    path: str
    lock_path: str
    kind: str = "plain"
    serializer: str = "bytes"
    until: str | float = "empty"
    batch_size: int = DEFAULT_BATCH_SIZE
    on_error: str = "requeue"
    poll_interval: float = 0.05  # an emptiness check is one stat call


@dataclass
class TaskCounts:
    """What one successful task attempt did."""

    partition: int
    attempt: int
    pid: int
    processed: int = 0
    failed: int = 0
    requeued: int = 0
    deleted_on_error: int = 0
    seconds: float = 0.0


@dataclass
class ConsumeResult:
    """Totals of :func:`consume` over the task attempts that succeeded (``tasks`` lists them)."""

    processed: int = 0
    failed: int = 0
    requeued: int = 0
    deleted_on_error: int = 0
    tasks: list[TaskCounts] = field(default_factory=list)


def _queue_class(kind: str) -> type:
    if kind == "plain":
        from zkqueue.engine.api import DistributedQueue  # noqa: PLC0415

        return DistributedQueue
    if kind == "priority":
        from zkqueue.recipes.priority import DistributedPriorityQueue  # noqa: PLC0415

        return DistributedPriorityQueue
    if kind == "delay":
        from zkqueue.recipes.delay import DistributedDelayQueue  # noqa: PLC0415

        return DistributedDelayQueue
    from zkqueue.recipes.ids import DistributedIdQueue  # noqa: PLC0415

    return DistributedIdQueue


def _serializer(name: str) -> Any:
    from zkqueue.spark.options import load_serializer  # noqa: PLC0415

    return load_serializer(name)


#: A queue with more children than this is not empty, whatever they are (no listing needed to know it).
_LIST_BELOW = 1000


def _queue_empty(client: Any, path: str) -> bool:
    """True when the queue holds no item node (held ones count). One stat call; the children are listed only when
    a few are left, to tell items from foreign nodes."""
    stat = client.exists(path)
    if stat is None or stat.numChildren == 0:
        return True
    if stat.numChildren > _LIST_BELOW:
        return False
    try:
        return not any(naming.is_item_name(n) for n in client.get_children(path))
    except NoNodeError:
        return True


def run_consumer_task(spec: ConsumerSpec, handler: Callable[[Any], Any], partition: int) -> TaskCounts:
    """Body of one executor task (also callable directly, e.g. from ``foreachPartition``)."""
    from zkqueue.consumer import ErrorMode  # noqa: PLC0415

    attempt = 0
    try:
        from pyspark import TaskContext  # noqa: PLC0415

        ctx = TaskContext.get()
        if ctx is not None:
            attempt = ctx.attemptNumber()
    except ImportError:  # pragma: no cover - used without pyspark
        pass
    started = time.monotonic()
    client = get_client(spec.zk)
    session = session_id(client)
    what = f"consumer task {partition} on {spec.path}"

    def started_queue() -> Any:  # a queue whose start() failed is closed for good: each attempt builds its own
        queue = _queue_class(spec.kind)(
            client,
            handler,
            _serializer(spec.serializer),
            spec.path,
            lock_path=spec.lock_path,
            batch_size=spec.batch_size,
            put_in_background=False,
            final_flush_time=0.0,
        )
        if spec.on_error == "delete":
            queue.set_error_mode(ErrorMode.DELETE)
        queue.start()
        return queue

    # The engine rides out connection loss by itself; this task's own requests are retried on the same session.
    queue = call_with_reconnect(client, started_queue, what, session=session)
    stop = threading.Event()
    try:
        if spec.until == "empty":
            while not call_with_reconnect(client, lambda: _queue_empty(client, spec.path), what, session=session):
                stop.wait(spec.poll_interval)
        else:
            stop.wait(float(spec.until))
    finally:
        queue.close()
    stats = queue.stats()
    counts = TaskCounts(
        partition=partition,
        attempt=attempt,
        pid=os.getpid(),
        processed=stats.consumed,
        failed=stats.consumer_errors,
        requeued=stats.requeued,
        deleted_on_error=stats.deleted_on_error,
        seconds=time.monotonic() - started,
    )
    log.info("consumer task %d (attempt %d, pid %d) on %s: %s", partition, attempt, counts.pid, spec.path, counts)
    return counts


def _settings(hosts: str, session_timeout: float, auth: str | None, acl: str, chroot: str | None) -> ZkSettings:
    return ZkSettings(hosts=hosts, session_timeout=session_timeout, auth=parse_auth(auth), acl=acl, chroot=chroot)


def consume(
    spark: Any,
    hosts: str,
    path: str,
    handler: Callable[[Any], Any],
    *,
    parallelism: int = 2,
    lock_path: str | None = None,
    until: str | float = "empty",
    kind: str = "plain",
    serializer: str = "bytes",
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_error: str = "requeue",
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    auth: str | None = None,
    acl: str = "open",
    chroot: str | None = None,
) -> ConsumeResult:
    """Run ``parallelism`` Spark tasks, each a lock-safe consumer calling ``handler(item)``; sum their counts.

    ``until="empty"``: each task stops once the queue holds no item nodes (items locked by a crashed task count
    until its session expires, so they are picked up before the job ends). ``until=<seconds>``: each task
    consumes for that long. ``lock_path`` defaults to ``<path>-locks``. ``handler`` must be picklable
    (cloudpickle) and importable on the executors. A handler exception is counted as ``failed`` and the item
    is requeued (``on_error="requeue"``, Curator's default) or deleted (``"delete"``); with ``until="empty"``
    an item whose handler always fails keeps the job running unless ``on_error="delete"``. On a delay queue,
    ``until="empty"`` also waits for items that are not due yet.

    ``serializer``: ``bytes`` (default), ``str``, ``json`` or ``module:Class``. ``session_timeout`` (seconds)
    bounds how long a crashed task's items stay locked.
    """
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism <= 0:
        raise ConfigurationError(f"parallelism must be a positive int, got {parallelism!r}")
    if not callable(handler):
        raise ConfigurationError(f"handler must be callable, got {handler!r}")
    if kind not in KINDS:
        raise ConfigurationError(f"kind must be one of {KINDS}, got {kind!r}")
    if on_error not in ERROR_MODES:
        raise ConfigurationError(f"on_error must be one of {ERROR_MODES}, got {on_error!r}")
    if until != "empty":
        if isinstance(until, bool) or not isinstance(until, (int, float)) or until <= 0:
            raise ConfigurationError(f"until must be 'empty' or a positive number of seconds, got {until!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ConfigurationError(f"batch_size must be a positive int, got {batch_size!r}")
    naming.validate_queue_path(path)
    lock_path = naming.validate_path(lock_path or path + "-locks")
    _serializer(serializer)  # fail on the driver, not in every task
    spec = ConsumerSpec(
        zk=_settings(hosts, session_timeout, auth, acl, chroot),
        path=path,
        lock_path=lock_path,
        kind=kind,
        serializer=serializer,
        until=until,
        batch_size=batch_size,
        on_error=on_error,
    )

    def task(index: int, _rows: Any) -> list[dict[str, Any]]:
        return [asdict(run_consumer_task(spec, handler, index))]

    sc = spark.sparkContext
    sc.setJobDescription(f"zkqueue consume {path} x{parallelism}")
    try:
        rows = sc.parallelize(range(parallelism), parallelism).mapPartitionsWithIndex(task).collect()
    finally:
        sc.setJobDescription(None)
    result = ConsumeResult()
    for row in rows:
        counts = TaskCounts(**row)
        result.tasks.append(counts)
        result.processed += counts.processed
        result.failed += counts.failed
        result.requeued += counts.requeued
        result.deleted_on_error += counts.deleted_on_error
    return result


# ----------------------------------------------------------------------------------------------- read_queue
#: The sequence digits at the end of a queue item's name: as strings of 10 digits, they sort as numbers do.
_SEQUENCE_DIGITS = operator.itemgetter(slice(-naming.SEQUENCE_DIGITS, None))


def ordered_names(names: list[str], kind: str, *, due_only: bool = True) -> list[str]:
    """The item names of a ``kind`` queue in consumption order; for delay queues only those due now, unless
    ``due_only`` is False."""
    items = [n for n in names if naming.is_item_name(n)]
    if kind == "priority":
        return sorted(items, key=naming.priority_sort_key)
    if kind == "delay":
        ordered = sorted(items, key=naming.delay_sort_key)
        if not due_only:
            return ordered
        now = time.time_ns() // 1_000_000
        return [n for n in ordered if naming.parse_delay_epoch(n) <= now]
    if kind == "id":
        return sorted(items, key=naming.id_sort_key)
    if all(naming.sequence_of(n) is not None for n in items):  # Curator's names: the last 10 digits order them
        return sorted(items, key=_SEQUENCE_DIGITS)
    return sorted(items, key=lambda n: (naming.sequence_of(n) or -1, n))


def key_of(name: str, kind: str) -> Any:
    """The key a ``kind`` queue's item name carries: priority, due time (epoch ms) or id; None for plain."""
    if kind == "priority":
        return naming.parse_priority(name)
    if kind == "delay":
        return naming.parse_delay_epoch(name)
    if kind == "id":
        return naming.parse_id(name)[0]
    return None


_KEY_FIELD = {"priority": ("priority", "int"), "delay": ("delay_until", "bigint"), "id": ("id", "string")}


def read_queue(
    spark: Any,
    hosts: str,
    path: str,
    *,
    max_items: int | None = None,
    lock_path: str | None = None,
    kind: str = "plain",
    serializer: str = "bytes",
    chunk: int = 1000,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    auth: str | None = None,
    acl: str = "open",
    chroot: str | None = None,
) -> Any:
    """Take up to ``max_items`` items (all, if None) off the queue and return them as a DataFrame.

    Columns: ``name`` (item node), ``idx`` (position in a multi-item node), ``value`` (binary for
    ``serializer="bytes"``, string for ``"str"`` and ``"json"``, the JSON text), plus ``priority`` / ``delay_until``
    / ``id`` for those kinds. Rows follow queue order. Whole nodes are taken, and a node is left in the queue if
    its items would go past ``max_items``. The exception is the first node, which is always taken.

    Semantics: the items are read into driver memory first and then removed. Removal deletes each node with its
    version, so an item another consumer took in between is left out. The DataFrame holds exactly the removed
    items, built from local data, so it does not re-read ZooKeeper. With ``lock_path`` the items are locked
    first (the zkqueue/Curator lock protocol, ephemeral on the driver's session), so lock-safe consumers
    working on the same queue skip them. If the driver dies before the removal, the locks expire and the
    items stay queued. Once this function returns, the items exist only in the DataFrame. Persist it or use it
    before the driver exits. Corrupt nodes are skipped, logged and left in place for a queue consumer to
    quarantine.

    A large item (a reference node, see ``QueueBuilder.large_items``) has its blob read (one item at a time) and
    checked, and its chunks and blob are deleted in the same multi as its node. A reference whose blob is
    missing or does not match is skipped and logged like a corrupt node.
    """
    import pyarrow as pa  # noqa: PLC0415

    if kind not in KINDS:
        raise ConfigurationError(f"kind must be one of {KINDS}, got {kind!r}")
    if max_items is not None and (isinstance(max_items, bool) or not isinstance(max_items, int) or max_items <= 0):
        raise ConfigurationError(f"max_items must be None or a positive int, got {max_items!r}")
    if serializer not in ("bytes", "str", "json"):
        raise ConfigurationError(f"read_queue serializer must be bytes, str or json, got {serializer!r}")
    naming.validate_queue_path(path)
    if lock_path is not None:
        naming.validate_path(lock_path)
    client = get_client(_settings(hosts, session_timeout, auth, acl, chroot))
    try:
        names = ordered_names(client.get_children(path), kind)
    except NoNodeError:
        names = []
    token = os.urandom(8).hex()
    out_names: list[str] = []
    out_idx: list[int] = []
    out_values: list[Any] = []
    out_keys: list[Any] = []
    taken = 0
    for start in range(0, len(names), chunk):
        if max_items is not None and taken >= max_items:
            break
        batch = names[start : start + chunk]
        locks: dict[str, tuple[str, str]] = {}
        if lock_path is not None:
            batch, locks = _lock(client, path, lock_path, batch, token)
        reads = api.multi_read(client, [naming.join(path, n) for n in batch])
        keep: list[tuple[str, int, list[bytes], list[Any]]] = []
        release: list[str] = []
        for name, res in zip(batch, reads):
            if isinstance(res, BaseException):
                release.append(name)
                continue
            data, stat = res
            extra: list[Any] = []
            try:
                if large_ref.is_ref(data):
                    if max_items is not None and taken >= max_items:
                        release.append(name)  # full already: its blob need not be read
                        continue
                    ref = large_ref.decode_ref(data)
                    item_path = naming.join(path, name)
                    frame = call_with_reconnect(client, lambda: blobs.read_frame(client, ref, item_path=item_path),
                                                f"read_queue: reading the blob of {item_path}")
                    payloads = framing.decode_items(frame)
                    extra = blobs.removal_ops(ref)
                else:
                    payloads = framing.decode_items(data)
            except (*CONNECTION_ERRORS, SessionLostError):
                raise  # not a corrupt node (the locks, if any, are ephemeral on this session)
            except Exception as exc:  # noqa: BLE001 - CorruptItemError (BlobMissingError included) and friends
                log.warning("read_queue: skipping corrupt node %s/%s: %s", path, name, exc)
                release.append(name)
                continue
            if max_items is not None and taken and taken + len(payloads) > max_items:
                release.append(name)
                continue
            keep.append((name, stat.version, payloads, extra))
            taken += len(payloads)
        removed = _remove(client, path, keep, locks)
        release.extend(name for name, _v, _p, _e in keep if name not in removed)
        _release(client, [locks[n] for n in release if n in locks])
        for name, _version, payloads, _extra in keep:
            if name not in removed:
                continue
            key = key_of(name, kind)
            for i, payload in enumerate(payloads):
                out_names.append(name)
                out_idx.append(i)
                out_values.append(payload if serializer == "bytes" else payload.decode("utf-8", "replace"))
                out_keys.append(key)
    columns = {
        "name": pa.array(out_names, pa.string()),
        "idx": pa.array(out_idx, pa.int32()),
        "value": pa.array(out_values, pa.binary() if serializer == "bytes" else pa.string()),
    }
    if kind in _KEY_FIELD:
        field_name, type_name = _KEY_FIELD[kind]
        arrow_type = {"int": pa.int32(), "bigint": pa.int64(), "string": pa.string()}[type_name]
        columns[field_name] = pa.array(out_keys, arrow_type)
    table = pa.table(columns)
    log.info("read_queue took %d item(s) from %s", table.num_rows, path)
    return spark.createDataFrame(table)


def _lock(
    client: Any, path: str, lock_path: str, names: list[str], token: str
) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """Take item leases on ``names`` as the engine does (ephemeral lock + fence child, refused while a consumer
    holds the item's block); return the names held and their (lock, fence) nodes."""
    plans = []
    for name in names:
        ops, lock, fence, lock_index = item_claim_ops(path, lock_path, name, token, curator_names=False,
                                                      lock_data=b"read_queue")
        plans.append((name, ops, lock, fence, lock_index))
    held: list[str] = []
    locks: dict[str, tuple[str, str]] = {}
    missing_parent = False
    for (name, _ops, lock, fence, lock_index), res in zip(plans, commit_groups(client, [p[1] for p in plans])):
        if res is True:
            held.append(name)
            locks[name] = (lock, fence)
        elif isinstance(res.failure, NoNodeError) and res.failed_index is not None and res.failed_index <= lock_index:
            missing_parent = True
        elif not isinstance(res.failure, (NodeExistsError, NoNodeError)):
            log.warning("read_queue: could not lock %s/%s: %r", path, name, res.failure)
    if missing_parent and not held:
        client.ensure_path(lock_path)
        return _lock(client, path, lock_path, names, token)
    return held, locks


def _remove(client: Any, path: str, keep: list[tuple[str, int, list[bytes], list[Any]]],
            locks: dict[str, tuple[str, str]]) -> set[str]:
    """Delete the kept nodes (each with its version; a large item with its chunks and blob, ``extra``), each
    group atomically with the release of its lock; return the names removed."""
    groups = []
    for name, version, _payloads, extra in keep:
        ops: list[Any] = [api.DeleteOp(naming.join(path, name), version), *extra]
        if name in locks:
            lock, fence = locks[name]
            ops = item_finish_ops(fence, lock, ops)
        groups.append(ops)
    removed: set[str] = set()
    for (name, _v, _p, _e), res in zip(keep, commit_groups(client, groups)):
        if res is True:
            removed.add(name)
        else:
            log.info("read_queue: %s/%s was taken by someone else (%r)", path, name, res.failure)
    return removed


def _release(client: Any, held: list[tuple[str, str]]) -> None:
    groups = [[api.DeleteOp(fence), api.DeleteOp(lock)] for lock, fence in held]
    for res in commit_groups(client, groups):
        if res is not True and not isinstance(res.failure, NoNodeError):
            log.warning("read_queue: releasing a lock failed: %r (it expires with the session)", res.failure)
