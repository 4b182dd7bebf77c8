"""The mover: moves parked items (see :mod:`zkqueue.engine.parking`) into the queue node shortly before they are due.

One mover is active per queue path. Every started queue with parking takes part in a kazoo ``Election`` at
``<queue>-mover`` on its thread ``zkqueue-mover-<path>``; the winner moves, the others stand by, and when the
winner's session ends another takes over within a session timeout.

The active mover never polls. It lists the hour buckets (with a watch), then the minute buckets of the earliest
hours (with watches) until it finds the earliest minute bucket, and sleeps until :data:`~zkqueue.engine.parking.
Layout.lead_s` seconds before that bucket starts, or until a watch says a bucket appeared (a put into an existing
bucket changes nothing it needs to know). Buckets that are not due are never listed.

A bucket is moved in chunks: the items are read, then each chunk is one multi that deletes every parked item at
the version read and creates it in the queue node under its own name. A mover that crashes, expires or races
another one can therefore neither lose nor duplicate an item: a delete that finds the item gone or changed fails
the item's part of the multi, and the item is left to whoever moved it. Emptied buckets are deleted (a put
racing in makes the delete fail, and the bucket is moved again). Nodes in the schedule that are not parked items
are moved to the queue's quarantine and counted; errors back off, never loop hot, and never end the thread.

Writes per parked item: the put's create, plus one delete and one create when moved, plus the buckets' own
creates and deletes shared by the items of a bucket (and one multi per chunk of up to 500 items).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import WatchedEvent

from zkqueue.engine.backoff import Backoff
from zkqueue.engine.commit import CONNECTION_ERRORS, PrefixFailedError, check_op, commit_groups, create_op, delete_op
from zkqueue.engine.context import QueueContext
from zkqueue.engine.parking import Parking
from zkqueue.formats import buckets, naming
from zkqueue.transport import protocol

log = logging.getLogger("zkqueue.engine.mover")

#: Most parked items read (and moved) per chunk.
_CHUNK_ITEMS = 500
#: About how many bytes of item data one chunk reads.
_CHUNK_BYTES = 4 * 1024 * 1024
#: Longest wait after errors (doubling from _ERROR_BACKOFF).
_MAX_BACKOFF = 30.0
_ERROR_BACKOFF = 0.5
#: Longest sleep of an idle mover: watches wake it at once; this only bounds the damage of a watch ever missed.
_IDLE_CHECK = 60.0


class _FenceLost(Exception):
    """The mover's election node is gone (its session ended): it must not move anything more."""


