"""A canvas's record and its hand-offs: the flows' hand-off (:class:`~zkqueue.flows.handoff.Handoff`) with a
canvas's own steps.

A canvas is a flow record at ``/<namespace>/canvases/flows/<id>`` (:mod:`zkqueue.flows.store`'s layout, so
``zkqueue flows get /<namespace>/canvases <id>`` shows it): its ``steps`` hold each node's status, its ``results``
each node's result, its ``params`` a summary; the graph (:mod:`zkqueue.flows.canvas_graph`) is written once beside
it (``graphs/<id>``), so a hand-off rewrites only the record. Each node runs as a job of its task's queue, whose id
is ``<canvas id>.<node>`` and whose header :data:`HEADER` names the canvas and the node; the task worker ends such
a job by :meth:`CanvasHandoff.end`, in ONE fenced multi: the job's item and record go, the canvas record takes its
result (version-checked: members that end together serialize on it; those of one process share one multi), and the
next nodes' jobs are created, their params built from the results (a chain's next call gets the result, a chord's
body the list of its members' results). So a chord body is queued exactly once, by the end of the last member; a
canvas with nothing queued is over. The multi that fails a canvas (or cancels it) also creates ``over/<id>``: a
worker looks for it before it runs a job of the canvas.

:class:`CanvasHandoff` overrides the seams of :class:`Handoff` that differ: :meth:`read` (a node's job id names
its canvas), :meth:`_build` (the graph is per canvas; next jobs go to their tasks' queues), :meth:`end` (the ends
of one canvas batched), and adds :meth:`exhausted_node` (a node whose workers kept dying is dead; its death commits
with the claim).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from zkqueue.engine import api
from zkqueue.engine.api import CONNECTION_ERRORS, Completion, create_op, delete_op, held_items, removal_ops, wait_connected
from zkqueue.errors import ConfigurationError, CorruptItemError, QueueStateError
from zkqueue.flows import definition, model, store
from zkqueue.flows.canvas_graph import HEADER, Graph, Node, canvas_of_job, error_value, node_job_id
from zkqueue.flows.definition import Definition, Ending
from zkqueue.flows.handoff import LOST, MAX_TRIES, OK, RACE_BACKOFF, RECONNECT_WAIT, UNREAD, Handoff, StepRef, step_errors
from zkqueue.flows.model import FlowRecord, FlowState
from zkqueue.jobs import hooks, names
from zkqueue.jobs import store as job_store
from zkqueue.jobs.model import JobState, Record, check_headers
from zkqueue.jobs.reaper import Keep

if TYPE_CHECKING:  # pragma: no cover
    from zkqueue.tasks.app import App

log = logging.getLogger("zkqueue.flows.canvas_handoff")

#: The most bytes of one multi of a canvas's add or sweep (ZooKeeper refuses packets over 1 MiB).
MULTI_BUDGET = 900_000
#: Graphs (and their definitions) kept decoded per process, by canvas id.
GRAPH_CACHE = 256
#: Node ends of one canvas committed in one multi at most.
MAX_BATCH = 64
#: Jobs removed per multi when a failed or cancelled canvas's waiting jobs are swept.
SWEEP_CHUNK = 200


def commit(client: Any, ops: list[Any]) -> Any:
    """Send one multi of a canvas's add or cancel (a seam: fault tests make its reply get lost)."""
    return api.run_multi(client, ops)


@dataclass(frozen=True)
class CanvasRef(StepRef):
    """A node's job being ended: :class:`StepRef` (``step`` is the node's name) and the ``queue`` (its name) the job
    is in."""

    queue: str = ""


class _Slot:
    """One end waiting to be committed in a batch (see :meth:`CanvasHandoff.end`)."""

    __slots__ = ("done", "ending", "error", "lead", "outcome", "ref")

    def __init__(self, ref: StepRef, ending: Ending | None) -> None:
        self.ref = ref
        self.ending = ending
        self.done = threading.Event()
        self.lead = False  # woken to lead the next batch
        self.outcome: str | None = None
        self.error: BaseException | None = None

    def finish_with(self, end: Any) -> None:
        try:
            self.outcome = end(self.ref, self.ending)
        except Exception as exc:  # noqa: BLE001 - given back by its caller
            self.error = exc

    def result(self) -> str:
        if self.error is not None:
            raise self.error
        assert self.outcome is not None
        return self.outcome


