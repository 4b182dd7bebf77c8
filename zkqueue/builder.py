"""QueueBuilder: Curator's fluent builder for DistributedQueue (and, through hooks, the typed queues)."""

from __future__ import annotations

import logging
from concurrent.futures import Executor
from typing import Any, Generic, Sequence, TypeVar

from kazoo.client import KazooClient
from kazoo.security import ACL

from zkqueue.formats import naming
from zkqueue.errors import ConfigurationError
from zkqueue.engine.blobs import LargeItems
from zkqueue.engine.queue import DistributedQueue

log = logging.getLogger("zkqueue.builder")

T = TypeVar("T")


class QueueBuilder(Generic[T]):
    """Configure and build a queue::

        q = (QueueBuilder.builder(client, consumer, StrSerializer(), "/queues/jobs")
               .lock_path("/queues/jobs-locks")
               .build_queue())

    ``consumer`` may be a QueueConsumer, any callable(item), or None for a producer-only queue.
    """

    def __init__(self, client: KazooClient, consumer: Any, serializer: Any, queue_path: str) -> None:
        if client is None:
            raise ConfigurationError("client is required")
        if serializer is None:
            raise ConfigurationError("serializer is required")
        self._client = client
        self._consumer = consumer
        self._serializer = serializer
        self._queue_path = naming.validate_queue_path(queue_path)
        self._options: dict[str, Any] = {}

    @classmethod
    def builder(cls, client: KazooClient, consumer: Any, serializer: Any, queue_path: str) -> "QueueBuilder[T]":
        return cls(client, consumer, serializer, queue_path)

    # -- Curator options
    def lock_path(self, path: str) -> "QueueBuilder[T]":
        """Lock-safe consumption: an item is deleted only after the consumer returned."""
        self._options["lock_path"] = naming.validate_path(path)
        return self

    def max_items(self, n: int) -> "QueueBuilder[T]":
        """Bounded queue: put blocks while the queue holds ``n`` items or more. Forces foreground puts."""
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ConfigurationError(f"max_items must be a positive int, got {n!r}")
        self._options["max_items"] = n
        self._options["put_in_background"] = False
        return self

    def put_in_background(self, flag: bool) -> "QueueBuilder[T]":
        self._options["put_in_background"] = bool(flag)
        return self

    def executor(self, executor: Executor) -> "QueueBuilder[T]":
        """Run consume_message in this executor (it is not shut down by close())."""
        if executor is None or not callable(getattr(executor, "submit", None)):
            raise ConfigurationError(f"executor must be a concurrent.futures.Executor, got {executor!r}")
        self._options["executor"] = executor
        return self

    def final_flush_time(self, seconds: float) -> "QueueBuilder[T]":
        """Seconds close() waits for background puts; 0 disables the flush."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
            raise ConfigurationError(f"final_flush_time must be >= 0 seconds, got {seconds!r}")
        self._options["final_flush_time"] = float(seconds)
        return self

    # -- zkqueue extras
    def quarantine_path(self, path: str) -> "QueueBuilder[T]":
        """Where corrupt nodes are moved (default ``<queue path>-quarantine``)."""
        self._options["quarantine_path"] = naming.validate_path(path)
        return self

    def batch_size(self, n: int) -> "QueueBuilder[T]":
        """Most item nodes a consumer takes per engine step (default 300). A step is further capped to about
        ``max_batch_bytes`` of data and to about half a second of the consumer's measured work, so a slow
        consumer holds only a few items at a time."""
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ConfigurationError(f"batch_size must be a positive int, got {n!r}")
        self._options["batch_size"] = n
        return self

    def max_batch_bytes(self, n: int) -> "QueueBuilder[T]":
        """About how many bytes of item data one engine step reads (default 4 MiB): big items mean smaller
        steps, so memory stays bounded whatever batch_size says."""
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ConfigurationError(f"max_batch_bytes must be a positive int, got {n!r}")
        self._options["max_batch_bytes"] = n
        return self

    def jute_max_buffer(self, n: int) -> "QueueBuilder[T]":
        """The server's packet limit in bytes (default: protocol.jute_max_buffer())."""
        if isinstance(n, bool) or not isinstance(n, int) or n <= 1024:
            raise ConfigurationError(f"jute_max_buffer must be an int > 1024, got {n!r}")
        self._options["jute_max_buffer"] = n
        return self

    def lock_names(self, style: str) -> "QueueBuilder[T]":
        """``"qualified"`` (default): lock nodes named ``<item>@<hash of queue path>`` so queues sharing a lock
        path never collide. ``"curator"``: the item name, as Curator, so zkqueue and Curator consumers of the
        same queue and lock path exclude each other (give such a queue a lock path of its own)."""
        if style not in ("qualified", "curator"):
            raise ConfigurationError(f"lock_names must be 'qualified' or 'curator', got {style!r}")
        self._options["lock_names"] = style
        return self

    def acl(self, acl: Sequence[ACL]) -> "QueueBuilder[T]":
        """ACL of every node the queue creates: the queue, lock and quarantine nodes, items, locks and fences
        (see ``zkqueue.transport.security.queue_acl``). Default: the client's ``default_acl``."""
        entries = list(acl)
        if not entries or not all(isinstance(a, ACL) for a in entries):
            raise ConfigurationError("acl must be a non-empty list of kazoo ACL entries (zkqueue.transport.security.queue_acl)")
        self._options["acl"] = entries
        return self

    def auth(self, credential: str, scheme: str = "digest") -> "QueueBuilder[T]":
        """Credentials the queue adds to its client at start(): ``auth("user:password")`` for digest."""
        if scheme == "digest":
            from zkqueue.transport.security import parse_auth  # noqa: PLC0415

            parse_auth(credential)  # a clear error for a malformed "user:password"
        self._options["auth"] = [*self._options.get("auth", []), (scheme, credential)]
        return self

    def large_items(self, max_item_bytes: int = 64 * 2**20, compression: str = "zlib",
                    orphan_grace: float = 60.0) -> "QueueBuilder[T]":
        """Items larger than one znode (ZooKeeper's 1 MiB ``jute.maxbuffer``), up to ``max_item_bytes`` framed.

        An item that fits one node is stored exactly as before (Curator reads it). A larger one is compressed
        (``"zlib"``, skipped for data that does not compress; or ``"none"``), written in chunks under
        ``<queue>-blobs``, and made visible by one multi that creates a small reference item in a frame Curator
        refuses loudly. Consumers of every mode read it back, check its length and checksum, and delete it with
        its chunks in one multi. Blobs left by a producer that died, or whose reference was deleted by something
        else, are reclaimed after ``orphan_grace`` seconds by any running queue with this option set.
        Above ``max_item_bytes`` a put raises :class:`~zkqueue.errors.ItemTooLargeError` before sending anything.
        """
        self._options["large_items"] = LargeItems(max_item_bytes, compression, orphan_grace)
        return self

    def producer_id(self, producer_id: str) -> "QueueBuilder[T]":
        """Name this producer for exactly-once puts (default: a random name per queue instance).

        Every put multi also advances a marker node ``<queue>-producers/<producer id>.<lane>``, so a put whose
        reply was lost learns whether it committed and is never stored twice. A producer restarted with the same
        id can still answer a :class:`~zkqueue.errors.PutOutcomeUnknown` with
        :func:`zkqueue.engine.put_markers.put_committed`. Two running queue instances must not share an id."""
        from zkqueue.engine.put_markers import check_producer_id  # noqa: PLC0415

        self._options["producer_id"] = check_producer_id(producer_id)
        return self

    def put_outcome_wait(self, seconds: float) -> "QueueBuilder[T]":
        """How long a put whose reply was lost waits for ZooKeeper to learn its outcome (default 60 s) before
        raising :class:`~zkqueue.errors.PutOutcomeUnknown`."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
            raise ConfigurationError(f"put_outcome_wait must be > 0 seconds, got {seconds!r}")
        self._options["put_outcome_wait"] = float(seconds)
        return self

    def run_mover(self, flag: bool) -> "QueueBuilder[T]":
        """Whether this instance of a parking queue takes part in the election of the mover of parked items
        (default True). Short-lived producers may opt out; some started instance must take part."""
        self._options["run_mover"] = bool(flag)
        return self

    def schedule_layout(self, layout: Any) -> "QueueBuilder[T]":
        """The time scale of a parking queue's schedule (a :class:`zkqueue.formats.buckets.Layout`: bucket widths,
        how early buckets are moved). The first instance to start records it; later ones adopt the recorded one.
        The default suits schedules of minutes to months; tests use a small one."""
        from zkqueue.formats.buckets import Layout  # noqa: PLC0415

        if not isinstance(layout, Layout):
            raise ConfigurationError(f"schedule_layout must be a zkqueue.formats.buckets.Layout, got {layout!r}")
        self._options["schedule_layout"] = layout
        return self

    # -- build
    def build_queue(self) -> DistributedQueue[T]:
        return DistributedQueue(self._client, self._consumer, self._serializer, self._queue_path, **self._options)

    def _build(self, cls: type, **extra: Any) -> Any:
        """For recipe modules: build a DistributedQueue subclass with these options plus ``extra``."""
        options = dict(self._options)
        options.update(extra)
        return cls(self._client, self._consumer, self._serializer, self._queue_path, **options)

    # -- the queue family (recipe classes live in their own modules; imported here lazily)
    def build_priority_queue(self, min_items_before_refresh: int) -> Any:
        """A :class:`zkqueue.recipes.priority.DistributedPriorityQueue`: ``put(item, priority)``, lower first.

        ``min_items_before_refresh`` (>= 0): a higher-priority arrival overtakes after at most that many items.
        """
        from zkqueue.recipes.priority import DistributedPriorityQueue  # noqa: PLC0415 - avoids an import cycle

        return self._build(DistributedPriorityQueue, min_items_before_refresh=min_items_before_refresh)

    def build_delay_queue(self, requeue_backoff: float | None = None, park_after: float | None = 60.0) -> Any:
        """A :class:`zkqueue.recipes.delay.DistributedDelayQueue`: ``put(item, delay_until_epoch_ms)``.

        ``requeue_backoff`` (seconds): a failed item is requeued due no earlier than now + backoff; None keeps
        its original due time.

        ``park_after`` (seconds, default 60): an item due further ahead is parked in time buckets under
        ``<queue>-schedule/`` and moved into the queue node shortly before it is due by one mover elected among
        the queue's started instances (see :mod:`zkqueue.engine.parking`), so consumers list only what is due
        soon, however deep the schedule. ``None`` keeps Curator's flat layout (every item in the queue node).
        Some started zkqueue instance of the queue must be running for parked items to move, also when the
        consumers are Curator's.
        """
        from zkqueue.recipes.delay import DistributedDelayQueue  # noqa: PLC0415

        return self._build(DistributedDelayQueue, requeue_backoff=requeue_backoff, park_after=park_after)

    def build_id_queue(self) -> Any:
        """A :class:`zkqueue.recipes.ids.DistributedIdQueue`: ``put(item, id)``, ``remove(id)``, ``is_queued(id)``."""
        from zkqueue.recipes.ids import DistributedIdQueue  # noqa: PLC0415

        return self._build(DistributedIdQueue)
