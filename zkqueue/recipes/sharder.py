"""QueueSharder: spread one logical queue over several ZooKeeper queues (shards), as Curator's QueueSharder.

Layout (Curator's): each shard is a queue at ``<queue_path>/queue-<uuid>``; an application gets a shard to put
into with :meth:`QueueSharder.get_queue`, and every instance consumes from every shard (no order across
shards). A leader, elected among the sharders with :class:`LeaderLatch` at ``leader_path``, adds shards when
every shard holds ``new_queue_threshold`` items or more; every instance discovers new shards on its periodic
check.

Fixed against Curator:

- **Foreign children are ignored.** Only children named ``queue-<canonical UUID>`` are shards (Curator takes
  every child, e.g. a shard queue's own ``queue-<uuid>-quarantine`` sibling or a stray node).
- **As many shards as needed** are added in one check: enough that the items present would fit under the
  threshold (Curator adds one per check period), up to ``max_queues``.
- **No duplicate initial shards.** When no shard exists, the initial shard's name is derived from the queue
  node's ``czxid`` (``queue-`` + a UUIDv5 of the queue path and czxid), which every instance reads from the same
  node, so instances starting together all create -- and tolerate ``NodeExists`` for -- the same shard. (A
  deleted and recreated queue node has a new czxid, hence a fresh name.) The name is still a canonical UUID, so
  Curator's sharder reads it as a shard.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import re
import threading
import uuid
from typing import Any, Callable, Generic, Protocol, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from zkqueue.engine.backoff import Backoff
from zkqueue.formats import naming
from zkqueue.errors import ConfigurationError, QueueNotStartedError, QueueStateError

log = logging.getLogger("zkqueue.recipes.sharder")

T = TypeVar("T")

SHARD_PREFIX = "queue-"
_SHARD_NAME = re.compile(r"queue-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
#: Namespace of the deterministic initial shard name.
_INITIAL_SHARD_NS = uuid.UUID("5b0f1f6c-2b65-4d8e-9a53-6c1a3a4f0e21")


def is_shard_name(name: str) -> bool:
    """True for a child the sharder treats as a shard: ``queue-<canonical UUID>``."""
    return _SHARD_NAME.fullmatch(name) is not None


def initial_shard_name(queue_path: str, czxid: int) -> str:
    """The deterministic name of the first shard of the queue node ``queue_path`` created at ``czxid``."""
    return SHARD_PREFIX + str(uuid.uuid5(_INITIAL_SHARD_NS, f"{queue_path}\0{czxid}"))


# ------------------------------------------------------------------------------------------------ policies
@dataclasses.dataclass(frozen=True)
class QueueSharderPolicies:
    """When to add shards: ``new_queue_threshold`` items per shard (10000), checked every ``threshold_check``
    seconds (30), at most ``max_queues`` shards (10). Curator's defaults."""

    new_queue_threshold: int = 10_000
    threshold_check: float = 30.0
    max_queues: int = 10

    def __post_init__(self) -> None:
        for name in ("new_queue_threshold", "max_queues"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigurationError(f"{name} must be a positive int, got {value!r}")
        value = self.threshold_check
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigurationError(f"threshold_check must be > 0 seconds, got {value!r}")

    @staticmethod
    def builder() -> "QueueSharderPoliciesBuilder":
        return QueueSharderPoliciesBuilder()


class QueueSharderPoliciesBuilder:
    """Curator's fluent ``QueueSharderPolicies.builder()``."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def new_queue_threshold(self, n: int) -> "QueueSharderPoliciesBuilder":
        self._values["new_queue_threshold"] = n
        return self

    def threshold_check(self, seconds: float) -> "QueueSharderPoliciesBuilder":
        self._values["threshold_check"] = seconds
        return self

    def max_queues(self, n: int) -> "QueueSharderPoliciesBuilder":
        self._values["max_queues"] = n
        return self

    def build(self) -> QueueSharderPolicies:
        return QueueSharderPolicies(**self._values)


class QueueAllocator(Protocol[T]):
    """Makes the (unstarted) queue of one shard; the sharder starts and closes it. A plain callable
    ``fn(client, path)`` works too."""

    def allocate_queue(self, client: KazooClient, path: str) -> T: ...


# ------------------------------------------------------------------------------------------------ leader latch
class LeaderLatch:
    """Leader election over EPHEMERAL_SEQUENTIAL nodes, named like Curator's LeaderLatch
    (``_c_<uuid>-latch-<seq>``), so zkqueue and Curator instances can share one election.

    The lowest sequence leads. A follower watches only its predecessor (no herd). Leadership is dropped on
    SUSPENDED and LOST (as Curator's latch) and re-checked after reconnecting; if the session expired, a new
    node is created. The ``_c_<uuid>`` marker finds our node again if a create's reply was lost.
    """

    LOCK_NAME = "latch-"

    def __init__(self, client: KazooClient, path: str, participant_id: str = "") -> None:
        self._client = client
        self._path = naming.validate_path(path)
        self._data = participant_id.encode("utf-8")
        self._marker = f"_c_{uuid.uuid4()}-"
        self._leader = threading.Event()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._our_name: str | None = None
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> str:
        return self._path

    def has_leadership(self) -> bool:
        return self._leader.is_set() and not self._closed.is_set()

    def await_leadership(self, timeout: float | None = None) -> bool:
        return self._leader.wait(timeout) and not self._closed.is_set()

    def start(self) -> None:
        if self._thread is not None:
            raise QueueStateError("LeaderLatch can be started once")
        self._client.ensure_path(self._path)
        self._client.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._loop, name=f"zkqueue-latch-{self._path}", daemon=True)
        self._wake.set()
        self._thread.start()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._leader.clear()
        self._wake.set()
        self._client.remove_listener(self._on_state)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(30.0)
        name = self._our_name
        if name is not None:
            try:
                self._client.delete(naming.join(self._path, name))
            except NoNodeError:
                pass
            except Exception as exc:  # the node is ephemeral: it goes with the session anyway
                log.warning("could not delete latch node %s/%s: %r", self._path, name, exc)

    # -- internals
    def _on_state(self, state: str) -> None:  # kazoo's connection thread: never block
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            if self._leader.is_set():
                log.info("leadership of %s suspended (%s)", self._path, state)
            self._leader.clear()
        self._wake.set()

    def _on_watch(self, _event: object) -> None:
        self._wake.set()

    def _loop(self) -> None:
        backoff = Backoff(initial=0.1, maximum=2.0)  # after failed checks in a row
        while not self._closed.is_set():
            self._wake.wait()
            if self._closed.is_set():
                break
            self._wake.clear()
            try:
                self._check()
                backoff.succeeded()
            except Exception as exc:  # never die: retry with a back-off
                log.warning("leader latch %s check failed: %r (retrying)", self._path, exc)
                self._leader.clear()
                if self._closed.wait(backoff.failed()):
                    break
                self._wake.set()

    @classmethod
    def _sort_key(cls, name: str) -> str:
        return name[name.rfind(cls.LOCK_NAME) + len(cls.LOCK_NAME) :]

    def _participants(self) -> list[str]:
        children = self._client.get_children(self._path)
        return sorted((c for c in children if self.LOCK_NAME in c), key=self._sort_key)

    def _check(self) -> None:
        if self._client.state != KazooState.CONNECTED:
            self._leader.clear()
            return
        names = self._participants()
        ours = [n for n in names if n.startswith(self._marker)]
        if not ours:
            created = self._client.create(
                naming.join(self._path, self._marker + self.LOCK_NAME), self._data, ephemeral=True, sequence=True
            )
            self._our_name = created.rsplit("/", 1)[-1]
            names = self._participants()
            ours = [n for n in names if n.startswith(self._marker)]
            if not ours:
                self._wake.set()
                return
        self._our_name = ours[0]
        index = names.index(ours[0])
        if index == 0:
            if not self._leader.is_set():
                log.info("this instance leads %s", self._path)
            self._leader.set()
            return
        self._leader.clear()
        previous = naming.join(self._path, names[index - 1])
        if self._client.exists(previous, watch=self._on_watch) is None:
            self._wake.set()  # the predecessor went away meanwhile: look again


# ------------------------------------------------------------------------------------------------ sharder
class QueueSharder(Generic[T]):
    """A set of shard queues at ``queue_path`` (see the module docs). ``allocator`` makes each shard's queue
    unstarted; the sharder starts and closes them."""

    def __init__(
        self,
        client: KazooClient,
        allocator: QueueAllocator[T] | Callable[[KazooClient, str], T],
        queue_path: str,
        leader_path: str,
        policies: QueueSharderPolicies | None = None,
    ) -> None:
        if client is None:
            raise ConfigurationError("client is required")
        allocate = getattr(allocator, "allocate_queue", None)
        if callable(allocate):
            self._allocate: Callable[[KazooClient, str], T] = allocate
        elif callable(allocator):
            self._allocate = allocator
        else:
            raise ConfigurationError(f"allocator must have allocate_queue(client, path) or be callable: {allocator!r}")
        self._client = client
        self._queue_path = naming.validate_queue_path(queue_path)
        self._leader_path = naming.validate_path(leader_path)
        if self._queue_path == self._leader_path:
            raise ConfigurationError("queue_path and leader_path must be different")
        self._policies = policies or QueueSharderPolicies()
        self._latch = LeaderLatch(client, self._leader_path)
        self._queues: dict[str, T] = {}
        self._preferred: set[str] = set()
        self._lock = threading.RLock()
        self._state = "LATENT"
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self.check_errors = 0

    # -- lifecycle
    def start(self) -> None:
        with self._lock:
            if self._state != "LATENT":
                raise QueueStateError(f"sharder of {self._queue_path} can be started once")
            self._state = "STARTED"
        self._client.ensure_path(self._queue_path)
        self._discover()
        if not self._queues:
            self._create_initial_shard()
            self._discover()
        self._latch.start()
        self._thread = threading.Thread(target=self._check_loop, name=f"zkqueue-sharder-{self._queue_path}",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        with self._lock:
            if self._state != "STARTED":
                self._state = "CLOSED"
                return
            self._state = "CLOSED"
        self._closing.set()
        if self._thread is not None:
            self._thread.join(30.0)
        self._latch.close()
        with self._lock:
            queues = list(self._queues.values())
        for q in queues:
            try:
                q.close()  # type: ignore[attr-defined]
            except Exception:
                log.exception("closing a shard queue of %s failed", self._queue_path)

    def __enter__(self) -> "QueueSharder[T]":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public API
    def get_queue(self) -> T:
        """A shard to put into: a random one under the threshold, else a random one."""
        with self._lock:
            if self._state != "STARTED":
                raise QueueNotStartedError(f"sharder of {self._queue_path} is not started")
            paths = [p for p in self._preferred if p in self._queues] or list(self._queues)
            if not paths:
                raise QueueNotStartedError(f"sharder of {self._queue_path} has no shard yet")
            return self._queues[random.choice(paths)]

    def get_shard_qty(self) -> int:
        with self._lock:
            return len(self._queues)

    def get_queue_paths(self) -> list[str]:
        with self._lock:
            return sorted(self._queues)

    def has_leadership(self) -> bool:
        return self._latch.has_leadership()

    @property
    def policies(self) -> QueueSharderPolicies:
        return self._policies

    # -- shards
    def _shard_names(self) -> list[str]:
        return [c for c in self._client.get_children(self._queue_path) if is_shard_name(c)]

    def _discover(self) -> list[str]:
        names = self._shard_names()
        for name in names:
            self._add_queue_if_new(naming.join(self._queue_path, name))
        return names

    def _add_queue_if_new(self, path: str) -> None:
        with self._lock:
            if path in self._queues or self._state != "STARTED":
                return
            queue = self._allocate(self._client, path)
            try:
                queue.start()  # type: ignore[attr-defined]
            except Exception:
                log.exception("could not start shard queue %s", path)
                raise
            self._queues[path] = queue
            self._preferred.add(path)
            log.info("shard %s added (%d shards)", path, len(self._queues))

    def _create_initial_shard(self) -> None:
        stat = self._client.exists(self._queue_path)
        if stat is None:
            self._client.ensure_path(self._queue_path)
            stat = self._client.exists(self._queue_path)
        path = naming.join(self._queue_path, initial_shard_name(self._queue_path, stat.czxid))
        try:
            self._client.create(path)
        except NodeExistsError:
            pass

    def _check_loop(self) -> None:
        while not self._closing.wait(self._policies.threshold_check):
            try:
                self.check_threshold()
            except Exception:  # never die silently: log, count, go on
                self.check_errors += 1
                log.exception("threshold check of %s failed", self._queue_path)

    def check_threshold(self) -> None:
        """One periodic check (public for tests and for applications that want to check now)."""
        names = self._discover()
        if not names:
            return
        paths = [naming.join(self._queue_path, n) for n in names]
        asyncs = [self._client.exists_async(p) for p in paths]
        threshold = self._policies.new_queue_threshold
        total = 0
        over = 0
        live = 0
        for path, async_result in zip(paths, asyncs):
            stat = async_result.get()
            if stat is None:
                continue
            live += 1
            count = stat.numChildren
            total += count
            with self._lock:
                if count >= threshold:
                    over += 1
                    self._preferred.discard(path)
                elif count <= threshold // 2:
                    self._preferred.add(path)
        if not live or over < live or not self._latch.has_leadership():
            return
        room = self._policies.max_queues - len(paths)
        if room <= 0:
            log.warning("Max number of queues (%d) reached for %s. Consider increasing the max.",
                        self._policies.max_queues, self._queue_path)
            return
        wanted = max(1, total // threshold - live + 1)
        for _ in range(min(wanted, room)):
            path = naming.join(self._queue_path, SHARD_PREFIX + str(uuid.uuid4()))
            self._client.create(path)
            self._add_queue_if_new(path)
