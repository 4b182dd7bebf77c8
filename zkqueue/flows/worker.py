"""Flow workers: a flow's step jobs on the one worker runtime (:mod:`zkqueue.runtime`).

:meth:`Flow.work <zkqueue.flows.Flow.work>` runs one :class:`~zkqueue.runtime.Worker` over the job queues of the
chosen steps, as ``JobQueue.work`` runs one over its queue: claimers lease step jobs ahead of free slots without
counting an attempt, the dispatcher counts each attempt as its job starts and enforces timeouts, and the handlers
run on the thread driver, ``concurrency`` at once across the steps. On its handler thread a step job reads its
flow record (:func:`zkqueue.flows.ends.look`) and runs the step's handler; its end is the flow's own
(:attr:`Route.end <zkqueue.runtime.Route>`): a result or ``Next`` hands off in one fenced multi, an error is retried
by the step's policy or, once dead, hands off as a failure (:mod:`zkqueue.flows.ends`). So:

- **Timeouts** (``Flow.work(timeout=)``): an attempt past it fails with :class:`~zkqueue.errors.JobTimeoutError`,
  recorded through the step's policy like any error (retried, or dead and handed off as a failure, so the flow
  record learns of it); the hung thread is let go and replaced, and its late result or error is refused.
- **Stop** (:meth:`FlowWorker.stop`): warm first (no more claims, step jobs held ahead given back uncounted,
  running handlers get ``timeout`` seconds to finish and hand off), then cold (the running ones are given back, their
  attempt counted).
- **max_concurrency**: such a step's jobs are claimed under leases of the flow's semaphore for it
  (:mod:`zkqueue.flows.limits`), a bound across every worker of the flow.

The driver and the step call are parameters: :class:`zkqueue.aio.AsyncFlow` builds the same worker with the
asyncio driver on its loop and a coroutine step call (:mod:`zkqueue.aio.flow_worker`), so a step job is claimed,
started, timed and ended the same way whichever kind of worker runs its handler.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections import Counter
from concurrent.futures import Executor
from typing import Any, Callable, Mapping, Protocol, Sequence

from zkqueue.errors import ConfigurationError
from zkqueue.flows import ends, handoff, store
from zkqueue.flows.committer import EndCommitter
from zkqueue.flows.definition import Definition, Step
from zkqueue.flows.handoff import Handoff
from zkqueue.flows.limits import LimitedStep
from zkqueue.jobs import JobQueue, RetryPolicy
from zkqueue.jobs.model import Job
from zkqueue.jobs.scope import HeldJob, release_many
from zkqueue.jobs.queue import DEFAULT_STOP_TIMEOUT
from zkqueue.runtime import Attempt, Driver, Route, ThreadDriver, Worker

log = logging.getLogger("zkqueue.flows.worker")

#: Step jobs a flow worker holds ahead of its free slots by default (at least ``8 * concurrency``): each claim and
#: each start is one round trip whatever its size, so a step of short handlers is claimed in large batches.
FLOW_PREFETCH = 256
#: Step jobs whose attempts a flow worker counts ahead of its free slots (at least ``4 * concurrency``, at most the
#: prefetch): see ``start_ahead`` of :class:`~zkqueue.runtime.Worker` (only jobs with an attempt to spare, while
#: the handlers are short). The dispatcher waits for each count's multi, so the more it counts at once, the fewer
#: such waits per step job: 128 ran a 3-step flow about 15% faster than 32 on the benchmark's worker; a worker that
#: dies costs each job counted an attempt (never its last).
START_AHEAD = 128


class WorkedFlow(Protocol):
    """What :class:`FlowWorker` uses of its :class:`~zkqueue.flows.flow.Flow`."""

    client: Any
    paths: store.Paths
    definition: Definition
    handoff: Handoff

    def queue(self, name: str) -> JobQueue: ...

    def retry_of(self, step: Step) -> RetryPolicy: ...


#: A step job's call on its driver: ``call(step, job)`` returns ``(view, value)`` (:meth:`FlowWorker._run`), or an
#: awaitable of it on the asyncio driver.
StepCall = Callable[[Step, Job], Any]


class StepSource:
    """A step's job queue (or its :class:`~zkqueue.flows.limits.LimitedStep`) as the runtime claims from it, with
    one thing more: as a batch of its step jobs starts (their attempts counted in one multi), their flow records
    are read in one multiRead sent just before it, so a step job's handler does not wait for a read of its own
    (:meth:`FlowWorker.look` takes the read kept for it)."""

    def __init__(self, source: Any, step: Step, worker: FlowWorker) -> None:
        self.source = source
        self._step = step
        self._worker = worker

    def __getattr__(self, name: str) -> Any:
        return getattr(self.source, name)

    def start_many(self, helds: Sequence[HeldJob]) -> list[HeldJob]:
        ids = [h.record.id for h in helds if not h.counted]  # (those counted ahead were read as they were)
        pending = self._worker._flow.handoff.send_reads(ids) if ids else None
        started = self.source.start_many(helds)
        if pending is None or not started:
            return started
        try:
            reads = dict(zip(ids, pending()))
        except Exception:  # noqa: BLE001 - each handler reads its record itself then
            log.debug("reading %d flow record(s) ahead failed", len(ids), exc_info=True)
            return started
        with self._worker._lock:
            for held in started:
                read = reads.get(held.record.id, handoff.UNREAD)
                if read is not handoff.UNREAD and not isinstance(read, BaseException):  # else the handler reads
                    self._worker._reads[(self._step.name, held.record.id)] = read
        return started


class FlowWorker:
    """The running worker of a flow's ``steps`` (see the module docs): ``concurrency`` step handlers at once,
    ``timeout`` seconds per attempt (None: no limit), ``prefetch`` step jobs held ahead of free slots (None: the
    runtime's default; no attempt is counted for them). :meth:`stop` (or leaving the ``with`` block) drains it.

    ``driver`` runs the step calls (default: a :class:`~zkqueue.runtime.ThreadDriver`), ``call(step, job)`` is the
    step call (default: :meth:`_run`, the read of the flow record and the handler on the calling thread);
    ``timeouts``: seconds per attempt of a step by name, over ``timeout`` (None for a step: ``timeout``);
    ``end_executor``: where a step job's end is committed when its handler ran (default: on the handler's thread;
    an event loop's must not block: :attr:`Route.end_executor <zkqueue.runtime.Route>`).

    ``handled``: step jobs this worker ended (handed off, retried, dead or dropped); ``errors``: ends that failed
    to commit with an error (logged; the job was given back)."""

    def __init__(self, flow: WorkedFlow, steps: list[Step], concurrency: int, *, timeout: float | None = None,
                 prefetch: int | None = None, driver: Driver | None = None, call: StepCall | None = None,
                 timeouts: Mapping[str, float | None] | None = None, end_executor: Executor | None = None,
                 name: str | None = None) -> None:
        self._flow = flow
        self._lock = threading.Lock()
        self.handled = 0
        self.errors = 0
        self._ends: Counter[str] = Counter()
        name = name or f"zkqueue-flow-{flow.paths.root}"
        driver = driver if driver is not None else ThreadDriver(f"{name}-step")
        call = call if call is not None else self._run
        timeouts = timeouts or {}
        self._limited: list[LimitedStep] = []
        self._reads: dict[tuple[str, str], Any] = {}  # (step, job id) -> its flow record read as it started
        # Ends committed many per multi on a thread of their own, unless an executor was chosen for them.
        self._committer: EndCommitter[tuple[Step, LimitedStep | None, Attempt]] | None = (
            EndCommitter(self._end_many, name) if end_executor is None else None)
        sources: list[Any] = []
        routes: dict[int, Route] = {}
        for step in steps:
            source: Any = flow.queue(step.name)
            limited = None
            if step.max_concurrency is not None:
                limited = LimitedStep(source, flow.client, flow.paths.limit(step.name), step.max_concurrency,
                                      concurrency, f"{name}-{step.name}")
                self._limited.append(limited)
                source = limited
            source = StepSource(source, step, self)
            sources.append(source)
            routes[id(source)] = Route(driver, functools.partial(call, step),
                                       end=functools.partial(self._end, step, limited),
                                       timeout=timeouts.get(step.name), end_executor=end_executor)
        #: The worker runtime under this flow worker.
        if prefetch is None:  # claims and starts are many per round trip: hold enough ahead to fill them
            prefetch = max(FLOW_PREFETCH, 8 * concurrency)
        self.runtime = Worker(sources, lambda source, _job: routes[id(source)], [driver], concurrency=concurrency,
                              timeout=timeout, prefetch=prefetch, name=name,
                              start_ahead=min(prefetch, max(START_AHEAD, 4 * concurrency)))
        self.runtime.start()

    # ------------------------------------------------------------------------------------------ life cycle
    def stop(self, timeout: float | None = DEFAULT_STOP_TIMEOUT) -> bool:
        """Stop claiming; give back the step jobs held ahead (uncounted); let running handlers finish and hand off
        within ``timeout`` seconds (None: as long as they take), then give the rest back (a cold stop, their
        attempt counted). Idempotent. True when every running handler finished (a warm stop)."""
        warm = self.runtime.stop(timeout)
        if self._committer is not None:
            self._committer.close()
        for limited in self._limited:
            limited.close()
        return warm

    def kill(self) -> None:
        """Make a stop cold now (see :meth:`Worker.kill <zkqueue.runtime.Worker.kill>`); :meth:`stop` ends it."""
        self.runtime.kill()

    def __enter__(self) -> FlowWorker:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    @property
    def in_flight(self) -> int:
        """Step handlers running now (and ends being committed)."""
        return self.runtime.in_flight

    def running_ids(self) -> list[str]:
        """Flow job ids of the step jobs running now."""
        return self.runtime.running_ids()

    def stats(self) -> dict[str, int]:
        """This worker's step jobs so far: ``completed`` (handed off), ``retried``, ``dead``, ``dropped`` (their
        flow job had failed or was gone), ``released`` (given back: the lease was lost, or the hand-off could not
        commit), and from the runtime ``timed_out``, ``given_back`` (cold stop), ``returned`` (held ahead, given
        back unstarted), ``in_flight``, ``held`` and ``started``."""
        runtime = self.runtime.stats()
        with self._lock:
            out = {k: self._ends.get(k, 0) for k in (ends.COMPLETED, ends.RETRIED, ends.DEAD, ends.DROPPED,
                                                      ends.RELEASED)}
        return {**out, **{k: runtime.get(k, 0) for k in ("timed_out", "given_back", "returned", "in_flight", "held",
                                                          "started")}}

    # ------------------------------------------------------------------------------------------ one step job
    def look(self, step: Step, job: Job) -> ends.StepView:
        """Read the flow record of step job ``job`` (blocks): what its handler gets (:func:`zkqueue.flows.ends.look`);
        the view's job is None when the flow job's run is over (the step job is dropped unrun)."""
        with self._lock:
            read = self._reads.pop((step.name, job.id), handoff.UNREAD)
        return ends.look(self._flow, step, job.id, store.run_in(job.params), job.attempts, read)

    def _run(self, step: Step, job: Job) -> tuple[ends.StepView, Any]:
        """A step job's call on its handler thread: read its flow record and run the handler (unless the flow job's
        run is over). What it raises fails the attempt (:meth:`_end`)."""
        view = self.look(step, job)
        if view.job is None:  # the flow job failed meanwhile, is gone, or runs again: dropped unrun
            return view, None
        value = step.handler(view.job)
        if inspect.iscoroutine(value):
            value.close()
            raise ConfigurationError(f"step {step.name} has a coroutine handler: run it with "
                                     "zkqueue.aio.AsyncFlow.work")
        return view, value

    def _end(self, step: Step, limited: LimitedStep | None, attempt: Attempt) -> None:
        """Commit a settled attempt's end (the runtime's :attr:`Route.end <zkqueue.runtime.Route>`): on its handler
        thread (or on ``end_executor``), or on the runtime's finisher for a timeout. ``attempt.result`` is the step
        call's ``(view, value)``. A late result of a timed-out attempt never comes here
        (the attempt refuses it)."""
        if self._committer is not None:
            self._committer.put((step, limited, attempt))
            return
        held = attempt.held
        try:
            if attempt.error is not None:  # the handler (or the read before it) raised, or the attempt timed out
                outcome = ends.fail(self._flow, step, held, attempt.error)
            else:
                view, value = attempt.result
                outcome = ends.settle(self._flow, ends.StepRun.of(step, held, view), value)
        except Exception:
            with self._lock:
                self.errors += 1
            raise  # logged by the runtime, which gives the job back
        finally:
            if limited is not None:
                limited.done([held])
        with self._lock:
            self._ends[outcome] += 1
            if outcome != ends.RELEASED:
                self.handled += 1

    def _end_many(self, batch: list[tuple[Step, LimitedStep | None, Attempt]]) -> None:
        """Commit the ends of ``batch`` (its :class:`~zkqueue.flows.committer.EndCommitter`'s): many hand-offs per
        multi."""
        runs: list[tuple[ends.StepRun, Any, BaseException | None]] = []
        for step, _limited, attempt in batch:
            with self._lock:
                self._reads.pop((step.name, attempt.held.record.id), None)
            if attempt.error is not None:
                runs.append((ends.StepRun.of(step, attempt.held, ends.StepView(handoff.UNREAD, None, {})), None,
                             attempt.error))
            else:
                view, value = attempt.result
                runs.append((ends.StepRun.of(step, attempt.held, view), value, None))
        try:
            outcomes = ends.settle_many(self._flow, runs)
        except Exception:
            with self._lock:
                self.errors += len(batch)
            log.exception("ending %d step job(s) failed; they are given back", len(batch))
            release_many([attempt.held for _s, _l, attempt in batch])
            outcomes = []
        finally:
            for _step, limited, attempt in batch:
                if limited is not None:
                    limited.done([attempt.held])
        with self._lock:
            for outcome in outcomes:
                self._ends[outcome] += 1
                if outcome != ends.RELEASED:
                    self.handled += 1


__all__ = ["FlowWorker", "StepCall", "WorkedFlow"]
