"""QueueConfig: every option of a :class:`~zkqueue.engine.queue.DistributedQueue`, frozen and validated in one place.

:class:`~zkqueue.builder.QueueBuilder` keeps one (each setter makes a new one, so a bad value fails at the setter)
and passes it to the queue; a queue built with keywords makes one from them. Either way the options are checked
once, here, in :meth:`QueueConfig.__post_init__`, and their defaults are named here once.

Not options, and so not here: the client, the consumer, the serializer and the queue path (what a queue *is*;
:func:`check_parts` and :meth:`QueueConfig.paths` check them), and the error mode, which a running queue changes
with ``set_error_mode`` (Curator's ``setErrorMode``). The executor and the claim hook are objects, but they are set
once at build time like any option and the claim hook's check depends on the lock path, so they are here too.
"""

from __future__ import annotations

import logging
from concurrent.futures import Executor
from dataclasses import dataclass, fields, replace
from typing import Any

from kazoo.security import ACL

from zkqueue.engine.blobs import LargeItems
from zkqueue.engine.parking import check_park_after
from zkqueue.engine.put_markers import check_producer_id
from zkqueue.engine.seams import ClaimHook
from zkqueue.errors import ConfigurationError, LockPathConflictError
from zkqueue.formats import naming
from zkqueue.formats.buckets import Layout

log = logging.getLogger("zkqueue.engine.config")

#: Default most item nodes per engine step.
DEFAULT_BATCH_SIZE = 300
#: Default of about how many bytes of item data one engine step reads.
DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024
#: Default seconds close() waits for background puts.
DEFAULT_FINAL_FLUSH_TIME = 5.0
#: Default seconds a put whose reply was lost waits to learn its outcome.
DEFAULT_PUT_OUTCOME_WAIT = 60.0
#: Default lock node names (see ``naming.LOCK_STYLES``).
DEFAULT_LOCK_NAMES = "qualified"
#: The smallest ``jute_max_buffer`` a queue accepts (exclusive).
MIN_JUTE_MAX_BUFFER = 1024

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_FINAL_FLUSH_TIME",
    "DEFAULT_LOCK_NAMES",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_PUT_OUTCOME_WAIT",
    "QueueConfig",
    "QueuePaths",
    "check_parts",
    "check_queue_path",
]


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_parts(client: Any, serializer: Any) -> None:
    """The client and serializer every queue needs (ConfigurationError otherwise)."""
    if client is None:
        raise ConfigurationError("client is required")
    if serializer is None or not callable(getattr(serializer, "serialize", None)) or not callable(
        getattr(serializer, "deserialize", None)
    ):
        raise ConfigurationError(f"serializer needs serialize() and deserialize(): {serializer!r}")


def check_queue_path(queue_path: str) -> str:
    """``queue_path`` if a queue may live there (InvalidPathError or ConfigurationError otherwise)."""
    naming.validate_queue_path(queue_path)
    if queue_path == "/":
        raise ConfigurationError("the queue path cannot be the root '/'")
    return queue_path


@dataclass(frozen=True)
class QueuePaths:
    """Where one queue's nodes live, from its queue path and :class:`QueueConfig` (see :meth:`QueueConfig.paths`)."""

    queue: str
    lock: str | None
    quarantine: str
    #: Receipts of no-lock takes (see zkqueue.engine.nolock); a sibling of the queue, like the quarantine.
    receipt: str


