"""Acks of one process's ``zkqueue://`` consumers, committed together: a group commit of acks.

A worker acks many messages a second (Celery acks each task as a pool process takes it, or when it is done with
``acks_late``). One fenced multi per ack would cost a round trip each on the thread that runs the worker's event
loop. Instead :meth:`Acker.submit` hands the held message to one thread per queue store, which ends everything
handed to it since its last commit with one :func:`~zkqueue.engine.api.finish_nodes` call: the engine packs the
acks of a queue into as few multis as it can, each fenced by the consumer's session fence and every message's
lease. So acks that arrive while a commit is in flight share the next multi.

What holds:

- an ack commits only under the lease that holds the message (the engine's fence): a message whose lease ended
  with the session is not deleted (``settled == "lost"``) and is delivered again elsewhere, as before;
- until its ack committed a message still counts against its channel's prefetch (see :mod:`.qos`), and the
  engine's claims of this process never hand it out again (it stays claimed);
- a message whose ack the task's result write committed (:mod:`.late_acks`) is gone by the time its ack comes:
  the group commit reads those nodes first (after a ``sync``, so it sees the pool process's write) and lets go
  of the ones gone without a write of its own;
- :meth:`Acker.flush` waits until every ack handed over before it has committed (or failed): a channel's
  ``close`` and the store's close call it, so a consumer that acks and closes its connection leaves nothing
  pending; a process killed before an ack committed gets the message redelivered (at-least-once, as with an ack
  that never reached any broker).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from kazoo.exceptions import NoNodeError

from zkqueue.engine.api import HeldNode, finish_nodes, forget_nodes, multi_read

log = logging.getLogger("zkqueue.celery.acks")

#: Most seconds a close waits for the acks handed over before it to commit.
FLUSH_SECONDS = 30.0


#: An ack handed over: the node, the call once known, whether the task's result write may have committed it.
Pending = tuple[HeldNode, Callable[[HeldNode], None] | None, bool]


class Acker:
    """One thread that commits the acks handed to it, many per multi (see the module docstring)."""

    def __init__(self, name: str, client: Any) -> None:
        self._name = name
        self._client = client
        self._cond = threading.Condition()
        self._pending: list[Pending] = []
        self._busy = 0  # acks taken by the thread and not done yet
        self._submitted = 0
        self._done = 0
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        """Acks handed over and not committed (or failed) yet."""
        with self._cond:
            return len(self._pending) + self._busy

    def submit(self, node: HeldNode, on_done: Callable[[HeldNode], None] | None = None, *,
               acked_with_result: bool = False) -> None:
        """End ``node`` by its ``completion`` (None: an ack) in the next group commit; ``on_done(node)`` runs on the
        acker's thread once that commit is known (``node.settled`` says how it went). ``acked_with_result``: the
        task's result write may have committed the ack already (see :mod:`.late_acks`): if the node is gone it is
        let go of, else acked. After :meth:`close` the ack is committed in the caller's thread."""
        with self._cond:
            if not self._closed:
                self._pending.append((node, on_done, acked_with_result))
                self._submitted += 1
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=f"zkqueue-celery-acks-{self._name}",
                                                    daemon=True)
                    self._thread.start()
                self._cond.notify_all()
                return
        self._commit([(node, on_done, acked_with_result)])

    def flush(self, timeout: float = FLUSH_SECONDS) -> bool:
        """Wait until every ack submitted before this call has committed or failed; False on timeout."""
        with self._cond:
            target = self._submitted
            return self._cond.wait_for(lambda: self._done >= target or self._thread is None, timeout)

    def close(self) -> None:
        """Commit what is pending and stop the thread (later submits commit in the caller's thread)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(FLUSH_SECONDS)
            if thread.is_alive():
                log.warning("acks of %s did not commit within %g s", self._name, FLUSH_SECONDS)

    # ------------------------------------------------------------------------------------------ the thread
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                batch, self._pending = self._pending, []
                self._busy = len(batch)
                if not batch and self._closed:
                    self._thread = None
                    self._cond.notify_all()
                    return
            try:
                self._commit(batch)
            finally:
                with self._cond:
                    self._busy = 0
                    self._done += len(batch)
                    self._cond.notify_all()

    def _commit(self, batch: list[Pending]) -> None:
        """One group commit; never raises (the thread must not die): a failure is logged, and the messages it left
        unacked stay held by their leases (the engine retries a lost reply) or come back with the session."""
        maybe_gone = [node for node, _cb, with_result in batch if with_result]
        gone = self._gone(maybe_gone) if maybe_gone else set()
        nodes = [node for node, _cb, _w in batch if id(node) not in gone]
        try:
            if gone:
                forget_nodes(node for node in maybe_gone if id(node) in gone)
            finish_nodes(nodes)
        except Exception:
            log.exception("committing %d ack(s) failed; the messages stay held until their session ends", len(nodes))
        for node, on_done, _with_result in batch:
            if node.settled == "lost":
                log.warning("a message of %s was not acked: its lease ended with the ZooKeeper session, so it is "
                            "delivered again", node.queue_path)
            if on_done is None:
                continue
            try:
                on_done(node)
            except Exception:
                log.exception("an ack callback failed")

    def _gone(self, nodes: list[HeldNode]) -> set[int]:
        """The ids of ``nodes`` already deleted (by a task's result write, see :mod:`.late_acks`): one ``sync`` and
        one multiRead, sent together (the session's requests are served in order, so the read sees every write
        committed before the sync, whichever server the pool process wrote through). On an error, none (each is
        then acked: a node gone meanwhile is settled by the engine)."""
        try:
            self._client.sync_async(nodes[0].queue_path)
            replies = multi_read(self._client, [node.path for node in nodes])
        except Exception as exc:  # noqa: BLE001 - they are acked as usual
            log.debug("could not read %d node(s) acked with their results (%r)", len(nodes), exc)
            return set()
        return {id(node) for node, reply in zip(nodes, replies) if isinstance(reply, NoNodeError)}
