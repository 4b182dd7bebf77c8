"""A canvas (chain, group, chord of task signatures) as a graph of flow steps. Pure, no I/O.

:func:`compile_canvas` turns a canvas into nodes named ``"0"``, ``"1"``, ...: a node whose input is one node's
result is that node's ``next`` (a chain link, or a group member fed by the step before it); a node whose input is
the results of several nodes (a chord body, or whatever follows a group in a chain) is a join (``after``) of them,
so :func:`zkqueue.flows.definition.advance` queues it exactly once, by the end of the last one. :meth:`Graph.definition`
is that graph as the flows' :class:`~zkqueue.flows.definition.Definition`: canvases and flows advance by one rule.

The graph is stored as the ``params`` of the canvas's flow record (:meth:`Graph.encode`): per node its task, queue,
where its input comes from, its edges, and the arguments of the nodes queued by hand-offs (a root node's arguments
live only in its job, so a wide group's record stays small).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable

from zkqueue.errors import ConfigurationError, CorruptItemError
from zkqueue.flows.definition import CONTINUE, FAIL, Definition, Step

log = logging.getLogger("zkqueue.flows.canvas_graph")

#: The header a canvas node's job carries: ``[canvas id, node name]``.
HEADER = "zkqueue.canvas"
#: What a failed member's result is recorded as under ``on_failure="continue"``: ``{ERROR_KEY: "Type: message",
#: "task": name}`` (see :func:`is_error`).
ERROR_KEY = "zkqueue.error"

#: Where an input comes from: a node's name (its result), or a list of them (a list of their results, nested as
#: the groups were).
OutSpec = Any


def is_error(value: Any) -> bool:
    """Whether ``value`` is the error value a canvas recorded for a failed member (``on_failure="continue"``)."""
    return isinstance(value, dict) and ERROR_KEY in value


def error_value(task: str, error: str) -> dict[str, Any]:
    return {ERROR_KEY: error, "task": task}


def node_job_id(canvas_id: str, node: str) -> str:
    """The job id of ``node`` of canvas ``canvas_id``."""
    return f"{canvas_id}.{node}"


def canvas_of_job(job_id: str) -> str:
    """The canvas id of a node's job id (see :func:`node_job_id`)."""
    return job_id.rsplit(".", 1)[0]


def flatten(spec: OutSpec) -> list[str]:
    if isinstance(spec, str):
        return [spec]
    return [name for part in spec for name in flatten(part)]


def resolve(spec: OutSpec, results: dict[str, Any]) -> Any:
    """The value of ``spec`` over a canvas record's results (a node without one gives None)."""
    if isinstance(spec, str):
        return results.get(spec)
    return [resolve(part, results) for part in spec]


@dataclass
class Node:
    """One task call of a canvas. ``args``/``kwargs`` are its own arguments (a mutable signature gets its input
    before them); ``input`` is where its input comes from (None for a root: it has no input)."""

    name: str
    task: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    immutable: bool = False
    input: OutSpec = None
    next: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)
    max_attempts: int | None = None
    timeout: float | None = None

    @property
    def is_root(self) -> bool:
        return self.input is None

    def params(self, results: dict[str, Any] | None = None) -> dict[str, Any]:
        """The task params of its job: its arguments, after its input's value unless it is a root or immutable."""
        args = list(self.args)
        if not self.is_root and not self.immutable:
            args.insert(0, resolve(self.input, results or {}))
        return {"args": args, "kwargs": dict(self.kwargs)}


