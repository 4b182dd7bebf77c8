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

from kazoo.exceptions import NoNodeError

from zkqueue._extras import require
from zkqueue.engine.api import CONNECTION_ERRORS, DEFAULT_BATCH_SIZE, HeldNode, blobs
from zkqueue.formats import framing, large_ref, naming
from zkqueue.engine import api
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


class _Rows:
    """The DataFrame's columns, filled node by node from local data."""

    def __init__(self, kind: str, serializer: str) -> None:
        self.kind = kind
        self.binary = serializer == "bytes"
        self.names: list[str] = []
        self.idx: list[int] = []
        self.values: list[Any] = []
        self.keys: list[Any] = []

    def add(self, name: str, payloads: list[bytes]) -> None:
        key = key_of(name, self.kind)
        for i, payload in enumerate(payloads):
            self.names.append(name)
            self.idx.append(i)
            self.values.append(payload if self.binary else payload.decode("utf-8", "replace"))
            self.keys.append(key)

    def table(self) -> Any:
        pa = require("pyarrow", what="zkqueue.spark")

        columns = {
            "name": pa.array(self.names, pa.string()),
            "idx": pa.array(self.idx, pa.int32()),
            "value": pa.array(self.values, pa.binary() if self.binary else pa.string()),
        }
        if self.kind in _KEY_FIELD:
            field_name, type_name = _KEY_FIELD[self.kind]
            arrow_type = {"int": pa.int32(), "bigint": pa.int64(), "string": pa.string()}[type_name]
            columns[field_name] = pa.array(self.keys, arrow_type)
        return pa.table(columns)


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
    its items would go past ``max_items``. The exception is the first node, which is always taken. The nodes
    looked at are (at most as many as) those due when the call starts, ``chunk`` nodes a round.

    Semantics: the items are read into driver memory first and then removed. The DataFrame holds exactly the
    removed items, built from local data, so it does not re-read ZooKeeper. Once this function returns, the items
    exist only in the DataFrame. Persist it or use it before the driver exits.

    Without ``lock_path`` (at most once, no leases): removal deletes each node with its version, so an item another
    consumer took in between is left out. Corrupt nodes are skipped, logged and left in place for a queue consumer
    to quarantine.

    With ``lock_path`` the items are claimed through the engine's pull seam (a lock-safe queue without a consumer,
    see :meth:`DistributedQueue.claim_nodes <zkqueue.DistributedQueue.claim_nodes>`): each node under an item lease
    of the zkqueue/Curator lock protocol, fenced by the driver session's fence, so lock-safe consumers working on
    the same queue skip it and it skips theirs. A node is then acked: deleted with its lease in one fenced multi;
    an ack the session's fence refuses (the session expired) removes nothing. Nodes claimed but not taken (past
    ``max_items``) are given back untouched when the read ends. If the driver dies before the ack, the leases
    expire with its session and the items stay queued. Corrupt nodes are quarantined by the claim (moved to the
    queue's quarantine path, ``<path>-quarantine``, as a lock-safe consumer does) and logged.

    A large item (a reference node, see ``QueueBuilder.large_items``) has its blob read (one item at a time) and
    checked, and its chunks and blob are deleted in the same multi as its node. A reference whose blob is
    missing or does not match is corrupt: skipped and logged (quarantined, with ``lock_path``).
    """
    if kind not in KINDS:
        raise ConfigurationError(f"kind must be one of {KINDS}, got {kind!r}")
    if max_items is not None and (isinstance(max_items, bool) or not isinstance(max_items, int) or max_items <= 0):
        raise ConfigurationError(f"max_items must be None or a positive int, got {max_items!r}")
    if serializer not in ("bytes", "str", "json"):
        raise ConfigurationError(f"read_queue serializer must be bytes, str or json, got {serializer!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk <= 0:
        raise ConfigurationError(f"chunk must be a positive int, got {chunk!r}")
    naming.validate_queue_path(path)
    if lock_path is not None:
        naming.validate_path(lock_path)
    client = get_client(_settings(hosts, session_timeout, auth, acl, chroot))
    try:
        names = ordered_names(client.get_children(path), kind)
    except NoNodeError:
        names = []
    rows = _Rows(kind, serializer)
    if lock_path is None:
        _read_and_delete(client, path, names, max_items, chunk, rows)
    elif names:
        _read_leased(client, path, lock_path, len(names), kind, max_items, chunk, session_timeout, rows)
    table = rows.table()
    log.info("read_queue took %d item(s) from %s", table.num_rows, path)
    return spark.createDataFrame(table)


def _read_and_delete(client: Any, path: str, names: list[str], max_items: int | None, chunk: int,
                     rows: _Rows) -> None:
    """read_queue without a lock path: read ``names`` a chunk at a time, then delete each node kept at the version
    read (a large item with its chunks and blob), many nodes per multi."""
    taken = 0
    for start in range(0, len(names), chunk):
        if max_items is not None and taken >= max_items:
            break
        batch = names[start : start + chunk]
        reads = api.multi_read(client, [naming.join(path, n) for n in batch])
        keep: list[tuple[str, int, list[bytes], list[Any]]] = []
        for name, res in zip(batch, reads):
            if isinstance(res, BaseException):
                continue
            data, stat = res
            extra: list[Any] = []
            try:
                if large_ref.is_ref(data):
                    if max_items is not None and taken >= max_items:
                        continue  # full already: its blob need not be read
                    ref = large_ref.decode_ref(data)
                    item_path = naming.join(path, name)
                    frame = call_with_reconnect(client, lambda: blobs.read_frame(client, ref, item_path=item_path),
                                                f"read_queue: reading the blob of {item_path}")
                    payloads = framing.decode_items(frame)
                    extra = blobs.removal_ops(ref)
                else:
                    payloads = framing.decode_items(data)
            except (*CONNECTION_ERRORS, SessionLostError):
                raise  # not a corrupt node
            except Exception as exc:  # noqa: BLE001 - CorruptItemError (BlobMissingError included) and friends
                log.warning("read_queue: skipping corrupt node %s/%s: %s", path, name, exc)
                continue
            if max_items is not None and taken and taken + len(payloads) > max_items:
                continue
            keep.append((name, stat.version, payloads, extra))
            taken += len(payloads)
        groups = [[api.DeleteOp(naming.join(path, name), version), *extra] for name, version, _p, extra in keep]
        for (name, _version, payloads, _extra), res in zip(keep, commit_groups(client, groups)):
            if res is True:
                rows.add(name, payloads)
            else:
                log.info("read_queue: %s/%s was taken by someone else (%r)", path, name, res.failure)


#: Seconds each claim waits for the pull seam's first listing of the queue (claims after it do not wait).
_FIRST_LISTING_WAIT = 0.1


def _read_leased(client: Any, path: str, lock_path: str, listed: int, kind: str, max_items: int | None,
                 chunk: int, session_timeout: float, rows: _Rows) -> None:
    """read_queue with a lock path, through the engine's pull seam: claim up to ``listed`` nodes (how many were due
    when the read began: a queue that keeps filling does not keep the read going), ``chunk`` at a time, in queue
    order; ack the nodes taken at once, give back the rest when the read ends."""

    def started_queue() -> Any:  # a queue whose start() failed is closed for good: each attempt builds its own
        queue = _queue_class(kind)(client, None, _serializer("bytes"), path, lock_path=lock_path,
                                   put_in_background=False, final_flush_time=0.0)
        queue.start()
        return queue

    queue = call_with_reconnect(client, started_queue, f"read_queue: starting the pull claims on {path}")
    removed: list[HeldNode] = []  # nodes acked
    unsettled: list[HeldNode] = []  # acks whose reply was lost: settled (retried) by the time the queue is closed
    held_back: list[HeldNode] = []  # claimed, not taken (past max_items): given back at the end, not claimed again
    taken = examined = 0
    first_listing_by = time.monotonic() + session_timeout
    try:
        while examined < listed and (max_items is None or taken < max_items):
            claimed = _claim(client, queue, min(chunk, listed - examined), first_listing_by)
            if not claimed:
                break  # nothing due is left that no other consumer holds
            examined += len(claimed)
            take: list[HeldNode] = []
            for outcome in _in_queue_order(claimed, kind):
                if max_items is not None and taken and taken + len(outcome.items) > max_items:
                    held_back.append(outcome)
                    continue
                take.append(outcome)
                taken += len(outcome.items)
            if take:
                done, unsure = _ack(client, path, queue, take)
                removed.extend(done)
                unsettled.extend(unsure)
    finally:
        try:
            if held_back:
                queue.release_nodes(held_back)
        finally:
            stats = queue.stats()
            queue.close()
    removed.extend(o for o in unsettled if o.settled == "done")  # the close retried them
    unknown = [o for o in unsettled if o.settled is None]
    if unknown:  # still unknown after the close: gone now means acked
        left = _present(client, path, unknown)
        removed.extend(o for o in unknown if o.name not in left)
    if stats.corrupt_quarantined:
        log.warning("read_queue: %d corrupt node(s) of %s moved to %s", stats.corrupt_quarantined, path,
                    queue.quarantine_path)
    for outcome in _in_queue_order(removed, kind):
        rows.add(outcome.name, outcome.items)


def _claim(client: Any, queue: Any, n: int, first_listing_by: float) -> list[HeldNode]:
    """Up to ``n`` due nodes claimed now, without waiting; [] once none is claimable. The pull seam lists the queue
    in the background, so claims wait (briefly, again and again, until ``first_listing_by``) for its first listing:
    a claim that found nothing before it proves nothing."""
    while True:
        listed = queue.stats().listings > 0
        claimed = call_with_reconnect(client, lambda: queue.claim_nodes(n, 0.0 if listed else _FIRST_LISTING_WAIT),
                                      f"read_queue: claiming on {queue.queue_path}")
        if claimed or listed:
            return claimed
        if time.monotonic() >= first_listing_by:
            log.warning("read_queue: %s was not listed in time; nothing claimed", queue.queue_path)
            return []


def _in_queue_order(outcomes: list[HeldNode], kind: str) -> list[HeldNode]:
    position = {name: i for i, name in enumerate(ordered_names([o.name for o in outcomes], kind, due_only=False))}
    return sorted(outcomes, key=lambda o: position[o.name])


def _ack(client: Any, path: str, queue: Any, outcomes: list[HeldNode]) -> tuple[list[HeldNode], list[HeldNode]]:
    """Ack claimed nodes (each deleted with its lease in one fenced multi, many per multi): (the nodes removed, the
    nodes whose ack is not settled yet: the engine retries them, at the latest at close). Each outcome's
    ``settled`` says how its ack ended."""
    queue.complete_nodes(outcomes)  # no completion set: an ack
    for o in outcomes:
        if o.settled not in (None, "done"):
            log.info("read_queue: %s/%s could not be removed (%s); it stays queued", path, o.name, o.settled)
    return [o for o in outcomes if o.settled == "done"], [o for o in outcomes if o.settled is None]


def _present(client: Any, path: str, outcomes: list[HeldNode]) -> set[str]:
    """The names of ``outcomes`` whose nodes still exist (one multiRead of their child lists, not their data)."""
    reads = call_with_reconnect(
        client, lambda: api.multi_read(client, [naming.join(path, o.name) for o in outcomes], children=True),
        f"read_queue: checking acks on {path}")
    return {o.name for o, res in zip(outcomes, reads) if not isinstance(res, NoNodeError)}
