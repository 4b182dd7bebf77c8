"""AsyncQueue: the plain queue (Curator's DistributedQueue layout) for asyncio code: ``await q.put(item)``,
``await q.put_multi(items)``, ``async for item in q``.

It wraps an engine :class:`~zkqueue.engine.queue.DistributedQueue` (:attr:`AsyncQueue.engine`) in pull mode with a
lock path, so consumption is lock-safe (at least once): a node is claimed under a lease, its items are handed out
one by one, and it is acked when the iteration asks for the item after its last one, i.e. once the body of the
``async for`` finished every item of the node, or when the queue closes after its last item was handed out.
Nodes with items not handed out yet, and the current node when the ``async with`` block exits with an exception,
are given back untouched and delivered again.

Puts are the engine's foreground puts (grouped into shared multis by its group commit) and claims wait for due
nodes; neither has an async form, so both run in ONE small thread pool per queue (``executor_threads``, default 4;
:class:`~zkqueue.aio.bridge.Offloader`), never a thread per call.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, AsyncIterator, Generic, Iterable, TypeVar

from kazoo.client import KazooClient

from zkqueue.engine.api import DistributedQueue, HeldNode
from zkqueue.aio.bridge import Offloader
from zkqueue.errors import ConfigurationError, QueueClosedError

log = logging.getLogger("zkqueue.aio.queue")

T = TypeVar("T")

#: Seconds one claim waits for a due node before the iteration looks at close() again.
CLAIM_WAIT = 0.5


class AsyncQueue(Generic[T]):
    """A queue at ``path`` with ``serializer``; ``lock_path`` defaults to ``<path>-locks`` (give Curator's lock
    path to share a queue with Curator consumers). ``batch`` is the most nodes one claim takes. Other keywords go
    to the engine queue (``acl``, ``max_items``, ``large_items``, ...)."""

    def __init__(self, client: KazooClient, path: str, serializer: Any, *, lock_path: str | None = None,
                 batch: int = 100, executor_threads: int = 4, **engine_options: Any) -> None:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigurationError(f"batch must be an int >= 1, got {batch!r}")
        engine_options.setdefault("final_flush_time", 0.0)
        #: The engine queue this one wraps.
        self.engine: DistributedQueue[T] = DistributedQueue(
            client, None, serializer, path, lock_path=lock_path or path.rstrip("/") + "-locks",
            put_in_background=False, **engine_options)
        self.offloader = Offloader(executor_threads, f"zkqueue-aio-{path}")
        self._batch = batch
        self._held: deque[HeldNode] = deque()  # claimed nodes, the first one being handed out
        self._items: deque[Any] = deque()  # items of the first held node not handed out yet
        self._done: list[HeldNode] = []  # nodes fully handed out: acked at the next claim or close
        self._lock = asyncio.Lock()
        self._state = "new"

    @property
    def path(self) -> str:
        return self.engine.queue_path

    async def start(self) -> None:
        if self._state != "new":
            raise ConfigurationError(f"async queue {self.path} was already started")
        self._state = "started"
        await self.offloader.run(self.engine.start)

    async def close(self, *, give_back_current: bool = False) -> None:
        """Ack the nodes whose items were all handed out, give back the others, close the engine queue.
        ``give_back_current``: give back the node of the last item handed out too (``async with`` does when its
        body raised: that item's work may not be done). Idempotent."""
        if self._state == "closed":
            return
        self._state = "closed"
        async with self._lock:
            if self._held and not self._items and not give_back_current:
                self._done.append(self._held.popleft())
            done, self._done = self._done, []
            unfinished = list(self._held)
            self._held.clear()
            self._items.clear()
            try:
                if done:
                    await self.offloader.run(self.engine.complete_nodes, done)
                if unfinished:
                    await self.offloader.run(self.engine.release_nodes, unfinished)
                await self.offloader.run(self.engine.close)
            finally:
                self.offloader.shutdown()

    async def __aenter__(self) -> AsyncQueue[T]:
        await self.start()
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        await self.close(give_back_current=exc is not None)

    def _check_open(self) -> None:
        if self._state != "started":
            raise QueueClosedError(f"async queue {self.path} is {'closed' if self._state == 'closed' else 'not started'}")

    # ------------------------------------------------------------------------------------------ puts
    async def put(self, item: T, timeout: float | None = None) -> bool:
        """:meth:`DistributedQueue.put`, returning once the item is stored (False only if a bounded queue stayed
        full for ``timeout`` seconds)."""
        self._check_open()
        return await self.offloader.run(self.engine.put, item, timeout)

    async def put_multi(self, items: Iterable[T], timeout: float | None = None) -> bool:
        """:meth:`DistributedQueue.put_multi`: ``items`` in ONE node, handed out in order."""
        self._check_open()
        return await self.offloader.run(self.engine.put_multi, list(items), timeout)

    # ------------------------------------------------------------------------------------------ consuming
    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        """The next item; waits for one (ends only when the queue is closed)."""
        item = await self.get(None)
        if item is _NOTHING:
            raise StopAsyncIteration
        return item  # type: ignore[return-value]

    async def get(self, timeout: float | None = None) -> T | Any:
        """The next item, or :data:`NOTHING` after ``timeout`` seconds (None: wait) or once the queue is closed.
        The node it came from is acked when its last item was handed out and the next item is asked for."""
        async with self._lock:
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            while True:
                if self._state != "started":
                    return _NOTHING
                if self._items:
                    return self._items.popleft()
                if self._held:  # the first node is handed out: acked with the next claim
                    self._done.append(self._held.popleft())
                    if self._held:
                        self._items.extend(self._held[0].items)
                        continue
                if self._done:
                    done, self._done = self._done, []
                    await self.offloader.run(self.engine.complete_nodes, done)
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    return _NOTHING
                wait = CLAIM_WAIT if left is None else min(CLAIM_WAIT, left)
                claimed = await self._claim(wait)
                if claimed:
                    self._held.extend(claimed)
                    self._items.extend(self._held[0].items)

    async def _claim(self, wait: float) -> list[HeldNode]:
        fut = self.offloader.submit(self.engine.claim_nodes, self._batch, wait)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            def give_back(f: asyncio.Future[list[HeldNode]]) -> None:
                if not f.cancelled() and f.exception() is None and f.result():
                    self.offloader.submit_detached(self.engine.release_nodes, f.result())

            fut.add_done_callback(give_back)
            raise


class _Nothing:
    def __repr__(self) -> str:
        return "NOTHING"


#: What :meth:`AsyncQueue.get` returns when no item came in time.
NOTHING: Any = _Nothing()
_NOTHING = NOTHING