class CanvasHandoff(Handoff):
    """Adds, ends, cancels and sweeps the canvases of one app (see the module docs)."""

    def __init__(self, app: App) -> None:
        self.app = app
        super().__init__(app.client, store.Paths(app.canvases_path), Definition(), self._queue_paths, None)
        self._graphs: OrderedDict[str, tuple[int, Graph, Definition]] = OrderedDict()
        self._graph_lock = threading.Lock()
        # The ends of one canvas in this process commit together: one ender at a time per canvas takes every end
        # waiting for it into one multi (one write of the canvas record), from the record it last wrote.
        self._waiting: dict[str, list[_Slot]] = {}
        self._last: OrderedDict[str, tuple[FlowRecord, int]] = OrderedDict()
        self._ensured = False
        self._over: set[str] | None = None  # the ids of the canvases that failed or were cancelled (a watch)

    def _queue_paths(self, queue: str) -> job_store.Paths:
        """The layout of the job queue named ``queue`` (no queue is started for it: adds go through
        :meth:`job_ops`, which starts it)."""
        return job_store.Paths(self.app.queue_path(queue))

    def ensure(self) -> None:
        if not self._ensured:
            for path in (self._paths.flows, self._paths.steps, self._paths.limits, f"{self._paths.root}/graphs",
                         f"{self._paths.root}/over"):  # a flow's layout: tools (dashboard, flows CLI) read it as one
                self._client.ensure_path(path)
            self._ensured = True

    # ------------------------------------------------------------------------------------------ reading
    def read(self, job_id: str) -> tuple[FlowRecord, int] | None:
        """The canvas record of a node's job ``job_id`` (the seam :meth:`Handoff.end` reads through)."""
        return super().read(canvas_of_job(job_id))

    def read_canvas(self, canvas_id: str, *, synced: bool = False) -> tuple[FlowRecord, int] | None:
        if synced:
            self._client.sync(self._paths.flow(canvas_id))
        return super().read(canvas_id)

    def graph_path(self, canvas_id: str) -> str:
        """The canvas's graph: written once by its add, never changed (so hand-offs rewrite only the record)."""
        return f"{self._paths.root}/graphs/{names.node_id(canvas_id)}"

    def over_path(self, canvas_id: str) -> str:
        """A marker created in the multi that fails or cancels the canvas: what a worker looks at (a tiny
        ``exists``) before it runs one of the canvas's jobs."""
        return f"{self._paths.root}/over/{names.node_id(canvas_id)}"

    def is_over(self, canvas_id: str) -> bool:
        """Whether the canvas failed or was cancelled, as this process last heard: one watch of the markers'
        parent per process (no request per job); a job started just before the news came runs, and its hand-off
        records it without queueing anything."""
        if self._over is None:
            with self._graph_lock:
                if self._over is None:
                    self.ensure()
                    self._over = set()

                    def on_children(children: list[str]) -> None:
                        self._over = {names.job_id_of(c) for c in children}

                    ChildrenWatch(self._client, f"{self._paths.root}/over", on_children)
        return canvas_id in self._over

    def graph(self, rec: FlowRecord | str) -> tuple[Graph, Definition]:
        """The graph of a canvas (by its record or id), read once per process (a canvas id is never used again)."""
        canvas_id = rec if isinstance(rec, str) else rec.id
        with self._graph_lock:
            hit = self._graphs.get(canvas_id)
            if hit is not None:
                self._graphs.move_to_end(canvas_id)
                return hit[1], hit[2]
        data, _stat = self._client.get(self.graph_path(canvas_id))
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise CorruptItemError(f"the graph of canvas {canvas_id} is unreadable: {exc}") from exc
        graph = Graph.decode(doc)
        defn = graph.definition()
        with self._graph_lock:
            self._graphs[canvas_id] = (0, graph, defn)
            while len(self._graphs) > GRAPH_CACHE:
                self._graphs.popitem(last=False)
        return graph, defn

    # ------------------------------------------------------------------------------------------ jobs
    def job_record(self, canvas_id: str, node: Node, results: dict[str, Any] | None,
                   headers: dict[str, Any] | None) -> Record:
        """The job record of ``node`` (its params from ``results`` unless it is a root)."""
        params = bytes(self.app.serializer.serialize(node.params(results)))
        stored = check_headers({**(headers or {}), HEADER: [canvas_id, node.name]})
        return Record(id=node_job_id(canvas_id, node.name), state=JobState.QUEUED, params=params, task=node.task,
                      max_attempts=node.max_attempts, timeout=node.timeout, headers=stored)

    def job_ops(self, record: Record, queue: str) -> list[Any]:
        jq = self.app.queue(queue)
        return job_store.add_ops(jq.paths, record, [], None, jq.new_item_prefix(record))

    # ------------------------------------------------------------------------------------------ the hand-off
    def end(self, ref: StepRef, ending: Ending | None, read: Any = UNREAD, **_options: Any) -> str:
        """Commit the end of node ``ref`` (``ending`` None drops it): :data:`OK` or :data:`LOST`, or raises
        :class:`~zkqueue.errors.QueueStateError` (the caller gives the job back). Ends of one canvas that come while
        another commits are committed together, in one multi: each node's fenced ack, ONE version-checked write
        of the canvas record (the ends applied in turn, as :func:`~zkqueue.flows.definition.advance` applies one)
        and the next nodes' jobs. A node whose lease was lost is taken out of the batch (:data:`LOST`); a lost reply
        is answered by the record (the batch's token in its history)."""
        slot = _Slot(ref, ending)
        self._settle(canvas_of_job(ref.job_id), [slot])
        return slot.result()

    def end_many(self, items: list[tuple[StepRef, Ending | None, Any]]) -> list[str | Exception]:
        """:meth:`end` of many nodes' ends (``(ref, ending, read)`` each; ``read`` is not used): the ends of one
        canvas join its next batch together (up to :data:`MAX_BATCH` per multi), canvas after canvas. Per item
        :data:`OK`, :data:`LOST`, or the exception :meth:`end` would raise."""
        slots = [_Slot(ref, ending) for ref, ending, _read in items]
        by_canvas: dict[str, list[_Slot]] = {}
        for slot in slots:
            by_canvas.setdefault(canvas_of_job(slot.ref.job_id), []).append(slot)
        for canvas_id, mine in by_canvas.items():
            try:
                self._settle(canvas_id, mine)
            except Exception:  # noqa: BLE001 - its ends carry the error (given back by the caller); the rest go on
                log.warning("ending %d node(s) of canvas %s failed", len(mine), canvas_id, exc_info=True)
        out: list[str | Exception] = []
        for slot in slots:
            try:
                out.append(slot.result())
            except Exception as exc:  # noqa: BLE001 - per item, as end() raises it
                out.append(exc)
        return out

    def _settle(self, canvas_id: str, mine: list[_Slot]) -> None:
        """Queue ``mine`` (ends of canvas ``canvas_id``) for the canvas's next batches and return once each is
        settled (its outcome or error set). One caller at a time commits a canvas's batches (the leader: the first
        caller with nothing under way, or the one the last leader handed the lead to, through one of its ends)."""
        with self._graph_lock:
            queue = self._waiting.get(canvas_id)
            lead = queue is None
            if lead:
                queue = self._waiting[canvas_id] = []
            queue.extend(mine)
        if not lead:
            for slot in mine:  # settled in order (batches are taken from the head), unless handed the lead
                slot.done.wait()
                if slot.lead:
                    lead = True
                    break
            if not lead:
                return
        try:
            while any(sl.outcome is None and sl.error is None for sl in mine):  # commit what waits, ours first
                with self._graph_lock:
                    batch = self._waiting[canvas_id][:MAX_BATCH]
                    del self._waiting[canvas_id][:MAX_BATCH]
                try:
                    self._commit_batch(canvas_id, batch)
                except BaseException as exc:  # e.g. an exit: no end of the batch may wait for ever
                    for other in batch:
                        if other.outcome is None and other.error is None:
                            other.error = exc if isinstance(exc, Exception) else QueueStateError(repr(exc))
                    raise
                finally:
                    for other in batch:
                        other.done.set()
        finally:  # pass the lead on to the first end still waiting (not one of ours: an exit leaves them unended)
            with self._graph_lock:
                left = self._waiting[canvas_id]
                unended = {id(sl) for sl in mine if sl.outcome is None and sl.error is None}
                if unended:
                    left[:] = [sl for sl in left if id(sl) not in unended]
                    for sl in mine:
                        if id(sl) in unended:
                            sl.error = QueueStateError(f"the end of node {sl.ref.step} of canvas {canvas_id} was "
                                                       "not committed")
                if left:
                    left[0].lead = True
                    left[0].done.set()
                else:
                    del self._waiting[canvas_id]

    def _commit_batch(self, canvas_id: str, batch: list[_Slot]) -> None:
        token = self.tokens.next()
        ambiguous = False
        with self._graph_lock:
            read: Any = self._last.pop(canvas_id, UNREAD)
        for attempt in range(MAX_TRIES):
            live = [sl for sl in batch if sl.outcome is None and sl.error is None]
            if not live:
                return
            if read is UNREAD:
                try:
                    read = self.read_canvas(canvas_id, synced=ambiguous)
                except CONNECTION_ERRORS as exc:
                    log.warning("reading canvas %s for a hand-off failed (%r); again", canvas_id, exc)
                    wait_connected(self._client, RECONNECT_WAIT)
                    continue
            if ambiguous and read is not None and read[0].committed(token):
                for sl in live:
                    sl.outcome = OK
                return
            if read is None:  # the canvas is gone: each job is dropped by its fence alone
                for sl in live:
                    sl.finish_with(self._alone)
                return
            try:
                new, groups = self._batch_ops(read, live, token)
            except Exception as exc:  # noqa: BLE001 - each job is given back by its caller
                for sl in live:
                    sl.error = exc
                return
            ops = [op for g in groups for op in g[0]] + [store.write_op(self._paths, new, read[1], None)]
            try:
                result = api.run_multi(self._client, ops)
            except CONNECTION_ERRORS as exc:
                log.warning("hand-off of %d node(s) of canvas %s lost its reply (%r); checking", len(live),
                            canvas_id, exc)
                ambiguous = True
                read = UNREAD
                wait_connected(self._client, RECONNECT_WAIT)
                continue
            if result.ok:
                for sl in live:
                    sl.outcome = OK
                with self._graph_lock:
                    self._last[canvas_id] = (new, read[1] + 1)
                    while len(self._last) > GRAPH_CACHE:
                        self._last.popitem(last=False)
                return
            failed = result.failed_index
            at = 0
            for sl, (g_ops, fence_len, lease_from) in zip(live, groups):
                if failed is not None and at <= failed < at + len(g_ops):
                    rel = failed - at
                    if rel < fence_len or rel >= lease_from:  # its lease is lost (or its job was dropped)
                        if ambiguous:  # (a lost connection here raises: the jobs are given back)
                            again = self.read_canvas(canvas_id, synced=True)
                            if again is not None and again[0].committed(token):
                                for other in live:
                                    other.outcome = OK
                                return
                        log.info("node %s of canvas %s is no longer ours (%r): nothing committed", sl.ref.step,
                                 canvas_id, result.failure)
                        sl.outcome = LOST
                    break
                at += len(g_ops)
            else:  # the canvas record changed under us (another process's hand-off): read it again
                self.races += 1
                time.sleep(RACE_BACKOFF.delay(attempt + 1))
            read = UNREAD
        for sl in batch:
            if sl.outcome is None and sl.error is None:
                sl.error = QueueStateError(f"hand-off of node {sl.ref.step} of canvas {canvas_id} kept racing; "
                                           f"given back")

    def _alone(self, ref: StepRef, ending: Ending | None) -> str:
        return Handoff.end(self, ref, ending, None)

    def _batch_ops(self, read: tuple[FlowRecord, int], live: list[_Slot], token: str
                   ) -> tuple[FlowRecord, list[tuple[list[Any], int, int]]]:
        """The canvas record after every end of ``live`` (applied in turn) and, per end, its fenced ack's ops with
        the next nodes' jobs, how many of its first ops are its fence, and from which op on its ops are its lease's
        (a failure there or in the fence: the job is no longer ours)."""
        rec = read[0]
        groups = []
        for sl in live:
            rec, extra = self._apply(rec, sl.ref, sl.ending, token)
            ops, first = sl.ref.ack_ops(extra) if sl.ref.ack_ops is not None else (extra, 0)
            groups.append((ops, first + 1, first + len(extra)))
        return rec, groups

    def _apply(self, rec: FlowRecord, ref: StepRef, ending: Ending | None, token: str
               ) -> tuple[FlowRecord, list[Any]]:
        """The canvas record after node ``ref.step`` ended, and the ops of that end but the record's write: the
        job's fence (its record deleted, version-checked) and the next nodes' jobs."""
        assert isinstance(ref, CanvasRef)
        ops = [delete_op(self._queue_paths(ref.queue).record(ref.job_id), ref.version)]
        node = ref.step
        graph, defn = self.graph(rec)
        if ending is None or (rec.state is FlowState.RUNNING and rec.steps.get(node) != model.QUEUED):
            if rec.state is FlowState.RUNNING and rec.steps.get(node) == model.QUEUED:
                raise QueueStateError("a running canvas's node cannot be dropped")
            return definition.cancelled(rec, self._entry(ref, model.CANCELLED, token)), ops
        status = model.DONE if ending.ok else model.FAILED
        new, queue, _cancel = definition.advance(defn, rec, node, ending, self._entry(ref, status, token))
        if not ending.ok:  # what a continuing canvas feeds on: the error as a value
            last = ending.errors[-1].error if ending.errors else "failed"
            new = replace(new, results={**new.results, node: error_value(graph.nodes[node].task, last)})
        if rec.state is FlowState.RUNNING and new.state is FlowState.FAILED:
            ops.append(create_op(self.over_path(rec.id), b""))
        headers = {k: v for k, v in (ref.record.headers or {}).items() if k != HEADER}  # the trace context goes on
        for name in queue:
            n = graph.nodes[name]
            ops += self.job_ops(self.job_record(rec.id, n, new.results, headers), n.queue)
        # The queued jobs of a canvas that failed here are swept after the commit (sweep): a job claimed
        # meanwhile is dropped unrun, so the hand-off never races the claims of hundreds of members.
        return new, ops

    def _build(self, ref: StepRef, ending: Ending | None, token: str, read: tuple[FlowRecord, int] | None,
               stale: bool = True, tally: dict[str, Any] | None = None) -> list[Any]:
        """The multi ending node ``ref.step`` alone (the seam :meth:`Handoff.end` builds through; ``tally`` is left
        empty: nodes are not counted per name)."""
        assert isinstance(ref, CanvasRef)
        if read is None:  # the canvas record is gone: the job is dropped
            return [delete_op(self._queue_paths(ref.queue).record(ref.job_id), ref.version)]
        new, ops = self._apply(read[0], ref, ending, token)
        return ops[:1] + [store.write_op(self._paths, new, read[1], None)] + ops[1:]

    def exhausted_node(self, queue: str, record: Record, version: int) -> Completion | None:
        """The job layer's ``on_exhausted`` for canvas jobs: a node whose workers kept dying is dead; its death
        goes into the canvas record in the claim's fenced multi. None for a job of no canvas (the default)."""
        where = (record.headers or {}).get(HEADER)
        if not where:
            return None
        errors = record.failed("worker lost: attempts exhausted without an outcome", "")
        dead = replace(record, errors=errors)
        ref = CanvasRef(str(where[1]), dead, version, None, queue=queue)
        log.warning("node %s of canvas %s used all %d attempts (its workers were lost): it is dead", where[1],
                    where[0], record.attempts)
        ending = Ending(ok=False, errors=step_errors(ref.step, dead)[-1:])
        return Completion.ack(extra_ops=self._build(ref, ending, self.tokens.next(), self.read(record.id)))

    # ------------------------------------------------------------------------------------------ adding
    def add(self, graph: Graph, canvas_id: str) -> bool:
        """Add a canvas: its record and its roots' jobs, in one multi, or several committed in order when they do
        not fit one (the record goes in the first). False if a canvas with that id is running."""
        self.ensure()
        names.node_id(canvas_id)
        roots = graph.roots
        ids = [node_job_id(canvas_id, n.name) for n in roots]
        if hooks.installed is not None:  # zkqueue.otel: a trace context in the headers of every node's job
            return hooks.installed.adding(  # type: ignore[no-any-return]
                self._paths.root, ids, None, lambda stored: self._add(graph, canvas_id, roots, stored))
        return self._add(graph, canvas_id, roots, None)

    def _add(self, graph: Graph, canvas_id: str, roots: list[Node], headers: dict[str, Any] | None) -> bool:
        token = uuid.uuid4().hex
        summary = {"canvas": graph.kind, "nodes": len(graph.nodes), "on_failure": graph.on_failure,
                   "graph": self.graph_path(canvas_id)}
        rec = FlowRecord(canvas_id, FlowState.RUNNING, summary, steps={n.name: model.QUEUED for n in roots},
                         add_token=token)
        graph_op = create_op(self.graph_path(canvas_id), json.dumps(graph.encode(), separators=(",", ":")).encode())
        jobs = [(n, self.job_record(canvas_id, n, None, headers)) for n in roots]
        chunks: list[list[Any]] = [[]]
        size = 0
        first = store.write_op(self._paths, rec, None, None)
        chunks[0] += [first, graph_op]
        size = api.op_cost(first) + api.op_cost(graph_op)
        if size > MULTI_BUDGET:
            raise ConfigurationError(f"canvas {canvas_id}: its graph takes {size} bytes, more than one ZooKeeper "
                                     f"request may ({MULTI_BUDGET}): pass large arguments to its first tasks")
        firsts: list[Node | None] = [None]  # the first node of each chunk (how a lost reply is answered)
        for node, record in jobs:
            ops = self.job_ops(record, node.queue)
            cost = sum(api.op_cost(op) for op in ops)
            if size + cost > MULTI_BUDGET and chunks[-1]:
                chunks.append([])
                firsts.append(node)
                size = 0
            chunks[-1].extend(ops)
            size += cost
        for i, (ops, node) in enumerate(zip(chunks, firsts)):
            if not self._commit_chunk(canvas_id, i, ops, node, token):
                return False
        if len(chunks) > 1:
            log.info("canvas %s added in %d multis (%d root jobs)", canvas_id, len(chunks), len(jobs))
        return True

    def _commit_chunk(self, canvas_id: str, index: int, ops: list[Any], node: Node | None, token: str) -> bool:
        lost = False
        for _attempt in range(20):
            if lost:
                if self._chunk_committed(canvas_id, index, node, token):
                    return True
            try:
                result = commit(self._client, ops)
            except CONNECTION_ERRORS as exc:
                log.warning("adding canvas %s (multi %d) lost its connection (%r); checking", canvas_id, index, exc)
                lost = True
                wait_connected(self._client, RECONNECT_WAIT)
                continue
            if result.ok:
                return True
            if lost and self._chunk_committed(canvas_id, index, node, token):
                return True
            if index == 0 and result.failed_index == 0:
                read = self.read_canvas(canvas_id, synced=True)
                if read is not None and read[0].state is FlowState.RUNNING:
                    return False  # a running canvas holds the id
                if read is not None:
                    raise ConfigurationError(f"canvas id {canvas_id!r} was used already (by a finished canvas)")
                continue
            raise QueueStateError(f"adding canvas {canvas_id} failed (multi {index}): {result.failure!r}")
        raise QueueStateError(f"adding canvas {canvas_id} kept failing")

    def _chunk_committed(self, canvas_id: str, index: int, node: Node | None, token: str) -> bool:
        """After a lost reply: whether multi ``index`` of our add committed (the record with our token; a root's
        job, or its status past queued). The job is looked for BEFORE the canvas record is read: its end deletes
        the job and moves the status past queued in one multi, so a job missing first and a status still queued
        after mean the multi did not commit (read the other way round, a job that ran in between looked never
        added, and was added again)."""
        job = None
        if index > 0 and node is not None:
            job = self._client.exists(self._queue_paths(node.queue).record(node_job_id(canvas_id, node.name)))
        read = self.read_canvas(canvas_id, synced=True)
        if read is None or read[0].add_token != token:
            return False
        if index == 0 or node is None or job is not None:
            return True
        return read[0].steps.get(node.name) != model.QUEUED  # it ran (or was dropped) already

    # ------------------------------------------------------------------------------------------ keeping
    def reap(self, keep: Keep | None = None) -> int:
        """Delete the finished canvases beyond ``keep`` (default: the job layer's ``Keep()``; the oldest first,
        running ones never): their records (:func:`zkqueue.flows.store.reap`), then their graphs and markers.
        Returns how many records went. ``zkqueue worker`` runs it every minute."""
        deleted = store.reap(self._client, self._paths, keep or Keep())
        if deleted:
            kept = set(self._client.get_children(self._paths.flows))
            for parent in (f"{self._paths.root}/graphs", f"{self._paths.root}/over"):
                for path in _orphans(self._client, parent, kept):
                    try:
                        self._client.delete(path)
                    except NoNodeError:
                        pass
            log.info("reaped %d finished canvas(es) of %s", deleted, self._paths.root)
        return deleted

    # ------------------------------------------------------------------------------------------ cancelling
    def cancel(self, canvas_id: str) -> bool:
        """Cancel a running canvas: it ends CANCELLED (its queued nodes too) in one version-checked write; then its
        waiting jobs are removed (:meth:`sweep`; one claimed meanwhile is dropped unrun). A node running now
        finishes (its result is recorded) but queues nothing. True if it was running."""
        lost = False
        for _attempt in range(20):
            read = self.read_canvas(canvas_id, synced=lost)
            if read is not None and lost and read[0].state is FlowState.CANCELLED:
                self.sweep(canvas_id)
                return True
            if read is None or read[0].state.finished:
                return False
            rec, version = read
            steps = {n: model.CANCELLED if s == model.QUEUED else s for n, s in rec.steps.items()}
            try:
                result = commit(self._client, [store.write_op(self._paths, rec.changed(
                    state=FlowState.CANCELLED, steps=steps), version, None), create_op(self.over_path(canvas_id), b"")])
            except CONNECTION_ERRORS as exc:
                log.warning("cancelling canvas %s lost its connection (%r); checking", canvas_id, exc)
                lost = True
                wait_connected(self._client, RECONNECT_WAIT)
                continue
            if result.ok:
                log.info("canvas %s cancelled", canvas_id)
                self.sweep(canvas_id)
                return True
        raise QueueStateError(f"cancelling canvas {canvas_id} kept racing")

    def sweep(self, canvas_id: str) -> int:
        """Remove the waiting jobs of the nodes a finished canvas dropped (cancelled); how many. Best effort: a job
        claimed meanwhile (or left by a failed sweep) is dropped unrun when it comes up."""
        try:
            return self._sweep(canvas_id)
        except Exception:  # noqa: BLE001 - what is left is dropped when claimed
            log.warning("sweeping the waiting jobs of canvas %s failed; they are dropped when claimed", canvas_id,
                        exc_info=True)
            return 0

    def _sweep(self, canvas_id: str) -> int:
        read = self.read_canvas(canvas_id)
        if read is None or not read[0].state.finished:
            return 0
        rec = read[0]
        graph, _defn = self.graph(rec)
        by_queue: dict[str, list[str]] = defaultdict(list)
        for name, status in rec.steps.items():
            if status == model.CANCELLED and name in graph.nodes:
                by_queue[graph.nodes[name].queue].append(node_job_id(canvas_id, name))
        removed = 0
        for queue, job_ids in by_queue.items():
            paths = self._queue_paths(queue)
            wanted = set(job_ids)
            items: dict[str, list[str]] = defaultdict(list)
            for item in self._client.get_children(paths.queue):
                parsed = names.parse_item(item)
                if parsed is not None and parsed.job_id in wanted:
                    items[parsed.job_id].append(item)
            if not items:
                continue
            held = held_items([i for its in items.values() for i in its], self._client.get_children(paths.locks),
                              paths.queue)
            ids = sorted(items)
            found = api.multi_read(self._client, [paths.record(j) for j in ids])
            ops: list[Any] = []
            count = 0
            for job_id, res in zip(ids, found):
                free = [i for i in items[job_id] if i not in held]
                if isinstance(res, BaseException) or not free:
                    continue
                for item in free:
                    ops += removal_ops(paths.queue, paths.locks, item, curator_names=False)
                ops.append(delete_op(paths.record(job_id), res[1].version))
                count += 1
                if count >= SWEEP_CHUNK:
                    removed += self._sweep_commit(ops, count)
                    ops, count = [], 0
            if ops:
                removed += self._sweep_commit(ops, count)
        if removed:
            log.info("canvas %s: %d waiting job(s) removed", canvas_id, removed)
        return removed

    def _sweep_commit(self, ops: list[Any], count: int) -> int:
        result = commit(self._client, ops)
        if result.ok:
            return count
        log.debug("a sweep multi failed (%r): a job was claimed meanwhile; it is dropped when it runs",
                  result.failure)
        return 0


