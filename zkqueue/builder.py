"""QueueBuilder: Curator's fluent builder for DistributedQueue (and, through hooks, the typed queues).

The builder keeps a :class:`~zkqueue.engine.config.QueueConfig`; each setter replaces it with a new one, which
validates the option there and then (a bad value fails at its setter), and ``build_*`` passes it to the queue.
"""

from __future__ import annotations

import logging
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any, Generic, Sequence, TypeVar

from kazoo.client import KazooClient
from kazoo.security import ACL

from zkqueue.engine.blobs import DEFAULT_MAX_ITEM_BYTES, LargeItems
from zkqueue.engine.config import QueueConfig, check_parts, check_queue_path
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
        check_parts(client, serializer)
        self._client = client
        self._consumer = consumer
        self._serializer = serializer
        self._queue_path = check_queue_path(queue_path)
        self._config = QueueConfig()

    @property
    def config(self) -> QueueConfig:
        """The options set so far (what ``build_*`` passes to the queue)."""
        return self._config

    def _set(self, **options: Any) -> "QueueBuilder[T]":
        self._config = replace(self._config, **options)  # validated by QueueConfig
        return self

    @classmethod
    def builder(cls, client: KazooClient, consumer: Any, serializer: Any, queue_path: str) -> "QueueBuilder[T]":
        return cls(client, consumer, serializer, queue_path)

    # -- Curator options
    def lock_path(self, path: str) -> "QueueBuilder[T]":
        """Lock-safe consumption: an item is deleted only after the consumer returned."""
        return self._set(lock_path=path)

    def max_items(self, n: int) -> "QueueBuilder[T]":
        """Bounded queue: put blocks while the queue holds ``n`` items or more. Forces foreground puts."""
        return self._set(max_items=n, put_in_background=False)

    def put_in_background(self, flag: bool) -> "QueueBuilder[T]":
        return self._set(put_in_background=flag)

    def executor(self, executor: Executor) -> "QueueBuilder[T]":
        """Run consume_message in this executor (it is not shut down by close())."""
        return self._set(executor=executor)

    def final_flush_time(self, seconds: float) -> "QueueBuilder[T]":
        """Seconds close() waits for background puts; 0 disables the flush."""
        return self._set(final_flush_time=seconds)

    # -- zkqueue extras
    def quarantine_path(self, path: str) -> "QueueBuilder[T]":
        """Where corrupt nodes are moved (default ``<queue path>-quarantine``)."""
        return self._set(quarantine_path=path)

    def batch_size(self, n: int) -> "QueueBuilder[T]":
        """Most item nodes a consumer takes per engine step (default 300). A step is further capped to about
        ``max_batch_bytes`` of data and to about half a second of the consumer's measured work, so a slow
        consumer holds only a few items at a time."""
        return self._set(batch_size=n)

    def max_batch_bytes(self, n: int) -> "QueueBuilder[T]":
        """About how many bytes of item data one engine step reads (default 4 MiB): big items mean smaller
        steps, so memory stays bounded whatever batch_size says."""
        return self._set(max_batch_bytes=n)

    def jute_max_buffer(self, n: int) -> "QueueBuilder[T]":
        """The server's packet limit in bytes (default: protocol.jute_max_buffer())."""
        return self._set(jute_max_buffer=n)

    def lock_names(self, style: str) -> "QueueBuilder[T]":
        """``"qualified"`` (default): lock nodes named ``<item>@<hash of queue path>`` so queues sharing a lock
        path never collide. ``"curator"``: the item name, as Curator, so zkqueue and Curator consumers of the
        same queue and lock path exclude each other (give such a queue a lock path of its own)."""
        return self._set(lock_names=style)

    def acl(self, acl: Sequence[ACL]) -> "QueueBuilder[T]":
        """ACL of every node the queue creates: the queue, lock and quarantine nodes, items, locks and fences
        (see ``zkqueue.transport.security.queue_acl``). Default: the client's ``default_acl``."""
        return self._set(acl=tuple(acl))

    def auth(self, credential: str, scheme: str = "digest") -> "QueueBuilder[T]":
        """Credentials the queue adds to its client at start(): ``auth("user:password")`` for digest."""
        return self._set(auth=(*self._config.auth, (scheme, credential)))

    def large_items(self, max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES, compression: str = "zlib",
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
        return self._set(large_items=LargeItems(max_item_bytes, compression, orphan_grace))

    def producer_id(self, producer_id: str) -> "QueueBuilder[T]":
        """Name this producer for exactly-once puts (default: a random name per queue instance).

        Every put multi also advances a marker node ``<queue>-producers/<producer id>.<lane>``, so a put whose
        reply was lost learns whether it committed and is never stored twice. A producer restarted with the same
        id can still answer a :class:`~zkqueue.errors.PutOutcomeUnknown` with
        :func:`zkqueue.engine.put_markers.put_committed`. Two running queue instances must not share an id."""
        return self._set(producer_id=producer_id)

    def put_outcome_wait(self, seconds: float) -> "QueueBuilder[T]":
        """How long a put whose reply was lost waits for ZooKeeper to learn its outcome (default 60 s) before
        raising :class:`~zkqueue.errors.PutOutcomeUnknown`."""
        return self._set(put_outcome_wait=seconds)

    def run_mover(self, flag: bool) -> "QueueBuilder[T]":
        """Whether this instance of a parking queue takes part in the election of the mover of parked items
        (default True). Short-lived producers may opt out; some started instance must take part."""
        return self._set(run_mover=flag)

    def schedule_layout(self, layout: Any) -> "QueueBuilder[T]":
        """The time scale of a parking queue's schedule (a :class:`zkqueue.formats.buckets.Layout`: bucket widths,
        how early buckets are moved). The first instance to start records it; later ones adopt the recorded one.
        The default suits schedules of minutes to months; tests use a small one."""
        return self._set(schedule_layout=layout)

    # -- build
    def build_queue(self) -> DistributedQueue[T]:
        return self._build(DistributedQueue)

    def _build(self, cls: type, **extra: Any) -> Any:
        """Build ``cls`` (DistributedQueue or a recipe's subclass) with this config; ``extra`` are the recipe's own
        keywords (and options it sets, which override the config's)."""
        return cls(self._client, self._consumer, self._serializer, self._queue_path, config=self._config, **extra)

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
