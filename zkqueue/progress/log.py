"""``JobLog``: an append-only log of jobs on sequential znodes, indexed by a growing integer.

Layout under the log's path (its data: ``{"format": "zkqueue-joblog", "version": 1, "bucket_size": B}``)::

    b-0000000000          bucket 0 (data: how many entries it holds, as ASCII digits)
      e-0000000000        index 0: the log's origin, created with the log, never a job
      e-0000000001        index 1: the first job
      ...
    b-0000000001          bucket 1: indexes B .. 2B-1
    consumers/<digest>    one node per registered consumer (its progress path), for prune()

Index ``i`` lives in bucket ``i // B`` as the entry whose ZooKeeper sequence number is ``i % B``. Why buckets:
a sequence number is the parent's child version, a signed 32-bit counter printed with 10 digits. It wraps after
2**31 - 1 children, and every *delete* of a child bumps it too, so pruning one flat parent would leave holes in
the indexes. A bucket never loses entries while it is written (prune deletes whole, full buckets), so its
sequence numbers are dense: 0 .. B-1. Indexes go up to 10**10 * B.

Every append is one multi that also sets the bucket's count under its data version (compare-and-set). So
appenders never overfill a bucket, an append that fills one creates the next in the same multi, ``append_many``
is atomic across a bucket boundary, and the sequence numbers ZooKeeper returns are checked against the count.
Concurrent appenders retry on a version conflict. Nothing here lists a bucket: ``head()`` reads the newest
bucket's count, ``at(i)`` reads one node, so a log of millions of entries costs the same as a small one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from zkqueue.engine.api import MAX_MULTI_BYTES, MAX_MULTI_OPS, MULTI_SLACK, OP_OVERHEAD
from zkqueue.errors import (
    AppendConflictError,
    AppendUncertainError,
    ConfigurationError,
    InvalidPathError,
    ItemTooLargeError,
    JobNotFoundError,
    JobPrunedError,
    LogFormatError,
)
from zkqueue.engine.api import wait_connected
from zkqueue.progress.txn import CAS_TRIES, UNKNOWN_OUTCOME, MultiFailed, Op, cas_wait, commit

log = logging.getLogger("zkqueue.progress.log")

FORMAT = "zkqueue-joblog"
DEFAULT_BUCKET_SIZE = 10_000
MAX_BUCKET_SIZE = 1_000_000
BUCKET_PREFIX = "b-"
ENTRY_PREFIX = "e-"
CONSUMERS = "consumers"
_PRUNE_CHUNK = 500


def _bucket_name(b: int) -> str:
    return f"{BUCKET_PREFIX}{b:010d}"


def _count_data(count: int, token: str) -> bytes:
    return f"{count}:{token}".encode()


def _parse_count(data: bytes, path: str) -> tuple[int, str]:
    try:
        text = data.decode("ascii")
        count, _, token = text.partition(":")
        value = int(count)
    except (UnicodeDecodeError, ValueError):
        raise LogFormatError(f"bucket {path} holds {data[:40]!r}, not an entry count") from None
    if value < 0:
        raise LogFormatError(f"bucket {path} holds a negative count {value}")
    return value, token


class _Bucket:
    """What this process last saw of the newest bucket: number, entry count, data version."""

    __slots__ = ("number", "count", "version")

    def __init__(self, number: int, count: int, version: int) -> None:
        self.number = number
        self.count = count
        self.version = version


#: An append try whose reply was lost: (its token, the newest bucket as it left it, its indexes).
_LostTry = tuple[str, _Bucket, list[int]]


class JobLog:
    """An append-only job log at ``path``: ``append`` / ``append_many`` return indexes, ``at(i)`` reads a job,
    ``head()`` is the highest index. It is a jobs source of :class:`~zkqueue.progress.ProgressConsumer`
    (``head()``, ``at_index(i)``) that wakes its consumers on appends (:meth:`watch`).

    ``bucket_size`` (default 10,000) is fixed when the log is created and stored with it; giving another one for
    an existing log raises :class:`~zkqueue.errors.LogFormatError`. The node is created on first use.
    """

    def __init__(self, client: KazooClient, path: str, *, bucket_size: int | None = None) -> None:
        if not isinstance(path, str) or not path.startswith("/") or path.endswith("/") or "//" in path:
            raise InvalidPathError(f"a job log path must be absolute without a trailing slash, got {path!r}")
        if bucket_size is not None and (isinstance(bucket_size, bool) or not isinstance(bucket_size, int)
                                        or not 2 <= bucket_size <= MAX_BUCKET_SIZE):
            raise ConfigurationError(f"bucket_size must be an int in 2..{MAX_BUCKET_SIZE}, got {bucket_size!r}")
        self.client = client
        self.path = path
        self._wanted_size = bucket_size
        self._size: int | None = None
        self._newest: _Bucket | None = None
        self._watch: Any = None

    # ------------------------------------------------------------------------------------------------ layout
    @property
    def bucket_size(self) -> int:
        """Entries per bucket (read from the log, which is created if missing)."""
        return self._ensure()

    def bucket_path(self, b: int) -> str:
        """The znode of bucket ``b`` (its data: the bucket's entry count and the token of its last append)."""
        return f"{self.path}/{_bucket_name(b)}"

    def bucket_count(self, data: bytes, b: int) -> int:
        """The entry count in ``data``, as read from bucket ``b``'s node (:class:`LogFormatError` if it is not
        one)."""
        return _parse_count(data, self.bucket_path(b))[0]

    def newest_bucket_number(self) -> int:
        """The number of the newest bucket (from the cached one forward)."""
        return self._newest_bucket().number

    def entry_path(self, index: int) -> str:
        """The znode of index ``index``."""
        size = self._ensure()
        return f"{self.bucket_path(index // size)}/{ENTRY_PREFIX}{index % size:010d}"

    def _ensure(self) -> int:
        if self._size is not None:
            return self._size
        try:
            data, _ = self.client.get(self.path)
        except NoNodeError:
            data = self._create()
        self._size = self._read_meta(data)
        return self._size

    def _create(self) -> bytes:
        size = self._wanted_size or DEFAULT_BUCKET_SIZE
        meta = json.dumps({"format": FORMAT, "version": 1, "bucket_size": size}).encode()
        parent = self.path.rsplit("/", 1)[0]
        if parent:
            self.client.ensure_path(parent)
        try:
            commit(self.client, [("create", self.path, meta, False),
                                 ("create", self.bucket_path(0), _count_data(1, "origin"), False),
                                 ("create", f"{self.bucket_path(0)}/{ENTRY_PREFIX}", b"", True),
                                 ("create", f"{self.path}/{CONSUMERS}", b"", False)])
            log.info("created job log %s (bucket size %d)", self.path, size)
            return meta
        except MultiFailed as exc:
            if not isinstance(exc.error, NodeExistsError) or exc.index != 0:
                raise exc.error from None
        data, _ = self.client.get(self.path)  # someone else created it first
        return data

    def _read_meta(self, data: bytes) -> int:
        try:
            meta = json.loads(data)
            if meta.get("format") != FORMAT:
                raise ValueError("format")
            size = meta["bucket_size"]
            if isinstance(size, bool) or not isinstance(size, int) or not 2 <= size <= MAX_BUCKET_SIZE:
                raise ValueError("bucket_size")
        except (ValueError, TypeError, AttributeError, KeyError):
            raise LogFormatError(f"{self.path} is not a job log (its data is {data[:60]!r})") from None
        if self._wanted_size is not None and self._wanted_size != size:
            raise LogFormatError(f"job log {self.path} has bucket size {size}, not {self._wanted_size}")
        return size

    def buckets(self) -> list[int]:
        """The bucket numbers present, ascending (the only listing the log does: one name per bucket)."""
        self._ensure()
        out = []
        for name in self.client.get_children(self.path):
            if name.startswith(BUCKET_PREFIX):
                try:
                    out.append(int(name[len(BUCKET_PREFIX):]))
                except ValueError:
                    log.warning("ignoring node %s/%s: not a bucket name", self.path, name)
        return sorted(out)

    def _read_bucket(self, b: int) -> _Bucket:
        data, stat = self.client.get(self.bucket_path(b))
        count, _ = _parse_count(data, self.bucket_path(b))
        return _Bucket(b, count, stat.version)

    def _newest_bucket(self, refresh: bool = False) -> _Bucket:
        """The newest bucket, from the cached one forward (a bucket is only ever followed by the next)."""
        size = self._ensure()
        cur = self._newest
        if cur is None or refresh:
            try:
                cur = self._read_bucket(cur.number if cur is not None else 0)
            except NoNodeError:
                found = self.buckets()
                if not found:
                    raise LogFormatError(f"job log {self.path} has no buckets") from None
                cur = self._read_bucket(found[-1])
        while cur.count >= size:
            try:
                cur = self._read_bucket(cur.number + 1)
            except NoNodeError:
                break
        self._newest = cur
        return cur

    # ------------------------------------------------------------------------------------------------ reads
    def head(self) -> int:
        """The highest index with an entry (0, the origin, while the log holds no job)."""
        size = self._ensure()
        try:
            b = self._newest_bucket(refresh=True)
        except NoNodeError:  # the cached bucket was pruned
            self._newest = None
            b = self._newest_bucket(refresh=True)
        return b.number * size + b.count - 1

    def at(self, index: int) -> bytes:
        """The job at ``index``; :class:`JobNotFoundError` past the head (or at 0, the origin),
        :class:`JobPrunedError` if it was pruned."""
        self._check_index(index)
        try:
            data, _ = self.client.get(self.entry_path(index))
        except NoNodeError:
            raise self._missing(index) from None
        return data

    at_index = at

    def at_range(self, start: int, stop: int) -> list[bytes]:
        """The jobs at ``start .. stop-1`` read in one pipelined round, cut at the first missing one."""
        self._check_index(start)
        asyncs = [self.client.get_async(self.entry_path(i)) for i in range(start, stop)]
        out: list[bytes] = []
        for i, a in zip(range(start, stop), asyncs):
            try:
                data, _ = a.get()
            except NoNodeError:
                if not out:
                    raise self._missing(i) from None
                break
            out.append(data)
        return out

    def _check_index(self, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise JobNotFoundError(f"a job index is an int >= 1, got {index!r}")
        if index == 0:
            raise JobNotFoundError(f"index 0 of {self.path} is the log's origin, not a job")

    def _missing(self, index: int) -> JobNotFoundError:
        size = self._ensure()
        b = index // size
        try:
            data, _ = self.client.get(self.bucket_path(b))
            count, _ = _parse_count(data, self.bucket_path(b))
            if index % size < count:
                return JobPrunedError(f"job {index} of {self.path} was pruned")
        except NoNodeError:
            buckets = self.buckets()
            if buckets and buckets[0] > b:
                return JobPrunedError(f"job {index} of {self.path} was pruned (its bucket is gone)")
        return JobNotFoundError(f"no job at index {index} of {self.path} yet")

    # ------------------------------------------------------------------------------------------------ appends
    def append(self, data: bytes) -> int:
        """Append one job; its index."""
        return self.append_many([data])[0]

    def append_many(self, items: Sequence[bytes]) -> list[int]:
        """Append ``items`` in one multi (all or none, consecutive indexes); their indexes.

        Each try carries its own token in the bucket count it sets, so after a lost reply the append is found
        (or not) by a synced read, and never stored twice. :class:`~zkqueue.errors.AppendConflictError` when
        other appenders won every try (nothing written); :class:`~zkqueue.errors.AppendUncertainError` when a
        lost reply cannot be settled."""
        items = self.check_items(items)
        if not items:
            return []
        base = uuid.uuid4().hex[:12]
        lost: list[_LostTry] = []
        for attempt in range(1, CAS_TRIES + 1):
            token = f"{base}.{attempt}"
            ops, indexes, expect = self.plan_append(items, token)
            try:
                results = commit(self.client, ops)
            except MultiFailed as exc:
                if lost:  # the race we lost may be with our own earlier try, applied after all
                    stored = self._find_lost(lost)[0]
                    if stored is not None:
                        log.info("append to %s committed before its reply was lost", self.path)
                        return stored
                if not self.refresh_after_conflict(exc):
                    raise exc.error from None
                if attempt < CAS_TRIES:
                    cas_wait(attempt)
                continue
            except UNKNOWN_OUTCOME as exc:
                lost.append((token, expect, indexes))
                stored = self._stored_anyway(lost, exc)
                if stored is not None:
                    return stored
                continue
            self.verify_append(results, ops, indexes, expect)
            return indexes
        if lost:
            raise AppendUncertainError(f"append to {self.path}: a try lost its reply and the later ones kept "
                                       f"conflicting ({CAS_TRIES} tries)", lost[-1][2])
        raise AppendConflictError(f"append to {self.path} kept conflicting with other appenders "
                                  f"({CAS_TRIES} tries); nothing was written")

    def check_items(self, items: Sequence[bytes]) -> list[bytes]:
        """``items`` as a list of bytes that fits in one append multi (with room for a few ops of a hand-off);
        TypeError, :class:`~zkqueue.errors.ItemTooLargeError` or :class:`~zkqueue.errors.ConfigurationError`
        otherwise."""
        if isinstance(items, (bytes, bytearray, str)):
            raise TypeError("append_many takes a sequence of bytes items, not one item")
        out = []
        total = 0
        for item in items:
            if not isinstance(item, (bytes, bytearray)):
                raise TypeError(f"a job is bytes, got {type(item).__name__}")
            out.append(bytes(item))
            total += len(item) + len(self.path) + 40 + OP_OVERHEAD
        if total + MULTI_SLACK > MAX_MULTI_BYTES:
            raise ItemTooLargeError(total, MAX_MULTI_BYTES - MULTI_SLACK, what=f"append of {len(out)} jobs")
        if len(out) + 4 > MAX_MULTI_OPS:
            raise ConfigurationError(f"append_many takes at most {MAX_MULTI_OPS - 4} items per call")
        return out

    def plan_append(self, items: list[bytes], token: str) -> tuple[list[Op], list[int], _Bucket]:
        """The multi ops that append ``items`` after the cached newest bucket, their indexes, and the newest
        bucket as it will be (for :meth:`verify_append`). Used by hand-offs that add ops of their own."""
        size = self._ensure()
        cur = self._newest if self._newest is not None else self._newest_bucket()
        ops: list[Op] = []
        indexes: list[int] = []
        b, count, version = cur.number, cur.count, cur.version
        left = list(items)
        first = True
        while left:
            room = size - count
            take, left = left[:room], left[room:]
            new_count = count + len(take)
            if first:
                ops.append(("set", self.bucket_path(b), _count_data(new_count, token), version))
            else:
                ops.append(("create", self.bucket_path(b), _count_data(new_count, token), False))
            for j, item in enumerate(take):
                ops.append(("create", f"{self.bucket_path(b)}/{ENTRY_PREFIX}", item, True))
                indexes.append(b * size + count + j)
            if left:
                b, count, version, first = b + 1, 0, -1, False
            else:
                count = new_count
        expect = _Bucket(b, count, version + 1 if first else 0)
        return ops, indexes, expect

    def verify_append(self, results: list[Any], ops: list[Op], indexes: list[int], expect: _Bucket) -> None:
        """After a committed append: check the sequence numbers ZooKeeper gave, remember the new newest bucket."""
        size = self._ensure()
        k = 0
        for op, result in zip(ops, results):
            if op[0] == "create" and op[3]:
                seq = int(str(result).rsplit("-", 1)[1])
                if seq != indexes[k] % size:
                    raise LogFormatError(f"{result} got sequence {seq}, the log expected {indexes[k] % size}: "
                                         f"someone created or deleted nodes in {self.path} by hand")
                k += 1
        self._advance(expect)

    def _advance(self, expect: _Bucket) -> None:
        self._newest = expect

    def forget_newest(self) -> None:
        """Drop the cached newest bucket: the next append reads it again (after an append of unknown outcome)."""
        self._newest = None

    def refresh_after_conflict(self, exc: MultiFailed) -> bool:
        """Whether a failed multi holding :meth:`plan_append` ops lost a race with another appender (or a
        prune); if so the cached newest bucket is read again, for the next try."""
        if isinstance(exc.error, (BadVersionError, NodeExistsError, NoNodeError)) and exc.op[1].startswith(
                self.path + "/" + BUCKET_PREFIX) and exc.op[0] in ("set", "create"):
            try:
                self._newest_bucket(refresh=True)
            except NoNodeError:
                self._newest = None
            return True
        return False

    def _stored_anyway(self, lost: list[_LostTry], exc: BaseException) -> list[int] | None:
        """After a lost reply: the indexes of ours if a try of this append was applied, else None (send again)."""
        if not wait_connected(self.client, 30.0):
            raise exc
        stored, version = self._find_lost(lost)
        if stored is not None:
            log.info("append to %s committed before its reply was lost (%r)", self.path, exc)
            return stored
        _, expect, indexes = lost[-1]
        if version is not None and version > expect.version:
            raise AppendUncertainError(f"an append to {self.path} lost its reply and others followed",
                                       indexes) from exc
        self._newest = None
        return None

    def _find_lost(self, lost: list[_LostTry]) -> tuple[list[int] | None, int | None]:
        """Whether one of the tries in ``lost`` was applied: the bucket it last set still carries its token
        (any later append replaces it). Read after a ``sync``, so a server that lags behind the leader cannot
        answer "not stored" for an append that was. (Its indexes or None, the version of the last try's
        bucket or None if that bucket is missing.)"""
        seen: dict[int, tuple[str, int] | None] = {}
        for token, expect, indexes in lost:
            if expect.number not in seen:
                path = self.bucket_path(expect.number)
                try:
                    self.client.sync(path)
                    data, stat = self.client.get(path)
                    seen[expect.number] = (_parse_count(data, path)[1], stat.version)
                except NoNodeError:
                    seen[expect.number] = None
            got = seen[expect.number]
            if got is not None and got[0] == token:
                self._advance(expect)
                return indexes, got[1]
        last = seen[lost[-1][1].number]
        return None, None if last is None else last[1]

    # ------------------------------------------------------------------------------------------------ watch
    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` (on kazoo's event thread: keep it short) after appends; returns a function that
        stops the calls. One data watch on the newest bucket, moved on when a bucket fills."""
        from zkqueue.progress.watch import AppendWatch  # noqa: PLC0415

        if self._watch is None:
            self._watch = AppendWatch(self)
        return self._watch.add(callback)

    # ------------------------------------------------------------------------------------------------ consumers
    def _consumer_path(self, progress_path: str) -> str:
        digest = hashlib.sha256(progress_path.encode()).hexdigest()[:24]
        return f"{self.path}/{CONSUMERS}/{digest}"

    def register_consumer(self, progress_path: str, default_index: int) -> None:
        """Count the consumer whose progress is at ``progress_path`` in :meth:`prune` (idempotent)."""
        self._ensure()
        data = json.dumps({"progress_path": progress_path, "default_index": default_index}).encode()
        self.client.ensure_path(f"{self.path}/{CONSUMERS}")
        try:
            self.client.create(self._consumer_path(progress_path), data)
        except NodeExistsError:
            pass

    def unregister_consumer(self, progress_path: str) -> bool:
        """Stop counting that consumer in :meth:`prune`; whether it was registered."""
        try:
            self.client.delete(self._consumer_path(progress_path))
            return True
        except NoNodeError:
            return False

    def consumers(self) -> dict[str, int]:
        """Registered consumers: progress path -> its stored processed index (its default while none is)."""
        from zkqueue.progress.store import read_index  # noqa: PLC0415

        self._ensure()
        out: dict[str, int] = {}
        try:
            names = self.client.get_children(f"{self.path}/{CONSUMERS}")
        except NoNodeError:
            return out
        for name in names:
            try:
                data, _ = self.client.get(f"{self.path}/{CONSUMERS}/{name}")
                reg = json.loads(data)
                path, default = reg["progress_path"], int(reg["default_index"])
            except NoNodeError:
                continue
            except (ValueError, TypeError, KeyError):
                log.warning("skipping registration %s/%s/%s: unreadable", self.path, CONSUMERS, name)
                continue
            stored = read_index(self.client, path)
            out[path] = default if stored is None else stored[0]
        return out

    def prune(self) -> int:
        """Delete the entries below the lowest processed index of the registered consumers; how many.

        Whole buckets go, oldest first, once every index in them is processed by every registered consumer (so
        up to ``bucket_size - 1`` processed entries stay). Nothing is pruned while no consumer is registered.
        The newest bucket is never deleted."""
        size = self._ensure()
        consumers = self.consumers()
        if not consumers:
            log.info("prune %s: no registered consumers, nothing pruned", self.path)
            return 0
        low = min(consumers.values())
        deleted = 0
        buckets = self.buckets()
        for b in buckets[:-1]:
            if (b + 1) * size - 1 > low:
                break
            deleted += self._delete_bucket(b, size)
        if deleted:
            log.info("pruned %d entries of %s (below %d)", deleted, self.path, low)
        return deleted

    def _delete_bucket(self, b: int, size: int) -> int:
        path = self.bucket_path(b)
        deleted = 0
        for lo in range(0, size, _PRUNE_CHUNK):
            ops: list[Op] = [("delete", f"{path}/{ENTRY_PREFIX}{s:010d}", -1)
                             for s in range(lo, min(size, lo + _PRUNE_CHUNK))]
            try:
                commit(self.client, ops)
                deleted += len(ops)
            except MultiFailed as exc:
                if not isinstance(exc.error, NoNodeError):
                    raise exc.error from None
                for op in ops:  # part of it went before (an interrupted prune): one by one
                    try:
                        self.client.delete(op[1])
                        deleted += 1
                    except NoNodeError:
                        pass
        while True:
            try:
                self.client.delete(path)
                return deleted
            except NoNodeError:
                return deleted
            except NotEmptyError:  # strays a hand or an interrupted append left
                for name in self.client.get_children(path):
                    try:
                        self.client.delete(f"{path}/{name}")
                    except NoNodeError:
                        pass