@dataclass
class Graph:
    """A compiled canvas: its ``kind`` (chain, group, chord), ``on_failure``, its nodes by name, and ``out``, the
    spec of its result (the last node of a chain, the members of a group, the body of a chord)."""

    kind: str
    on_failure: str
    nodes: dict[str, Node]
    out: OutSpec

    @property
    def roots(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_root]

    def definition(self) -> Definition:
        """The graph as a flow :class:`~zkqueue.flows.definition.Definition` (handlers are never called: the
        nodes' tasks run in task workers)."""
        defn = Definition()
        for node in self.nodes.values():
            defn.add(Step(node.name, _never, tuple(node.next), tuple(node.after), self.on_failure))
        return defn

    def encode(self) -> dict[str, Any]:
        nodes: dict[str, Any] = {}
        for n in self.nodes.values():
            doc: dict[str, Any] = {"t": n.task, "q": n.queue}
            if not n.is_root:  # a root's arguments are in its job only
                doc["in"] = n.input
                doc["a"] = n.args
                if n.kwargs:
                    doc["k"] = n.kwargs
            if n.immutable:
                doc["i"] = 1
            if n.next:
                doc["n"] = n.next
            if n.after:
                doc["w"] = n.after
            if n.max_attempts is not None:
                doc["m"] = n.max_attempts
            if n.timeout is not None:
                doc["to"] = n.timeout
            nodes[n.name] = doc
        return {"canvas": self.kind, "on_failure": self.on_failure, "out": self.out, "nodes": nodes}

    @classmethod
    def decode(cls, doc: Any) -> Graph:
        try:
            nodes = {}
            for name, d in doc["nodes"].items():
                nodes[name] = Node(name, d["t"], d["q"], list(d.get("a", [])), dict(d.get("k", {})),
                                   bool(d.get("i", 0)), d.get("in"), list(d.get("n", [])), list(d.get("w", [])),
                                   d.get("m"), d.get("to"))
            return cls(str(doc["canvas"]), str(doc["on_failure"]), nodes, doc["out"])
        except Exception as exc:
            raise CorruptItemError(f"not a canvas graph: {exc!r}") from exc


def _never(_job: Any) -> Any:  # pragma: no cover - canvas steps run as task jobs, never as flow handlers
    raise ConfigurationError("a canvas node runs as a task job")


def compile_canvas(canvas: Any, on_failure: str = FAIL) -> Graph:
    """The graph of ``canvas`` (a signature, chain, group or chord; see :mod:`zkqueue.flows.canvas`)."""
    from zkqueue.flows.canvas import Chain, Chord, Group, Signature

    if on_failure not in (FAIL, CONTINUE):
        raise ConfigurationError(f"on_failure must be 'fail' or 'continue', got {on_failure!r}")
    nodes: dict[str, Node] = {}

    def visit(item: Any, pred: OutSpec) -> OutSpec:
        if isinstance(item, Signature):
            name = str(len(nodes))
            node = Node(name, item.task, item.queue, list(item.args), dict(item.kwargs), item.immutable, pred,
                        max_attempts=item.max_attempts, timeout=item.timeout)
            if isinstance(pred, str):
                nodes[pred].next.append(name)
            elif pred is not None:
                node.after = flatten(pred)
            nodes[name] = node
            return name
        if isinstance(item, Chord):
            return visit(item.body, visit(item.header, pred))
        if isinstance(item, Chain):
            out = pred
            for part in item.parts:
                out = visit(part, out)
            return out
        if isinstance(item, Group):
            return [visit(part, pred) for part in item.members]
        raise ConfigurationError(f"a canvas is made of signatures (task.s(...)), chain, group and chord; got "
                                 f"{type(item).__name__}: {item!r}")

    kind = type(canvas).__name__.lower()
    out = visit(canvas, None)
    return Graph(kind if kind in ("chain", "group", "chord") else "chain", on_failure, nodes, out)


def parts_of(items: Iterable[Any], what: str) -> tuple[Any, ...]:
    """The parts of a chain or group: signatures or canvases, at least one."""
    from zkqueue.flows.canvas import Canvas

    if len(items) == 1 and not isinstance(items[0], Canvas) and not isinstance(items[0], (str, bytes)) \
            and hasattr(items[0], "__iter__"):  # type: ignore[index, arg-type]
        items = tuple(items[0])  # type: ignore[index]
    parts = tuple(items)
    for p in parts:
        if not isinstance(p, Canvas):
            raise ConfigurationError(f"{what} takes signatures (task.s(...)) and canvases, got "
                                     f"{type(p).__name__}: {p!r}")
    if not parts:
        raise ConfigurationError(f"{what} needs at least one signature")
    return parts


__all__ = ["ERROR_KEY", "Graph", "HEADER", "Node", "canvas_of_job", "compile_canvas", "error_value", "is_error",
           "node_job_id", "resolve"]