class Mover:
    """The elected mover of one queue. :meth:`start` joins the election; :meth:`stop` leaves it."""

    def __init__(self, ctx: QueueContext, parking: Parking) -> None:
        self._ctx = ctx
        self._parking = parking  # its layout is the schedule's, once the queue has opened it
        self.root = parking.root
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._election: Any = None
        #: True while this instance is the active mover.
        self.active = False
        #: What this instance moved: items into the queue, buckets emptied, multis sent, foreign nodes set aside.
        self.moved = 0
        self.buckets_done = 0
        self.multis = 0
        self.foreign = 0
        self.lost_races = 0
        # listings, refreshed when a watch fires
        self._root_dirty = True
        self._hours: list[int] = []
        self._minutes: dict[int, list[int]] = {}
        self._dirty_hours: set[int] = set()
        self._undeletable: set[int] = set()
        self._foreign_seen: set[str] = set()
        self._stuck: dict[str, tuple[float, float]] = {}  # bucket path -> (retry at, back-off)
        self._fence: str | None = None
        self._errors = Backoff(initial=_ERROR_BACKOFF, maximum=_MAX_BACKOFF)  # the leader's passes

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"zkqueue-mover-{self._ctx.queue_path}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        for _ in range(40):  # the election may be entered again just after a cancel: cancel until the thread ends
            if self._election is not None:
                self._election.cancel()
            thread.join(0.25)
            if not thread.is_alive():
                return
        log.warning("the mover of %s did not stop within 10 s", self._ctx.queue_path)

    def wake(self) -> None:
        """Look at the schedule again now (tests, and puts that know they parked into a due bucket)."""
        self._root_dirty = True
        self._wake.set()

    def _run(self) -> None:
        """Take part in the election until stopped; never dies (errors are logged and backed off)."""
        backoff = Backoff(initial=_ERROR_BACKOFF, maximum=_MAX_BACKOFF)
        identifier = self._ctx.lock_data.decode("utf-8", "replace")
        while not self._stop.is_set():
            try:
                self._election = self._ctx.client.Election(buckets.mover_path(self._ctx.queue_path), identifier)
                self._election.run(self._lead)
                backoff.succeeded()
            except Exception as exc:
                if self._stop.is_set():
                    return
                pause = backoff.failed()
                if not self._ctx.connection.failover.error(exc, "electing the mover"):
                    log.warning("mover election of %s failed: %r; again in %.1fs", self._ctx.queue_path, exc, pause)
                self._stop.wait(pause)

    # ------------------------------------------------------------------------------------------ leading
    def _lead(self) -> None:
        """Move due buckets while this instance leads (until stopped or its session ends)."""
        session = self._ctx.connection.session_id()
        lock = self._election.lock if self._election is not None else None
        #: Every move multi starts with a check of this instance's election node: a mover whose session ended
        #: (and who may have read items that were moved and parked again since) cannot commit anything.
        self._fence = naming.join(lock.path, lock.node) if lock is not None and lock.node else None
        log.info("this instance is now the mover of %s", self._ctx.queue_path)
        self.active = True
        self._forget_listings()
        try:
            while not self._stop.is_set():
                if not self._ctx.connection.connected.is_set():
                    self._ctx.connection.wait(1.0)
                    continue
                if self._ctx.connection.session_id() != session:
                    return  # the session ended: the election node went with it; contend again
                self._wake.clear()
                try:
                    wait = self._pass()
                    self._errors.succeeded()
                except _FenceLost:
                    log.info("the mover of %s lost its election node; contending again", self._ctx.queue_path)
                    return
                except CONNECTION_ERRORS:
                    self._forget_listings()  # a listing may have failed after its flag was cleared: list again
                    continue  # wait for the connection, then look again (every move is safe to repeat)
                except Exception as exc:
                    wait = self._errors.failed()
                    self._ctx.counters.add("loop_errors")
                    if not self._ctx.connection.failover.error(exc, "moving parked items"):
                        log.warning("mover of %s failed: %r; again in %.1fs", self._ctx.queue_path, exc,
                                    wait, exc_info=True)
                    self._forget_listings()
                # A watch or a put's wake ends the wait early; the cap is a safety net, not a poll: when it is what
                # ends the wait, the schedule is listed afresh (a watch ever missed cannot stall the mover for good).
                cap = _IDLE_CHECK if wait is None else min(wait, _IDLE_CHECK)
                if not self._wake.wait(cap) and cap >= _IDLE_CHECK:
                    self._forget_listings()
        finally:
            self.active = False

    def _forget_listings(self) -> None:
        self._root_dirty = True
        self._minutes.clear()

    def _on_root(self, event: WatchedEvent) -> None:  # kazoo's event thread: never block
        self._root_dirty = True
        self._wake.set()

    def _on_hour(self, event: WatchedEvent) -> None:
        start = buckets.parse_bucket(event.path.rsplit("/", 1)[-1]) if event.path else None
        if start is not None:
            self._dirty_hours.add(start)
            self._undeletable.discard(start)
        if start is None or start not in self._hours:
            self._root_dirty = True  # an hour no longer followed (skipped, or dropped): list the root again
        self._wake.set()

    def _pass(self) -> float | None:
        """Move every bucket that is due; return seconds until the next one is, or until a bucket that could not be
        moved is tried again (None: nothing is parked)."""
        client = self._ctx.client
        if self._root_dirty:
            # Cleared before the listing, not after it: the watch the listing sets may fire (a new hour bucket)
            # before this thread gets the reply, and its mark must survive, or that bucket is never listed.
            self._root_dirty = False
            try:
                try:
                    names = client.get_children(self.root, watch=self._on_root)
                except NoNodeError:
                    with contextlib.suppress(NodeExistsError):
                        client.create(self.root, self._parking.layout.encode(), acl=self._ctx.acl, makepath=True)
                    names = client.get_children(self.root, watch=self._on_root)
            except BaseException:
                self._root_dirty = True  # a failed listing is tried again
                raise
            self._hours = sorted(h for h in (buckets.parse_bucket(n) for n in names) if h is not None)
            self._warn_foreign(self.root, [n for n in names if buckets.parse_bucket(n) is None])
        waits: list[float] = []
        i = 0
        while i < len(self._hours):
            layout = self._parking.layout
            horizon_ms = time.time_ns() // 1_000_000 + int(layout.lead_s * 1000)
            hour = self._hours[i]
            hour_path = naming.join(self.root, buckets.bucket_name(hour))
            minutes = self._minutes_of(hour)
            if minutes is None:  # the hour bucket is gone
                self._drop_hour(i)
                continue
            if not minutes:
                if (hour + layout.hour_s) * 1000 > horizon_ms:
                    i += 1  # a future hour whose minute bucket a put is creating (its watch will tell): look on
                elif hour not in self._undeletable and self._delete_bucket(hour_path):
                    self._drop_hour(i)
                    self._minutes.pop(hour, None)
                elif hour not in self._undeletable:
                    self._undeletable.add(hour)  # list it once more: a put that raced in shows as a minute bucket
                    self._dirty_hours.add(hour)
                else:
                    self._drop_hour(i)  # it holds only foreign nodes (warned): skipped until the root changes
                continue
            self._undeletable.discard(hour)
            j = 0
            while j < len(minutes):
                minute = minutes[j]
                if minute * 1000 > horizon_ms:
                    waits.append((minute * 1000 - horizon_ms) / 1000)
                    return min(waits)  # every later bucket starts later still
                path = naming.join(hour_path, buckets.bucket_name(minute))
                retry_in = self._stuck_for(path)
                if retry_in > 0:
                    waits.append(retry_in)  # could not be moved lately: later buckets go on meanwhile
                    j += 1
                elif self._move_bucket(path):
                    self._stuck.pop(path, None)
                    minutes.pop(j)
                else:
                    waits.append(self._mark_stuck(path))
                    j += 1
            if minutes:
                i += 1  # only buckets that could not be moved are left in this hour: go on with later hours
        return min(waits) if waits else None

    def _drop_hour(self, i: int) -> None:
        """Stop following the i-th hour bucket. Its watch may have fired while this pass looked at it (a put made
        a minute bucket in it): that event saw the hour still followed and only marked the hour, so the root is
        listed again here, or the new bucket would not be seen until the root changed."""
        hour = self._hours.pop(i)
        if hour in self._dirty_hours:
            self._dirty_hours.discard(hour)
            self._root_dirty = True

    def _stuck_for(self, path: str) -> float:
        """Seconds until the bucket at ``path``, which could not be emptied, is tried again (0: now)."""
        entry = self._stuck.get(path)
        return 0.0 if entry is None else max(0.0, entry[0] - time.monotonic())

    def _mark_stuck(self, path: str) -> float:
        """Remember that the bucket at ``path`` could not be emptied: it is tried again after a back-off that
        doubles each time (the warning is logged the first time only); returns the back-off."""
        previous = self._stuck.get(path)
        backoff = _ERROR_BACKOFF if previous is None else min(_MAX_BACKOFF, previous[1] * 2)
        if previous is None:
            log.warning("bucket %s of %s could not be emptied; later buckets go on, it is tried again with a "
                        "growing back-off (up to %.0f s)", path, self._ctx.queue_path, _MAX_BACKOFF)
        self._stuck[path] = (time.monotonic() + backoff, backoff)
        return backoff

    def _minutes_of(self, hour: int) -> list[int] | None:
        """The minute buckets of ``hour`` (cached until its watch fires); None if the hour bucket is gone."""
        if hour in self._minutes and hour not in self._dirty_hours:
            return self._minutes[hour]
        self._dirty_hours.discard(hour)
        path = naming.join(self.root, buckets.bucket_name(hour))
        try:
            names = self._ctx.client.get_children(path, watch=self._on_hour)
        except NoNodeError:
            self._minutes.pop(hour, None)
            return None
        self._warn_foreign(path, [n for n in names if buckets.parse_bucket(n) is None])
        minutes = sorted(m for m in (buckets.parse_bucket(n) for n in names) if m is not None)
        self._minutes[hour] = minutes
        return minutes

    # ------------------------------------------------------------------------------------------ moving
    def _move_bucket(self, path: str) -> bool:
        """Move every item of the minute bucket at ``path`` into the queue and delete the bucket. False when some
        items could not be moved (they stay parked and are tried again after a back-off)."""
        client = self._ctx.client
        while not self._stop.is_set():
            try:
                names = sorted(client.get_children(path))
            except NoNodeError:
                return True
            if not names:
                if self._delete_bucket(path):
                    self.buckets_done += 1
                    return True
                continue  # a put raced in: move it too
            if not self._move_items(path, names):
                return False
        return True

    def _move_items(self, bucket: str, names: list[str]) -> bool:
        """Move the parked items ``names`` of ``bucket`` in chunks; False if some could not be moved."""
        ctx = self._ctx
        chunk = _CHUNK_ITEMS
        progress = True
        start = 0
        while start < len(names) and not self._stop.is_set():
            part = names[start : start + chunk]
            start += len(part)
            paths = [naming.join(bucket, n) for n in part]
            groups: list[list[Any]] = []
            size = 0
            for name, path, res in zip(part, paths, protocol.multi_read(ctx.client, paths,
                                                                        limit=ctx.jute_max_buffer)):
                if isinstance(res, NoNodeError):
                    self.lost_races += 1  # moved (or deleted) by someone else meanwhile
                    continue
                if isinstance(res, BaseException):
                    raise res
                data, stat = res
                size += len(data)
                prefix = buckets.item_prefix(name)
                if prefix is None:
                    groups.append(self._quarantine_ops(bucket, name, path, data, stat.version))
                else:
                    groups.append([delete_op(path, stat.version),
                                   create_op(naming.join(ctx.queue_path, prefix), data, sequence=True, acl=ctx.acl)])
            if part:
                chunk = max(1, min(_CHUNK_ITEMS, int(_CHUNK_BYTES * len(part) / max(1, size))))
            if not groups:
                continue
            try:
                outcomes = commit_groups(ctx, groups, retry_connection=True,
                                         prefix=[check_op(self._fence)] if self._fence else ())
            except PrefixFailedError as exc:
                raise _FenceLost() from exc
            self.multis += 1
            moved = 0
            for group, outcome in zip(groups, outcomes):
                if outcome.ok:
                    if group[1].path.startswith(ctx.queue_path + "/"):
                        moved += 1
                    continue
                if outcome.op == 0 and isinstance(outcome.error, (NoNodeError, BadVersionError)):
                    self.lost_races += 1  # another mover (or a purge) got there first: not ours to move
                    continue
                if outcome.op == 1 and isinstance(outcome.error, NoNodeError):
                    ctx.client.ensure_path(group[1].path.rsplit("/", 1)[0], acl=ctx.acl)  # queue node deleted
                log.log(logging.DEBUG if bucket in self._stuck else logging.WARNING,
                        "moving parked item %s into %s failed: %r", group[0].path, ctx.queue_path, outcome.error)
                progress = False
            self.moved += moved
            ctx.counters.add("unparked", moved)
        return progress

    def _quarantine_ops(self, bucket: str, name: str, path: str, data: bytes, version: int) -> list[Any]:
        """A node in a bucket that is no parked item (a foreign node): set aside in the queue's quarantine."""
        if path not in self._foreign_seen:  # counted and warned once, however often the move is tried
            self._foreign_seen.add(path)
            self.foreign += 1
            self._ctx.counters.add("foreign_skipped")
            log.warning("node %s in the schedule of %s is no parked item; moving it to %s", path,
                        self._ctx.queue_path, self._ctx.quarantine_path)
        self._ctx.client.ensure_path(self._ctx.quarantine_path, acl=self._ctx.acl)
        target = naming.join(self._ctx.quarantine_path, f"parked-{bucket.rsplit('/', 1)[-1]}-{name}-")
        return [delete_op(path, version), create_op(target, data, sequence=True, acl=self._ctx.acl)]

    def _delete_bucket(self, path: str) -> bool:
        """Delete an empty bucket; False if something was put into it meanwhile."""
        self._ctx.counters.add("bucket_writes")
        try:
            self._ctx.client.delete(path)
        except NoNodeError:
            return True
        except NotEmptyError:
            return False
        return True

    def _warn_foreign(self, parent: str, names: list[str]) -> None:
        """Nodes that are no buckets where buckets belong: warned about and counted once each, then skipped."""
        new = [n for n in names if naming.join(parent, n) not in self._foreign_seen]
        if new:
            self._foreign_seen.update(naming.join(parent, n) for n in new)
            self._ctx.counters.add("foreign_skipped", len(new))
            log.warning("%d node(s) under %s are no time buckets (e.g. %r); skipped", len(new), parent, new[0])


__all__ = ["Mover"]
