"""Delivery: decoding nodes and handing them to the consumer, inline or on the user's executor.

Item consumers (Curator's ``consume_message``) get one call per item; node consumers (``consume_node``, see
:mod:`zkqueue.engine.seams`) one call per node. A large item's blob is read only when its node is about to be
consumed, and its items are dropped once the consumer returned, so a step holds one large item's bytes at a time
(per executor worker); a blob that is missing or does not match its reference is quarantined, never delivered. As nodes finish, their outcomes go to ``complete`` (lock-safe
mode), inline every ``_ACK_EVERY_SECONDS`` or as executor tasks finish. The time a step takes feeds the pace the
run loop sizes its steps by.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import FIRST_COMPLETED, Executor, Future
from concurrent.futures import wait as futures_wait
from typing import Any, Callable

from zkqueue.consumer import ErrorMode, QueueConsumer
from zkqueue.engine import blobs
from zkqueue.engine.commit import CONNECTION_ERRORS
from zkqueue.engine.completion import Outcome
from zkqueue.engine.context import QueueContext
from zkqueue.engine.log_limits import RepeatLimiter
from zkqueue.engine.seams import Completion
from zkqueue.errors import CorruptItemError
from zkqueue.formats import framing
from zkqueue.formats.large_ref import BlobRef

log = logging.getLogger("zkqueue.engine.delivery")

#: A consumer's errors: each distinct one logs its traceback once a minute, the repeats are counted.
CONSUMER_ERRORS = RepeatLimiter()

#: How often an inline consumer's finished nodes are completed while a step is still running.
_ACK_EVERY_SECONDS = 0.5


def decode_node(serializer: Any, data: bytes | None) -> tuple[list[Any], str | None]:
    """Unframe and deserialize every item of a node up front, so a bad node is quarantined whole before any of
    its items reaches the consumer. Returns (items, None) or ([], reason)."""
    try:
        payloads = framing.decode_items(data)
    except CorruptItemError as exc:
        return [], f"corrupt frame: {exc}"
    except Exception as exc:  # defensive: framing should only raise CorruptItemError
        return [], f"undecodable frame: {exc!r}"
    items = []
    for index, payload in enumerate(payloads):
        try:
            items.append(serializer.deserialize(payload))
        except Exception as exc:
            return [], f"serializer {serializer!r} cannot deserialize item {index}: {exc!r}"
    return items, None


def decode_large(ctx: QueueContext, serializer: Any, ref: BlobRef, name: str) -> tuple[list[Any], str | None, bool]:
    """Read a large item's blob and decode its items: (items, None, True), or ([], the reason to quarantine it,
    whether its blob still exists). Connection errors propagate."""
    try:
        frame = blobs.read_frame(ctx.client, ref, item_path=ctx.item_path(name))
    except blobs.BlobMissingError as exc:
        return [], f"large item: {exc}", False
    except CorruptItemError as exc:
        return [], f"large item: {exc}", True
    items, reason = decode_node(serializer, frame)
    return items, reason, True


def read_large(ctx: QueueContext, serializer: Any, o: Outcome) -> bool:
    """Read the blob of ``o`` (a large item not read yet) and decode its items; True when they can be delivered.

    Otherwise ``o.completion`` says what happens to the node: quarantine for a blob that is missing or does not
    match its reference (lock-safe), release when the blob could not be read for now (e.g. the connection).
    """
    assert o.blob is not None
    try:
        items, reason, blob_exists = decode_large(ctx, serializer, o.blob, o.name)
    except (*CONNECTION_ERRORS, OSError) as exc:
        log.warning("could not read the blob of %s/%s (%r); giving the node back", ctx.queue_path, o.name, exc)
        o.completion = Completion.release()
        return False
    if not blob_exists:
        o.blob = None  # nothing of it to keep or remove
    if reason is not None:
        o.completion = Completion.quarantine(reason)
        return False
    o.items = items
    o.unread = False
    return True


class Delivery:
    """Hands nodes to one queue's consumer and measures its pace."""

    def __init__(
        self,
        ctx: QueueContext,
        consumer: QueueConsumer[Any],
        executor: Executor | None,
        *,
        error_mode: Callable[[], ErrorMode],
        serializer: Any = None,
    ) -> None:
        self._ctx = ctx
        self._serializer = serializer
        self._consumer = consumer
        self._consume_node = getattr(consumer, "consume_node", None)
        self._executor = executor
        self._error_mode = error_mode
        self.pace: float | None = None  # seconds per node delivered (moving average)

    def _note_pace(self, nodes: int, seconds: float) -> None:
        """Record how long delivering ``nodes`` nodes took (wall time, so an executor's parallelism counts)."""
        if nodes > 0:
            per = seconds / nodes
            self.pace = per if self.pace is None else 0.5 * self.pace + 0.5 * per

    def consume(self, o: Outcome) -> Outcome:
        """Consume one node. Item consumers: every item, stopping at the first error in lock-safe REQUEUE mode."""
        if o.unread and not read_large(self._ctx, self._serializer, o):
            return o
        try:
            return self._consume_node_or_items(o)
        finally:
            if o.blob is not None:
                o.items = []  # one large item's bytes at a time (a partly failed node is requeued whole)

    def _consume_node_or_items(self, o: Outcome) -> Outcome:
        if self._consume_node is not None:
            return self._consume_whole(o)
        stop_on_error = o.held is not None and self._error_mode() is ErrorMode.REQUEUE
        for index, item in enumerate(o.items):
            try:
                self._consumer.consume_message(item)
                self._ctx.counters.add("consumed")
            except BaseException as exc:  # SystemExit from a consumer must not end the loop thread either
                self._ctx.counters.add("consumer_errors")
                CONSUMER_ERRORS.error(log, exc, "Exception processing queue item %s/%s [%d]", self._ctx.queue_path,
                                      o.name, index, scope=self._ctx.queue_path)
                if o.error is None:
                    o.error = exc
                    o.failed_at = index
                if stop_on_error:
                    break
        return o

    def _consume_whole(self, o: Outcome) -> Outcome:
        assert self._consume_node is not None
        try:
            completion = self._consume_node(o.node(self._ctx.item_path(o.name)))
        except BaseException as exc:
            self._ctx.counters.add("consumer_errors")
            CONSUMER_ERRORS.error(log, exc, "Exception processing queue node %s/%s", self._ctx.queue_path, o.name,
                                  scope=self._ctx.queue_path)
            o.error = exc
            o.failed_at = 0
            return o
        self._ctx.counters.add("consumed", len(o.items))
        if completion is not None and not isinstance(completion, Completion):
            log.warning("consume_node of %s returned %r, not a Completion: acking the node", o.name, completion)
            completion = None
        if completion is not None and o.held is None and completion.action != "ack":
            log.warning("completion %s of %s/%s ignored: completions need a lock path (the node was taken before "
                        "delivery)", completion.action, self._ctx.queue_path, o.name)
            completion = None
        o.completion = completion
        return o

    def deliver_all(
        self,
        outcomes: list[Outcome],
        complete: Callable[[list[Outcome]], None] | None,
        release: Callable[[list[Outcome]], None] | None = None,
    ) -> None:
        """Hand every node to the consumer (inline or on the executor) and ``complete`` them as they finish.

        In lock-safe mode, nodes never handed over (closing, or the executor refused work) go to ``release``, so
        another consumer gets them instead of leaving them held by this live session.
        """
        if not outcomes:
            return
        started = time.monotonic()
        try:
            if self._executor is None:
                self._deliver_inline(outcomes, complete, release)
            else:
                self._deliver_on_executor(outcomes, complete, release)
        finally:
            self._note_pace(len(outcomes), time.monotonic() - started)

    def _deliver_inline(self, outcomes: list[Outcome], complete: Callable[[list[Outcome]], None] | None,
                        release: Callable[[list[Outcome]], None] | None) -> None:
        pending: list[Outcome] = []
        last = time.monotonic()
        for index, o in enumerate(outcomes):
            if release is not None and not self._ctx.is_running():
                release(outcomes[index:])
                break
            pending.append(self.consume(o))
            if complete is not None and time.monotonic() - last > _ACK_EVERY_SECONDS:
                complete(pending)
                pending = []
                last = time.monotonic()
        if complete is not None and pending:
            complete(pending)

    def _deliver_on_executor(self, outcomes: list[Outcome], complete: Callable[[list[Outcome]], None] | None,
                             release: Callable[[list[Outcome]], None] | None) -> None:
        assert self._executor is not None
        futures: dict[Future[Outcome], Outcome] = {}
        try:
            for index, o in enumerate(outcomes):
                futures[self._executor.submit(self.consume, o)] = o
        except Exception:
            if release is not None:
                release(outcomes[index:])
            log.exception("the executor refused work for %s", self._ctx.queue_path)
            self._ctx.counters.add("loop_errors")
            if not futures:
                return
        remaining = set(futures)
        while remaining:
            done, remaining = futures_wait(remaining, return_when=FIRST_COMPLETED)
            finished = []
            for fut in done:
                o = futures[fut]
                exc = fut.exception()
                if exc is not None:  # consume() catches consumer errors; this is an engine bug
                    log.error("consume task for %s failed: %r", o.name, exc)
                    o.error = exc
                finished.append(o)
            if complete is not None:
                complete(finished)
