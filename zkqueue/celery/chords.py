"""Chord counters in ZooKeeper: each header part counted exactly once, the body fired by exactly one part.

A chord of group ``g`` has one node, ``<root>/chords/<g>``, whose data is ``{"count": n, "size": s}``, and
children::

    p-<part task id>     one per finished header part, created once
    fired                created by the part that completes the chord: {"by": <part id>, "state": "pending"|"sent"}

A finished part records itself in ONE multi: the create of its ``p-`` child, the version-checked update of the
count, and, when the count reaches the size, the create of ``fired``. So:

- a part delivered again (its worker died after the multi, ``acks_late``) finds its child there: the multi fails,
  nothing is counted twice;
- two parts finishing at once race on the chord node's version: one commits, the other reads again and counts on;
- exactly one multi brings the count to the size, so exactly one part fires the body.

When that part's worker dies between the multi and the body's publish (or the multi's reply was lost), the part
is delivered again, finds its child, and finds ``fired`` naming it and still ``pending``: it publishes the body
then. On a zkqueue broker sharing the backend's client the body's message and ``fired``'s move to ``sent``
(version-checked: :meth:`ChordCounter.sent_ops`) commit in ONE multi (:mod:`.publish_with`), so a body is sent
exactly once whenever the worker dies. On another broker the mark follows the publish: a worker whose publish
committed but which died before the mark sends the body twice once the part is redelivered (``acks_late``).

The size comes from Celery's ``set_chord_size`` (called before the header's last task is sent, so before the
last part can finish), ``add_to_chord`` adds one; a part that sees no size yet is not the last one.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from zkqueue.celery.result_store import ResultStore, node_name
from zkqueue.engine.api import CONNECTION_ERRORS, create_op, run_multi, set_op
from zkqueue.errors import ConnectionLostError
from zkqueue.formats import naming

log = logging.getLogger("zkqueue.celery.chords")

FIRED = "fired"
PART_PREFIX = "p-"


@dataclass(frozen=True)
class PartOutcome:
    """What recording one finished part decided."""

    #: This part must publish the body now (then call :meth:`ChordCounter.mark_sent`).
    fire: bool
    #: The part was counted by this call (False: it had been counted before).
    counted: bool
    count: int
    size: int | None
    #: The version of the ``fired`` node when this part fires (for :meth:`ChordCounter.sent_ops`).
    fired_version: int = 0


@dataclass(frozen=True)
class _Chord:
    count: int
    size: int | None
    version: int  # -1: no node yet

    def encode(self, count: int, size: int | None) -> bytes:
        return json.dumps({"count": count, "size": size}, separators=(",", ":")).encode()


class ChordCounter:
    """Counting and firing of chords under ``store``'s ``chords`` node."""

    def __init__(self, store: ResultStore) -> None:
        self.store = store

    def _read(self, path: str) -> _Chord:
        def get() -> _Chord:
            try:
                data, stat = self.store.client.get(path)
            except NoNodeError:
                return _Chord(0, None, -1)
            fields = json.loads(data.decode("utf-8")) if data else {}
            return _Chord(int(fields.get("count") or 0), fields.get("size"), stat.version)

        return self.store.retrying(get, f"read chord {path}")

    def _write(self, path: str, chord: _Chord, count: int, size: int | None, more: list | None = None) -> str:
        """One version-checked multi: the chord node (created or updated) and ``more`` ops. Returns "ok",
        "conflict" (the chord node changed: read again) or "exists" (an op of ``more`` found its node there)."""
        data = chord.encode(count, size)
        node_op = (create_op(path, data, acl=self.store.acl) if chord.version < 0
                   else set_op(path, data, chord.version))
        ops = [node_op, *(more or [])]
        result = run_multi(self.store.client, ops, limit=self.store.limit)
        if result.ok:
            return "ok"
        if result.failed_index == 0 and isinstance(result.failure, (NodeExistsError, BadVersionError, NoNodeError)):
            return "conflict"
        if isinstance(result.failure, NodeExistsError):
            return "exists"
        if isinstance(result.failure, NoNodeError):  # the chords node itself vanished (a cleanup of the root)
            self.store._ensured = False
            self.store.ensure()
            return "conflict"
        raise result.failure if result.failure is not None else RuntimeError(f"chord update of {path} failed")

    def _loop(self, what: str, step) -> object:
        self.store.ensure()
        while True:
            try:
                outcome = step()
            except CONNECTION_ERRORS:
                # the multi may have committed: the next step reads what is there and sees it
                if not self.store.connection.wait(self.store.wait):
                    raise ConnectionLostError(what, self.store.wait) from None
                continue
            if outcome is not None:
                return outcome

    def set_size(self, group_id: str, size: int) -> None:
        """Record the chord's size (Celery's ``set_chord_size``), keeping the count of parts already finished."""
        path = self.store.chord_path(group_id)

        def step() -> bool | None:
            chord = self._read(path)
            return True if self._write(path, chord, chord.count, int(size)) == "ok" else None

        self._loop(f"set the size of chord {group_id}", step)

    def add_one(self, group_id: str) -> None:
        """One more part (Celery's ``add_to_chord``, a task of the header replaced by more tasks)."""
        path = self.store.chord_path(group_id)

        def step() -> bool | None:
            chord = self._read(path)
            size = (chord.size or 0) + 1
            return True if self._write(path, chord, chord.count, size) == "ok" else None

        self._loop(f"grow chord {group_id}", step)

    def record(self, group_id: str, part_id: str, size_hint: int | None = None) -> PartOutcome:
        """Count finished part ``part_id`` of chord ``group_id`` once; whether it fires the body."""
        path = self.store.chord_path(group_id)
        part = naming.join(path, PART_PREFIX + node_name(part_id))
        fired = naming.join(path, FIRED)

        def step() -> PartOutcome | None:
            chord = self._read(path)
            size = chord.size if chord.size is not None else size_hint
            count = chord.count + 1
            more = [create_op(part, b"", acl=self.store.acl)]
            fire = size is not None and count == size
            if fire:
                mark = json.dumps({"by": part_id, "state": "pending"}).encode()
                more.append(create_op(fired, mark, acl=self.store.acl))
            elif size is not None and count > size:
                log.warning("chord %s: part %s is number %d of %d", group_id, part_id, count, size)
            status = self._write(path, chord, count, chord.size, more)
            if status == "ok":
                return PartOutcome(fire, True, count, size)
            if status == "conflict":
                return None
            return self._again(group_id, part_id, fired, chord, size)

        return self._loop(f"count part {part_id} of chord {group_id}", step)  # type: ignore[return-value]

    def _again(self, group_id: str, part_id: str, fired: str, chord: _Chord, size: int | None) -> PartOutcome:
        """The part was counted before (a redelivery, or our own multi whose reply was lost): it fires only when
        ``fired`` names it and the body is still to be sent."""
        version = 0
        try:
            data, stat = self.store.retrying(lambda: self.store.client.get(fired), f"read {fired}")
            mark, version = json.loads(data.decode("utf-8")), stat.version
        except NoNodeError:
            mark = {}
        mine = mark.get("by") == part_id and mark.get("state") == "pending"
        if mine:
            log.warning("chord %s: part %s completed it before, but the body was not marked sent: sending it",
                        group_id, part_id)
        return PartOutcome(mine, False, chord.count, size, version)

    def sent_ops(self, group_id: str, part_id: str, fired_version: int) -> list[Any]:
        """The op that marks the body of ``group_id`` sent by ``part_id``, checked against the ``fired`` version
        its :class:`PartOutcome` saw: for the body message's own multi (see :mod:`.publish_with`); it fails when
        the body was marked sent meanwhile."""
        fired = naming.join(self.store.chord_path(group_id), FIRED)
        return [set_op(fired, json.dumps({"by": part_id, "state": "sent"}).encode(), fired_version)]

    def mark_sent(self, group_id: str, part_id: str) -> None:
        """Record that the body of ``group_id`` was published (by ``part_id``)."""
        fired = naming.join(self.store.chord_path(group_id), FIRED)
        mark = json.dumps({"by": part_id, "state": "sent"}).encode()
        try:
            self.store.retrying(lambda: self.store.client.set(fired, mark), f"mark {fired}")
        except NoNodeError:
            pass

    def delete(self, group_id: str) -> None:
        self.store.delete_tree(self.store.chord_path(group_id))