def _orphans(client: Any, parent: str, kept: set[str]) -> list[str]:
    try:
        return [f"{parent}/{n}" for n in client.get_children(parent) if n not in kept]
    except NoNodeError:
        return []


def cancel_at(client: Any, path: str, canvas_id: str) -> bool | None:
    """For tools that cancel a flow job by the flow's path (``zkqueue flows cancel``, the dashboard): when ``path``
    is an app's canvases (``/<namespace>/canvases``) and ``canvas_id`` a canvas there, cancel it as
    :meth:`CanvasHandoff.cancel` does (its marker, its waiting jobs swept) and say whether it was running; None
    when it is no canvas (the caller cancels a flow job)."""
    from zkqueue.tasks.app import App  # noqa: PLC0415

    if not path.endswith("/canvases") or len(path) <= len("/canvases") + 1:
        return None
    if client.exists(f"{path}/graphs/{names.node_id(canvas_id)}") is None:
        return None
    app = App(client=client, namespace=path[1:-len("/canvases")])
    try:
        return app.canvases().cancel(canvas_id)
    finally:
        app.close()


def describe(client: Any, job: Any) -> dict[str, Any] | None:
    """What tools show of a canvas (``zkqueue flows get``, the dashboard's flow job page): its kind, ``on_failure``,
    result spec and nodes (task, queue, status, edges); None when the flow job ``job`` is no canvas."""
    params = job.params
    if not (isinstance(params, dict) and "canvas" in params and isinstance(params.get("graph"), str)):
        return None
    try:
        data, _stat = client.get(params["graph"])
        graph = Graph.decode(json.loads(data))
    except (NoNodeError, ValueError, CorruptItemError):
        return None
    nodes = {n.name: {"task": n.task, "queue": n.queue, "status": job.steps.get(n.name, "waiting"),
                      **({"next": n.next} if n.next else {}), **({"after": n.after} if n.after else {})}
             for n in graph.nodes.values()}
    return {"kind": graph.kind, "on_failure": graph.on_failure, "out": graph.out, "nodes": nodes}


__all__ = ["CanvasHandoff", "cancel_at", "describe", "CanvasRef", "MULTI_BUDGET", "commit"]