@dataclass(frozen=True)
class QueueConfig:
    """The options of one queue, validated when made (ConfigurationError, or InvalidPathError for a malformed path).

    ``QueueConfig(batch_size=50, lock_path="/q-locks")``; change one with :func:`dataclasses.replace` (validated
    again). ``acl`` and ``auth`` are kept as tuples; ``max_items`` makes puts foreground (as Curator)."""

    #: Lock-safe consumption: an item is deleted only after the consumer returned. None: no-lock (Curator's default).
    lock_path: str | None = None
    #: Bounded queue: puts block while the queue holds this many items or more. Forces foreground puts.
    max_items: int | None = None
    put_in_background: bool = True
    #: Runs consume_message (never shut down by close()).
    executor: Executor | None = None
    #: Seconds close() waits for background puts; 0 disables the flush.
    final_flush_time: float = DEFAULT_FINAL_FLUSH_TIME
    #: Where corrupt nodes are moved; None: ``<queue path>-quarantine``.
    quarantine_path: str | None = None
    #: Most item nodes per engine step.
    batch_size: int = DEFAULT_BATCH_SIZE
    #: The server's packet limit in bytes; None: ``protocol.jute_max_buffer()``.
    jute_max_buffer: int | None = None
    #: ``"qualified"`` or ``"curator"`` lock node names.
    lock_names: str = DEFAULT_LOCK_NAMES
    #: With ``refresh_on_watch``: items of one listing taken before a newer listing is looked at (priority queues).
    min_items_before_refresh: int | None = None
    refresh_on_watch: bool = False
    #: About how many bytes of item data one engine step reads.
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    #: ACL of every node the queue creates; None: the client's ``default_acl``.
    acl: tuple[ACL, ...] | None = None
    #: (scheme, credential) pairs added to the client at start(), e.g. ("digest", "user:password").
    auth: tuple[tuple[str, str], ...] = ()
    #: Ops added to each lock-safe claim (a seam for the layers above); needs a lock path.
    claim_hook: ClaimHook | None = None
    large_items: LargeItems | None = None
    #: Name of this producer for exactly-once puts; None: a random name per queue instance.
    producer_id: str | None = None
    #: Seconds a put whose reply was lost waits for its outcome before PutOutcomeUnknown.
    put_outcome_wait: float = DEFAULT_PUT_OUTCOME_WAIT
    #: Items due more than this many seconds ahead are parked in time buckets; None: never.
    park_after: float | None = None
    #: Whether this instance takes part in the election of the mover of parked items.
    run_mover: bool = True
    schedule_layout: Layout | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise in place, once
        if self.lock_path is not None:
            naming.validate_path(self.lock_path)
        if self.quarantine_path is not None:
            naming.validate_path(self.quarantine_path)
        if self.max_items is not None and not _positive_int(self.max_items):
            raise ConfigurationError(f"max_items must be a positive int, got {self.max_items!r}")
        if self.max_items is not None and self.put_in_background:
            log.info("max_items is set: puts run in the foreground (as Curator)")
            set_(self, "put_in_background", False)
        set_(self, "put_in_background", bool(self.put_in_background))
        if self.executor is not None and not callable(getattr(self.executor, "submit", None)):
            raise ConfigurationError(f"executor must be a concurrent.futures.Executor, got {self.executor!r}")
        if not _seconds(self.final_flush_time) or self.final_flush_time < 0:
            raise ConfigurationError(f"final_flush_time must be >= 0 seconds, got {self.final_flush_time!r}")
        set_(self, "final_flush_time", float(self.final_flush_time))
        if not _positive_int(self.batch_size):
            raise ConfigurationError(f"batch_size must be a positive int, got {self.batch_size!r}")
        if self.jute_max_buffer is not None and (
            not _positive_int(self.jute_max_buffer) or self.jute_max_buffer <= MIN_JUTE_MAX_BUFFER
        ):
            raise ConfigurationError(f"jute_max_buffer must be an int > 1024, got {self.jute_max_buffer!r}")
        if self.lock_names not in naming.LOCK_STYLES:
            raise ConfigurationError(f"lock_names must be 'qualified' or 'curator', got {self.lock_names!r}")
        if self.min_items_before_refresh is not None and (
            isinstance(self.min_items_before_refresh, bool) or not isinstance(self.min_items_before_refresh, int)
            or self.min_items_before_refresh < 0
        ):
            raise ConfigurationError(
                f"min_items_before_refresh must be an int >= 0, got {self.min_items_before_refresh!r}")
        set_(self, "refresh_on_watch", bool(self.refresh_on_watch))
        if not _positive_int(self.max_batch_bytes):
            raise ConfigurationError(f"max_batch_bytes must be a positive int, got {self.max_batch_bytes!r}")
        self._check_acl_and_auth()
        if self.claim_hook is not None and not callable(getattr(self.claim_hook, "claim_ops", None)):
            raise ConfigurationError(f"claim_hook needs claim_ops(node): {self.claim_hook!r}")
        if self.claim_hook is not None and self.lock_path is None:
            raise ConfigurationError("a claim hook needs a lock path (lock-safe mode)")
        if self.large_items is not None and not isinstance(self.large_items, LargeItems):
            raise ConfigurationError(f"large_items must be a LargeItems, got {self.large_items!r}")
        if self.producer_id is not None:
            check_producer_id(self.producer_id)
        if not _seconds(self.put_outcome_wait) or self.put_outcome_wait <= 0:
            raise ConfigurationError(f"put_outcome_wait must be > 0 seconds, got {self.put_outcome_wait!r}")
        set_(self, "put_outcome_wait", float(self.put_outcome_wait))
        set_(self, "park_after", check_park_after(self.park_after))
        set_(self, "run_mover", bool(self.run_mover))
        if self.schedule_layout is not None and not isinstance(self.schedule_layout, Layout):
            raise ConfigurationError(
                f"schedule_layout must be a zkqueue.formats.buckets.Layout, got {self.schedule_layout!r}")

    def _check_acl_and_auth(self) -> None:
        if self.acl is not None:
            entries = tuple(self.acl)
            if not entries:
                raise ConfigurationError("acl must hold at least one entry (or be None for the client's default)")
            if not all(isinstance(a, ACL) for a in entries):
                raise ConfigurationError(
                    "acl must be a non-empty list of kazoo ACL entries (zkqueue.transport.security.queue_acl)")
            object.__setattr__(self, "acl", entries)
        pairs = []
        for pair in self.auth:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(isinstance(p, str) for p in pair):
                raise ConfigurationError(f"auth must hold (scheme, credential) pairs of str, got {pair!r}")
            if pair[0] == "digest":
                from zkqueue.transport.security import parse_auth  # noqa: PLC0415

                parse_auth(pair[1])  # a clear error for a malformed "user:password"
            pairs.append((pair[0], pair[1]))
        object.__setattr__(self, "auth", tuple(pairs))

    # ------------------------------------------------------------------------------------------ uses
    @classmethod
    def of(cls, config: QueueConfig | None = None, **options: Any) -> QueueConfig:
        """``config`` with the ``options`` that differ from their defaults applied (a recipe's own settings on a
        builder's config), or a config of ``options`` alone when ``config`` is None."""
        if config is None:
            return cls(**options)
        if not isinstance(config, QueueConfig):
            raise ConfigurationError(f"config must be a QueueConfig, got {config!r}")
        changed = {name: value for name, value in options.items() if not _is_default(name, value)}
        return replace(config, **changed) if changed else config

    def paths(self, queue_path: str) -> QueuePaths:
        """Where a queue at ``queue_path`` with these options keeps its nodes; refuses a lock or quarantine path that
        is the queue path, lies inside it, or (a lock path) contains it."""
        queue = check_queue_path(queue_path)
        lock = self.lock_path
        if lock is not None:
            if lock == queue or lock.startswith(queue + "/"):
                raise LockPathConflictError(f"lock path {lock!r} must not be the queue path or inside it ({queue!r})")
            if queue.startswith(lock + "/"):
                raise LockPathConflictError(f"lock path {lock!r} must not contain the queue path {queue!r}")
        quarantine = self.quarantine_path or naming.validate_path(queue + "-quarantine")
        if quarantine == queue or quarantine.startswith(queue + "/"):
            raise ConfigurationError(f"quarantine path {quarantine!r} must not be the queue path or inside it")
        return QueuePaths(queue, lock, quarantine, queue + "-receipts")


_DEFAULTS = {f.name: f.default for f in fields(QueueConfig)}


def _is_default(name: str, value: Any) -> bool:
    if name not in _DEFAULTS:
        raise ConfigurationError(f"unknown queue option {name!r}")
    default = _DEFAULTS[name]
    if value is default:
        return True
    if value is None or default is None:
        return False
    if isinstance(value, list):  # acl and auth are kept as tuples
        value = tuple(value)
    try:
        return bool(value == default)
    except Exception:  # noqa: BLE001 - an object that cannot compare is not the default
        return False
