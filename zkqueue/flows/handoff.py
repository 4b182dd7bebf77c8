"""The hand-off: how a step's end commits, in ONE ZooKeeper multi.

The multi deletes the step's queue item and its job record (both version-checked: the record's version changes
with every claim, so a worker whose job was claimed again by another one cannot commit: the job layer's fence),
replaces the flow record (the step's result merged in, its history entry appended, version-checked) and creates
the next steps' job records and items, or drops the queued siblings of a flow job that failed.

Steps of one flow job that end at the same time (fan-out branches) race on the flow record's version: the loser
gets BadVersion, reads the record again and rebuilds its multi, so exactly one of them sees that the last branch
a join waits for is done, and queues the join. A multi whose reply was lost is answered by the flow record: each
hand-off's history entry carries its token.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from kazoo.exceptions import NoNodeError

from zkqueue.engine import api
from zkqueue.engine.api import CONNECTION_ERRORS, Backoff, Completion, TokenSource, delete_op, wait_connected
from zkqueue.errors import CorruptItemError, QueueStateError
from zkqueue.flows import definition, model, packing, store
from zkqueue.flows.definition import Definition, Ending
from zkqueue.flows.model import FlowRecord, FlowState, HistoryEntry, StepError
from zkqueue.jobs import scope
from zkqueue.jobs.model import Record

log = logging.getLogger("zkqueue.flows.handoff")

#: Hand-off multis tried per step end before the step is given back (each try after a version race).
MAX_TRIES = 60
#: How long a hand-off waits for a lost connection to come back.
RECONNECT_WAIT = 30.0
#: The pause after a hand-off lost a race to a sibling's (drawn between 0 and 2 ms, doubling per race, at most
#: 0.2 s): racing siblings spread out.
RACE_BACKOFF = Backoff(0.002, 0.2, full_jitter=True)

UNREAD = object()  # end(): the caller has not read the flow record
OK = "ok"  # committed
LOST = "lost"  # another worker holds the step's job now (or it was dropped): nothing was committed by us


@dataclass(frozen=True)
class StepRef:
    """The step job being ended: its step, its job record as claimed and that record's version; ``ack_ops``
    wraps the hand-off's ops in the item's fenced ack (:meth:`zkqueue.jobs.HeldJob.ack_ops`), or is None when the
    engine acks the item itself (a claim-time death)."""

    step: str
    record: Record
    version: int
    ack_ops: Callable[[list[Any]], tuple[list[Any], int]] | None = None
    #: The held job (a :class:`~zkqueue.jobs.scope.HeldJob`) whose ``ack_ops`` these are: a batch of ends gives
    #: up the block leases it empties in its own multi (:func:`~zkqueue.jobs.scope.ack_tail`). None: no such tail.
    held: Any = None

    @property
    def job_id(self) -> str:
        return self.record.id




class StepCounts:
    """What one Flow instance did, per step (thread-safe): step jobs ``added`` (by :meth:`Flow.add` and by
    hand-offs that queued them), and step ends it committed: ``completed``, ``retried``, ``dead_lettered``."""

    KEYS = ("added", "completed", "retried", "dead_lettered")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[str, int]] = {}

    def count(self, step: str, key: str, n: int = 1) -> None:
        with self._lock:
            by_key = self._counts.setdefault(step, dict.fromkeys(self.KEYS, 0))
            by_key[key] += n

    def snapshot(self, steps: Any = ()) -> dict[str, dict[str, int]]:
        """{step: {key: n}} for ``steps`` (zeros if nothing counted) and every step counted."""
        with self._lock:
            out = {s: dict.fromkeys(self.KEYS, 0) for s in steps}
            out.update({s: dict(c) for s, c in self._counts.items()})
        return out


def step_errors(step: str, record: Record) -> tuple[StepError, ...]:
    return tuple(StepError(step, e.attempt, e.error, e.at_ms) for e in record.errors)


def ended(held: Any, outcome: str | BaseException, describe: Callable[[], str]) -> bool:
    """After the hand-off of ``held`` (a :class:`~zkqueue.jobs.scope.HeldJob`) came to ``outcome`` (:data:`OK`,
    :data:`LOST`, or the exception that kept it from committing): let the engine know, and say whether it committed.
    Committed: the item and the lease's nodes went in the hand-off's multi, nothing is left to send. Otherwise the
    job is given back (it runs again; an exception is logged, naming the job by ``describe()``). Flow steps and
    canvas nodes both end here."""
    if isinstance(outcome, BaseException):
        log.warning("%s could not hand off (%r): given back for a retry", describe(), outcome)
    elif outcome == OK:
        held.forget()
        return True
    held.release()  # the lease was lost, or nothing committed: the engine clears whatever of it is still ours
    return False


class Handoff:
    """Commits step ends for one flow."""

    def __init__(self, client: Any, paths: store.Paths, defn: Definition, step_paths: Callable[[str], Any],
                 acl: Any) -> None:
        self._client = client
        self._paths = paths
        self._defn = defn
        self._step_paths = step_paths  # step name -> jobs.store.Paths
        self._acl = acl
        self.skipped = 0  # step jobs dropped without a flow record to go with (counted, logged)
        self.races = 0  # hand-offs built again after another one changed the flow record first
        self.counts = StepCounts()
        #: Each hand-off's token (in its history entry: how a multi whose reply was lost is known to have committed);
        #: a counter behind a random prefix, so none costs a system call on the thread that commits the ends.
        self.tokens = TokenSource()

    def read(self, job_id: str) -> tuple[FlowRecord, int] | None:
        """The flow record of ``job_id`` and its version; None if it is gone or unreadable (logged, counted: its
        step jobs are then dropped instead of failing again and again)."""
        try:
            return store.read(self._client, self._paths, job_id)
        except CorruptItemError as exc:
            log.error("the flow record of %s is unreadable (%s): its step jobs are dropped", job_id, exc)
            return None

    # ------------------------------------------------------------------------------------------ building
    def _fence_ops(self, ref: StepRef) -> list[Any]:
        return [delete_op(self._step_paths(ref.step).record(ref.job_id), ref.version)]

    def _entry(self, ref: StepRef, status: str, token: str) -> HistoryEntry:
        return HistoryEntry(ref.step, status, ref.record.attempts, ref.record.updated_ms, model.now_ms(), token)

    def _build(self, ref: StepRef, ending: Ending | None, token: str, read: tuple[FlowRecord, int] | None,
               stale: bool = True, tally: dict[str, Any] | None = None) -> list[Any]:
        """The multi ending ``ref``: ``ending`` None drops it (its flow job failed or is gone). When the step's
        end goes into the flow record, ``tally`` gets what to count once it commits (see :meth:`_tally`)."""
        fence = self._fence_ops(ref)
        if read is None:
            return fence
        rec, version = read
        if store.run_of(ref.record) != rec.run:
            return fence  # a step job of an earlier run
        if ending is None or (rec.state is FlowState.RUNNING and rec.steps.get(ref.step) != model.QUEUED):
            if rec.state is FlowState.RUNNING and rec.steps.get(ref.step) == model.QUEUED:
                raise QueueStateError("a running flow job's step cannot be dropped")
            new = definition.cancelled(rec, self._entry(ref, model.CANCELLED, token))
            return fence + [store.write_op(self._paths, new, version, self._acl)]
        status = model.DONE if ending.ok else model.FAILED
        new, queue, cancel = definition.advance(self._defn, rec, ref.step, ending, self._entry(ref, status, token))
        ops = fence + [store.write_op(self._paths, new, version, self._acl)]
        ops += store.queue_ops(self._client, [self._step_paths(n) for n in queue], rec.id, rec.run, self._acl,
                               stale=stale, headers=ref.record.headers)  # the next steps carry its headers
        ops += store.cancel_ops(self._client, [self._step_paths(n) for n in cancel if n != ref.step], rec.id,
                                self._acl)
        if tally is not None:
            tally.update(step=ref.step, key="completed" if ending.ok else "dead_lettered", queued=queue)
        return ops

    def _tally(self, tally: dict[str, Any]) -> None:
        """Count a committed step end that :meth:`_build` described in ``tally`` (:class:`StepCounts`)."""
        if tally:
            self.counts.count(tally["step"], tally["key"])
            for name in tally["queued"]:
                self.counts.count(name, "added")

    # ------------------------------------------------------------------------------------------ committing
    def end(self, ref: StepRef, ending: Ending | None, read: Any = UNREAD, *, token: str | None = None,
            ambiguous: bool = False, raced: bool = False) -> str:
        """Commit the end of ``ref`` (``ending`` None: drop it), built first from ``read`` (what :meth:`read` gave
        the caller, if it asked). Returns :data:`OK` or :data:`LOST`; raises
        :class:`~zkqueue.errors.QueueStateError` when it could not (the caller gives the job back).

        :meth:`end_many` passes on a hand-off it could not commit in its batch: its ``token`` and whether the
        batch's reply was lost (``ambiguous``: the flow record tells whether it committed), or whether it lost a
        version race there (``raced``: the record is read again first)."""
        token = token or self.tokens.next()
        stale = raced  # the first try expects no leftover step records of an earlier run (a failure looks)
        if raced or ambiguous:
            read = UNREAD
        tally: dict[str, Any] = {}  # what the last multi built would count
        for attempt in range(MAX_TRIES):
            if attempt > 0 or read is UNREAD:
                read = self.read(ref.job_id)
            if ambiguous and read is not None and read[0].committed(token):
                self._tally(tally)
                return OK
            tally = {}
            ops = self._build(ref, ending, token, read, stale, tally)
            fence_len, lease_from = 1, len(ops)  # ops before fence_len or from lease_from on: our hold on the job
            if ref.ack_ops is not None:
                ops, first = ref.ack_ops(ops)
                fence_len, lease_from = fence_len + first, lease_from + first
            try:
                result = api.run_multi(self._client, ops)
            except CONNECTION_ERRORS as exc:
                log.warning("hand-off of %s/%s lost its reply (%r); checking", ref.step, ref.job_id, exc)
                ambiguous = True
                wait_connected(self._client, RECONNECT_WAIT)
                continue
            if result.ok:
                if read is None:
                    self.skipped += 1
                    log.warning("step %s of flow job %s has no flow record: dropped", ref.step, ref.job_id)
                self._tally(tally)
                return OK
            failed = result.failed_index
            if failed is not None and (failed < fence_len or failed >= lease_from):
                if ambiguous:
                    again = self.read(ref.job_id)
                    if again is not None and again[0].committed(token):
                        self._tally(tally)
                        return OK
                log.info("step %s of flow job %s is no longer ours (%r): nothing committed", ref.step, ref.job_id,
                         result.failure)
                return LOST
            # The flow record changed under us (a sibling's hand-off), or a next step's node did: read again.
            stale = True
            self.races += 1
            log.debug("hand-off of %s/%s raced (%r at op %s); again", ref.step, ref.job_id, result.failure, failed)
            time.sleep(RACE_BACKOFF.delay(attempt + 1))
        raise QueueStateError(f"hand-off of step {ref.step} of flow job {ref.job_id} kept racing; given back")

    def read_many(self, job_ids: list[str]) -> list[tuple[FlowRecord, int] | None]:
        """:meth:`read` of many flow records, in one multiRead (a subclass that reads its records elsewhere is
        read one by one through its own :meth:`read`)."""
        if not job_ids:
            return []
        pending = self.send_reads(job_ids)
        if pending is None:
            return [self.read(job_id) for job_id in job_ids]
        out: list[tuple[FlowRecord, int] | None] = []
        for job_id, read in zip(job_ids, pending()):
            if isinstance(read, CorruptItemError):
                log.error("the flow record of %s is unreadable (%s): its step jobs are dropped", job_id, read)
            out.append(None if isinstance(read, BaseException) else read)
        return out

    def send_reads(self, job_ids: list[str]) -> Callable[[], list[tuple[FlowRecord, int] | None | BaseException]] | None:
        """Send the reads of the flow records of ``job_ids`` in one multiRead without waiting; the returned call
        waits for them: per job its ``(record, version)``, None when it has none, or the error of its read
        (:class:`~zkqueue.errors.CorruptItemError` for an unreadable record). A connection error of the whole
        multiRead is raised by the call. None when a subclass reads its records elsewhere (see :meth:`read`)."""
        if type(self).read is not Handoff.read:
            return None
        sent = api.send_multi_read(self._client, [self._paths.flow(job_id) for job_id in job_ids])

        def result() -> list[tuple[FlowRecord, int] | None | BaseException]:
            out: list[tuple[FlowRecord, int] | None | BaseException] = []
            for reply in sent.result():
                if isinstance(reply, NoNodeError):
                    out.append(None)
                elif isinstance(reply, BaseException):
                    out.append(reply)
                else:
                    try:
                        out.append((FlowRecord.decode(reply[0]), reply[1].version))
                    except CorruptItemError as exc:
                        out.append(exc)
            return out

        return result

    def end_many(self, items: list[tuple[StepRef, Ending | None, Any]]) -> list[str | Exception]:
        """:meth:`end` of many step jobs (``(ref, ending, read)`` each), many hand-offs per multi: the groups
        (each one step's fenced ack with its flow record's update and next steps' jobs) are packed into as few
        multis as fit, sent pipelined; a multi that fails is split: the group whose op failed (a version race, a
        lost lease) is ended alone by :meth:`end` (read again, built again), the others are sent again. Two ends
        of one flow record never share a batch (the later goes alone after it): each sees the other's update, so a
        fan-in queues its join exactly once. Per item :data:`OK`, :data:`LOST`, or the exception :meth:`end`
        would raise."""
        out: list[str | Exception | None] = [None] * len(items)
        alone: list[tuple[int, dict[str, Any]]] = []  # (item, end() keywords): after the batch, one by one
        unread = [i for i, (ref, _e, read) in enumerate(items) if read is UNREAD and ref.ack_ops is not None]
        reads = dict(zip(unread, self.read_many([items[i][0].job_id for i in unread]))) if unread else {}
        groups: list[tuple[int, str, list[Any], int, dict[str, Any], bool]] = []  # item, token, ops, fence, tally
        records: set[Any] = set()
        for i, (ref, ending, read) in enumerate(items):
            read = reads.get(i, read)
            key = read[0].id if isinstance(read, tuple) else ref.job_id
            if ref.ack_ops is None or read is UNREAD or key in records:
                alone.append((i, {}))
                continue
            records.add(key)
            token, tally = self.tokens.next(), {}
            try:
                ops = self._build(ref, ending, token, read, False, tally)
                ops, first = ref.ack_ops(ops)
            except Exception as exc:  # noqa: BLE001 - given back by the caller, as end() raising
                out[i] = exc
                continue
            groups.append((i, token, ops, 1 + first, tally, read is None))
        pending = list(range(len(groups)))
        while pending:
            chunks = [[pending[k] for k in chunk] for chunk in packing.pack([groups[g][2] for g in pending])]
            sent = []
            for chunk in chunks:
                ops, owners = packing.merge([groups[g][2] for g in chunk])
                tail = self._tail([items[groups[g][0]][0] for g in chunk], len(ops))
                if tail is not None:
                    ops += tail.ops
                try:
                    sent.append((chunk, owners, tail, api.send_multi(self._client, ops)))
                except CONNECTION_ERRORS:
                    sent.append((chunk, owners, None, None))
            pending = []
            for chunk, owners, tail, reply in sent:
                try:
                    result = reply.result() if reply is not None else None
                except CONNECTION_ERRORS as exc:
                    log.warning("a batch of %d hand-off(s) lost its reply (%r); checking each", len(chunk), exc)
                    result = None
                if result is None:  # committed or not: each one's flow record says (its token)
                    if tail is not None:
                        tail.unsure()
                    alone.extend((groups[g][0], {"token": groups[g][1], "ambiguous": True}) for g in chunk)
                    continue
                if result.ok:
                    if tail is not None:
                        tail.committed()
                    for g in chunk:
                        i, _token, _ops, _fence, tally, unrecorded = groups[g]
                        if unrecorded:
                            self.skipped += 1
                            log.warning("step %s of flow job %s has no flow record: dropped", items[i][0].step,
                                        items[i][0].job_id)
                        self._tally(tally)
                        out[i] = OK
                    continue
                failed = result.failed_index
                found = owners[failed] if failed is not None and 0 <= failed < len(owners) else None
                if found is None:  # no op named (or one of the tail's): each goes alone
                    alone.extend((groups[g][0], {"raced": True}) for g in chunk)
                    continue
                owner = chunk[found[0]]
                self.races += 1
                alone.append((groups[owner][0], {"raced": True}))
                pending.extend(g for g in chunk if g != owner)
            pending.sort()
        if any(k.get("ambiguous") for _i, k in alone):
            wait_connected(self._client, RECONNECT_WAIT)
        for i, keywords in sorted(alone):
            ref, ending, read = items[i]
            try:
                out[i] = self.end(ref, ending, reads.get(i, read), **keywords)
            except Exception as exc:  # noqa: BLE001 - per item, as end() raises it
                out[i] = exc
        return [o if o is not None else QueueStateError("not ended") for o in out]

    @staticmethod
    def _tail(refs: list[StepRef], op_count: int) -> Any:
        """The block releases a multi of ``op_count`` ops ending ``refs`` can carry (None: none, or no room)."""
        helds = [ref.held for ref in refs if ref.held is not None]
        if not helds:
            return None
        tail = scope.ack_tail(helds)
        if not tail.ops or op_count + len(tail.ops) > api.MAX_MULTI_OPS or sum(
                api.op_cost(op) for op in tail.ops) > api.MULTI_SLACK // 2:
            return None
        return tail

    # ------------------------------------------------------------------------------------------ claim seam
    def exhausted(self, step: str) -> Callable[[Record, int], Completion | None]:
        """The job layer's ``on_exhausted`` for ``step``: a step job whose workers kept dying is dead; its death
        commits with the claim (the engine acks the item in the same fenced multi)."""

        def on_exhausted(record: Record, version: int) -> Completion | None:
            errors = record.failed("worker lost: attempts exhausted without an outcome", "")
            dead = replace(record, errors=errors)
            ref = StepRef(step, dead, version)
            log.warning("step %s of flow job %s used all %d attempts (its workers were lost): it is dead", step,
                        record.id, record.attempts)
            read = self.read(record.id)
            ending = Ending(ok=False, errors=step_errors(step, dead)[-1:])
            tally: dict[str, Any] = {}
            ops = self._build(ref, ending, self.tokens.next(), read, tally=tally)
            self._tally(tally)  # decided here; it commits with the claim
            return Completion.ack(extra_ops=ops)

        return on_exhausted
