"""Async flow workers: ``flow.work(concurrency=50)`` runs coroutine step handlers on the running event loop, on the
one worker runtime (:mod:`zkqueue.runtime`), as the thread workers do.

:class:`AsyncFlowWorker` is a facade over the thread workers' own :class:`~zkqueue.flows.worker.FlowWorker`, built
with the runtime's asyncio driver on the caller's loop instead of threads. So a step job is claimed, started, timed
and ended as it is on ``Flow.work``: the runtime's claimers (threads) lease step jobs ahead of free slots without
counting an attempt, its dispatcher counts each attempt as its job starts and enforces timeouts, and each started
step job runs as a task of this loop: its flow record is read in the flow's thread pool
(:class:`~zkqueue.aio.bridge.Offloader`), then ``await handler(job)`` runs on the loop. Its end is the flow's own
(:mod:`zkqueue.flows.ends`: the step's completion, the flow record's update and the next step's item(s) in ONE
fenced multi, or a retry, or a dead step handed off as a failure), committed in the flow's thread pool while the
step job still holds its slot (a timed-out one's by the runtime's finisher): no ZooKeeper call blocks the loop.

- **Concurrency.** ``concurrency`` runs per step worked, shared: the runtime runs ``concurrency`` x the number of
  steps handlers at once across the worker's steps (one busy step may use the others' share).
- **Timeouts.** A step defined with ``timeout=`` (or the worker's default ``timeout``) whose handler still runs
  after that many seconds is cancelled; the attempt fails with :class:`~zkqueue.errors.JobTimeoutError` (retried by
  the step's policy, or dead and handed off as a failure).
- **Cancellation.** Cancelling :attr:`AsyncFlowWorker.task` cancels every running handler and gives their jobs
  back (released, their attempt counted): they run again at once, without a backoff. Step jobs claimed ahead go
  back uncounted (they never ran). Ends already decided are committed first.
- **stop(timeout)** is warm, then cold: it stops claiming, gives back the step jobs claimed ahead (uncounted), lets
  running handlers finish and hand off within ``timeout`` seconds (default
  :data:`~zkqueue.jobs.queue.DEFAULT_STOP_TIMEOUT`; None: as long as they take), then gives the rest back as a
  cancellation does.
- **max_concurrency** steps are claimed under leases of the flow's semaphore for the step
  (:class:`~zkqueue.flows.limits.LimitedStep`), a bound across every worker of the flow.
- **Blocking handlers** are reported once per step job (:mod:`zkqueue.aio.watchdog`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Callable

from zkqueue.aio.bridge import Offloader
from zkqueue.aio.lifecycle import WorkerTask
from zkqueue.aio.watchdog import SlowSteps
from zkqueue.errors import ConfigurationError
from zkqueue.flows import ends
from zkqueue.flows.definition import Step
from zkqueue.flows.flow import Flow
from zkqueue.flows.worker import FlowWorker
from zkqueue.jobs.model import Job
from zkqueue.runtime import AsyncioDriver, is_async

log = logging.getLogger("zkqueue.aio.flow_worker")


class AsyncFlowWorker(WorkerTask["AsyncFlowWorker"]):
    """Coroutine step handlers of one flow on the running loop (see the module docs). Made by
    :meth:`AsyncFlow.work <zkqueue.aio.AsyncFlow.work>`; ``await worker.stop()`` drains it, cancelling
    :attr:`task` gives running jobs back. ``timeouts``: seconds per attempt of each step by name (None: no
    limit); ``offloader``: the flow's thread pool, where flow records are read and step ends committed."""

    def __init__(self, flow: Flow, offloader: Offloader, steps: list[Step], concurrency: int,
                 timeouts: dict[str, float | None], slow_after: float | None,
                 on_stopped: Callable[[AsyncFlowWorker], None] | None = None) -> None:
        for step in steps:
            if not is_async(step.handler):
                raise ConfigurationError(f"the handler of step {step.name!r} must be a coroutine function "
                                         f"(async def), got {step.handler!r}; thread handlers go to Flow.work")
        super().__init__(on_stopped, concurrency, slow_after)
        self._off = offloader
        self._slow = SlowSteps(slow_after, flow.paths.root)
        #: The flow worker under this one (on the runtime: :attr:`FlowWorker.runtime`).
        self.flow_worker = FlowWorker(flow, steps, concurrency * len(steps), timeouts=timeouts,
                                      driver=AsyncioDriver(loop=asyncio.get_running_loop()), call=self._step,
                                      end_executor=offloader.executor, name=f"zkqueue-aio-flow-{flow.paths.root}")
        self._begin(self.flow_worker, f"zkqueue-aio-flow-{flow.paths.root}")

    async def _step(self, step: Step, job: Job) -> tuple[ends.StepView, Any]:
        """A step job's call, a task on the loop: read its flow record in the thread pool, then await its handler
        (unless the flow job's run is over). What it raises fails the attempt."""
        view = await self._off.run(self.flow_worker.look, step, job)
        if view.job is None:  # the flow job failed meanwhile, is gone, or runs again: dropped unrun
            return view, None
        call = step.handler(view.job)
        if not inspect.isawaitable(call):
            raise TypeError(f"the handler of step {step.name} returned {type(call).__name__}, not an awaitable")
        where = f"{step.name}/{view.job.id}"
        return view, await (self._slow.timed(call, where) if inspect.iscoroutine(call) else call)

    @property
    def in_flight(self) -> int:
        """Step handlers running now (all steps)."""
        return self.flow_worker.in_flight

    @property
    def peak_in_flight(self) -> int:
        """The most step handlers that ran at once."""
        return self.flow_worker.runtime.peak_in_flight

    def stats(self) -> dict[str, int]:
        """This worker's step jobs so far: ``completed``, ``retried``, ``dead``, ``dropped`` (their flow job had
        failed or was gone), ``released`` (given back with their attempt counted: cancelled, cut off by a cold
        stop, or their lease was lost), ``timed_out``, ``returned`` (claimed ahead and given back unstarted),
        ``in_flight``, ``prefetched`` (claimed, waiting for a slot), ``peak_in_flight`` and ``slow_reports``
        (handlers reported for blocking the loop)."""
        s = self.flow_worker.stats()
        return {ends.COMPLETED: s[ends.COMPLETED], ends.RETRIED: s[ends.RETRIED], ends.DEAD: s[ends.DEAD],
                ends.DROPPED: s[ends.DROPPED], ends.RELEASED: s[ends.RELEASED] + s["given_back"],
                "timed_out": s["timed_out"], "returned": s["returned"], "in_flight": s["in_flight"],
                "prefetched": s["held"], "peak_in_flight": self.peak_in_flight, "slow_reports": self._slow.reports}


__all__ = ["AsyncFlowWorker"]
