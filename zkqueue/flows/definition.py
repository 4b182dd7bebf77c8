"""A flow's steps and what happens when one ends. Pure, no I/O.

A step names its ``next`` step(s) (one job per next step: a fan-out) or, for a join, the steps it waits for
(``after``). :func:`advance` computes a flow record's next state when a step ends: which steps to queue, whether
the flow job failed or completed. A join is queued once, by the end that finishes the last step it waits for; a
flow job with nothing queued is over, so nothing waits for ever: a join whose awaited steps will never all run
(e.g. ``Next`` routed around one) runs with the ones that did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from zkqueue.errors import ConfigurationError
from zkqueue.flows import model
from zkqueue.flows.model import FlowRecord, FlowState, HistoryEntry, StepError
from zkqueue.jobs.rate import RateLimit
from zkqueue.jobs.retry import RetryPolicy

FAIL = "fail"
CONTINUE = "continue"


@dataclass(frozen=True)
class Step:
    """One step of a flow: ``handler(job) -> result`` (or a :class:`~zkqueue.flows.model.Next`)."""

    name: str
    handler: Callable[[Any], Any]
    next: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    on_failure: str | None = None  # None: as the join waiting for it says, else "fail"
    retry: RetryPolicy | None = None
    max_concurrency: int | None = None
    max_per_second: int | None = None

    @property
    def is_join(self) -> bool:
        return bool(self.after)

    @property
    def rate_limit(self) -> RateLimit | None:
        """The step's job queue's rate limit: ``max_per_second`` runs started per second across the flow."""
        return RateLimit(self.max_per_second, 1.0) if self.max_per_second is not None else None


def _names(value: str | Sequence[str] | None, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{what} must be a step name or a list of them, got {value!r}")
    return tuple(value)


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or name.startswith("|"):
        raise ConfigurationError(f"a step name must be a non-empty str without '/', got {name!r}")
    return name


def make_step(name: str, handler: Callable[[Any], Any], *, next: str | Sequence[str] | None = None,  # noqa: A002
              after: Sequence[str] | None = None, on_failure: str | None = None, retry: RetryPolicy | None = None,
              max_concurrency: int | None = None, max_per_second: int | None = None) -> Step:
    """A checked :class:`Step` (references to other steps are checked when the flow starts)."""
    check_name(name)
    if not callable(handler):
        raise ConfigurationError(f"the handler of step {name!r} must be callable, got {handler!r}")
    if on_failure not in (None, FAIL, CONTINUE):
        raise ConfigurationError(f"on_failure must be 'fail' or 'continue', got {on_failure!r}")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigurationError(f"retry must be a RetryPolicy, got {retry!r}")
    if max_concurrency is not None and (isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int)
                                        or max_concurrency < 1):
        raise ConfigurationError(f"max_concurrency must be None or an int >= 1, got {max_concurrency!r}")
    if max_per_second is not None and (isinstance(max_per_second, bool) or not isinstance(max_per_second, int)
                                       or max_per_second < 1):
        raise ConfigurationError(f"max_per_second must be None or an int >= 1, got {max_per_second!r}")
    after_ = _names(after, "after")
    if after is not None and not after_:
        raise ConfigurationError(f"step {name!r}: after must name at least one step")
    return Step(name, handler, _names(next, "next"), after_, on_failure, retry, max_concurrency, max_per_second)


class Definition:
    """The steps of a flow, in the order they were defined."""

    def __init__(self) -> None:
        self.steps: dict[str, Step] = {}

    def add(self, step: Step) -> None:
        if step.name in self.steps:
            raise ConfigurationError(f"step {step.name!r} is defined twice")
        self.steps[step.name] = step

    def check(self) -> None:
        """Every ``next`` and ``after`` names a defined step; a step does not wait for itself."""
        for step in self.steps.values():
            for ref in (*step.next, *step.after):
                if ref not in self.steps:
                    raise ConfigurationError(f"step {step.name!r} refers to an undefined step {ref!r}")
            if step.name in step.after:
                raise ConfigurationError(f"step {step.name!r} waits for itself")

    def step(self, name: str) -> Step:
        try:
            return self.steps[name]
        except KeyError:
            raise ConfigurationError(f"no step {name!r} in this flow (steps: {', '.join(self.steps)})") from None

    def joins_of(self, name: str) -> list[Step]:
        return [s for s in self.steps.values() if name in s.after]

    def continues(self, name: str) -> bool:
        """Whether the flow job goes on when step ``name`` is dead: its own ``on_failure``, else that of a join
        waiting for it, else fail."""
        own = self.step(name).on_failure
        if own is not None:
            return own == CONTINUE
        return any(j.on_failure == CONTINUE for j in self.joins_of(name))


@dataclass(frozen=True)
class Ending:
    """How a step ended: ``ok`` with ``result`` (and ``chosen`` next steps, or None for the step's own), or dead."""

    ok: bool
    result: Any = None
    chosen: tuple[str, ...] | None = None
    errors: tuple[StepError, ...] = ()
    data: dict[str, Any] | None = None  # the shared state's changed keys


def advance(defn: Definition, rec: FlowRecord, name: str, ending: Ending, entry: HistoryEntry
            ) -> tuple[FlowRecord, list[str], list[str]]:
    """The flow record after step ``name`` ended, the steps to queue, and the steps to cancel (the queued ones
    of a flow job that failed)."""
    steps = dict(rec.steps)
    results = dict(rec.results)
    data = {**rec.data, **(ending.data or {})}
    errors = (rec.errors + ending.errors)[-model.MAX_ERRORS * max(1, len(defn.steps)):]
    history = rec.with_entry(entry)
    steps[name] = model.DONE if ending.ok else model.FAILED
    if ending.ok:
        results[name] = ending.result
    if rec.state is not FlowState.RUNNING:  # a step that was running when the flow job failed
        return rec.changed(steps=steps, results=results, data=data, errors=errors, **history), [], []
    state = FlowState.RUNNING
    queue: list[str] = []
    cancel: list[str] = []
    if not ending.ok and not defn.continues(name):
        state = FlowState.FAILED
        cancel = [s for s, status in steps.items() if status == model.QUEUED]
        for s in cancel:
            steps[s] = model.CANCELLED
    else:
        nexts = ending.chosen if ending.chosen is not None else defn.step(name).next
        for n in nexts:
            if not defn.step(n).is_join and n not in queue and steps.get(n) != model.QUEUED:
                queue.append(n)
        for join in defn.joins_of(name):
            if join.name not in steps and all(steps.get(a) in (model.DONE, model.FAILED) for a in join.after):
                queue.append(join.name)
        for n in queue:
            steps[n] = model.QUEUED
        if not any(status == model.QUEUED for status in steps.values()):
            # Nothing left to run: a join that some finished step waits for runs with what there is.
            for join in defn.steps.values():
                if join.is_join and join.name not in steps and any(
                        steps.get(a) in (model.DONE, model.FAILED) for a in join.after):
                    queue.append(join.name)
                    steps[join.name] = model.QUEUED
        if not queue and not any(status == model.QUEUED for status in steps.values()):
            state = FlowState.COMPLETED
    new = rec.changed(state=state, steps=steps, results=results, data=data, errors=errors, **history)
    return new, queue, cancel


def cancelled(rec: FlowRecord, entry: HistoryEntry) -> FlowRecord:
    """The record of a failed flow job after its queued step ``entry.step`` was dropped."""
    steps = dict(rec.steps)
    steps[entry.step] = model.CANCELLED
    return rec.changed(steps=steps, **rec.with_entry(entry))
