"""Claims off the event loop: a connection's claims run on a thread of their own while Celery's loop delivers.

Under kombu's event loop (Celery's worker, see ``Transport.register_with_event_loop``) the loop's thread is the
worker's hub: it reads the broker, hands tasks to the pool, takes results back and acks. A claim is a round trip
to ZooKeeper (the block claim and the read of its items); made on that thread, it stalls everything else for as
long (a quarter of the loop's time in a busy worker). Here the claims run on one :class:`Prefetcher` thread per
connection:

- it waits on the connection's :class:`~zkqueue.celery.wakeup.Wakeup` (a change of a consumed queue its last claim
  found nothing in, an ack opening a prefetch slot, a new consumer or a bigger prefetch) and claims, for each
  consuming channel and queue, as many messages as the channel's prefetch leaves room for, counting what it claimed
  and the loop has not delivered yet (:attr:`Ready.count`); the messages are decoded (expired and undecodable ones
  are settled here) and put in the channel's :class:`Ready` buffer;
- then it writes to a pipe the loop watches (:class:`~zkqueue.celery.wakeup.LoopSignal`); the loop delivers what
  is ready, with no request to ZooKeeper on its thread.

Claimed messages stay held under the connection's session-bound leases: a buffered message is given back when
its channel closes or its consumer is cancelled, and comes back by itself if the process dies. A failing claim
is logged and retried a moment later (:data:`ERROR_PAUSE`); a lost session stops the claims until the loop's
next delivery raises it to kombu.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

from zkqueue.engine.api import CONNECTION_ERRORS, wait_connected
from zkqueue.errors import BrokerConnectionError, SessionLostError

log = logging.getLogger("zkqueue.celery.prefetch")

#: Most seconds the thread waits before it looks again without being woken.
MAX_WAIT = 1.0
#: Seconds the thread pauses after a claim failed for another reason than a lost connection.
ERROR_PAUSE = 1.0


class Ready:
    """One channel's messages claimed and not delivered yet: (queue, held node, decoded message), in claim order.

    A message popped for delivery still counts (:attr:`count`) until :meth:`delivered`: kombu adds it to the QoS's
    held messages during the delivery, and the prefetch room the claiming thread computes meanwhile must see it in
    one place or the other."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: deque[tuple[str, Any, dict[str, Any]]] = deque()
        self._delivering = 0

    @property
    def count(self) -> int:
        with self._lock:
            return len(self._items) + self._delivering

    def extend(self, queue: str, claimed: list[tuple[Any, dict[str, Any]]]) -> None:
        with self._lock:
            self._items.extend((queue, node, message) for node, message in claimed)

    def pop(self) -> tuple[str, Any, dict[str, Any]] | None:
        """The next message to deliver (it counts until :meth:`delivered` is called), or None."""
        with self._lock:
            if not self._items:
                return None
            self._delivering += 1
            return self._items.popleft()

    def delivered(self) -> None:
        """The message :meth:`pop` gave is delivered (or its delivery failed)."""
        with self._lock:
            self._delivering -= 1

    def take(self, queue: str | None = None) -> list[tuple[str, Any, dict[str, Any]]]:
        """Remove and return what is buffered (of ``queue`` only, if given)."""
        with self._lock:
            if queue is None:
                taken, self._items = list(self._items), deque()
                return taken
            taken = [item for item in self._items if item[0] == queue]
            self._items = deque(item for item in self._items if item[0] != queue)
            return taken


class Prefetcher:
    """The claiming thread of one connection under an event loop (see the module docstring)."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._stop = threading.Event()
        self.errors = 0  # claims that failed for another reason than the connection (each logged)
        self._thread = threading.Thread(target=self._run, name="zkqueue-celery-prefetch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._transport.wakeup.wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        transport = self._transport
        while not self._stop.is_set():
            wakeup = transport.wakeup
            since = wakeup.generation
            try:
                transport.check_session()
                pairs = transport.consuming()
                versions = transport.versions(pairs)
                claimed = 0
                looked: dict[str, Any] = {}  # the queues a claim found nothing in: watched below
                for channel, queue in pairs:
                    if self._stop.is_set():
                        return
                    got = channel.prefetch_from(queue)
                    if got is None:  # no room: the ack or give-back that opens it wakes us; the queue's changes
                        continue     # do not matter till then (watching them would relist it on every publish)
                    claimed += got
                    looked[queue] = versions[queue]
            except (SessionLostError, BrokerConnectionError) as exc:
                log.warning("claiming stopped: %s", exc)
                transport.signal_loop()  # the loop's look raises it to kombu, which reconnects (a new prefetcher)
                return
            except CONNECTION_ERRORS as exc:
                log.info("claiming: %r; waiting for ZooKeeper to come back", exc)
                shared = transport.shared
                if shared is not None:
                    wait_connected(shared.client, MAX_WAIT)
                transport.signal_loop()  # the loop looks at the session
                continue
            except Exception:
                self.errors += 1
                log.exception("claiming for the event loop failed; trying again in %.1f s", ERROR_PAUSE)
                self._stop.wait(ERROR_PAUSE)
                continue
            if claimed:
                transport.signal_loop()
                continue  # room may be left (another queue, a bigger prefetch): look again at once
            wakeup.wait(since, looked, MAX_WAIT)
