"""Async flow workers: ``flow.work(concurrency=50)`` runs coroutine step handlers on the event loop, up to
``concurrency`` per step at once, with the thread workers' semantics (:class:`~zkqueue.flows.FlowWorker`).

Per step, one claim loop (a task) asks the step's job queue for as many jobs as there are free slots
(``JobQueue.claim_many``: it waits for due jobs and counts each attempt under the lease). Each claimed job runs as
a task: :func:`zkqueue.flows.ends.begin` reads the flow record, ``await handler(job)`` runs on the loop, and
:func:`zkqueue.flows.ends.settle` commits the end: the step's completion, the flow record's update and the next
step's item(s) in ONE fenced multi, or a retry, or a dead step handed off as a failure. Claims, ``begin`` and
``settle`` block on ZooKeeper, so they run in the flow's :class:`~zkqueue.aio.bridge.Offloader`.

- **Timeouts.** A step defined with ``timeout=`` (or the worker's default ``timeout``) whose handler still runs
  after that many seconds is cancelled; the attempt fails with :class:`~zkqueue.aio.JobTimeoutError` (retried by
  the step's policy, or dead).
- **Cancellation.** Cancelling :attr:`AsyncFlowWorker.task` cancels every running handler and gives their jobs
  back untouched (released, their attempt counted): they run again at once. Ends already being committed finish
  first.
- **stop()** stops claiming, lets running handlers finish and commits their ends.
- **max_concurrency** steps take a slot of the flow's kazoo ``Semaphore`` per run, as the thread workers do (tried
  without blocking, again every :data:`SLOT_WAIT` seconds); at most ``min(concurrency, max_concurrency)`` runs of
  such a step per worker.
- **Blocking handlers** are reported once per step job (:mod:`zkqueue.aio.watchdog`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from zkqueue.aio.bridge import Offloader
from zkqueue.aio.held import claim_held
from zkqueue.aio.lifecycle import WorkerTask
from zkqueue.aio.watchdog import SlowSteps
from zkqueue.aio.worker import JobTimeoutError
from zkqueue.errors import ConfigurationError, QueueClosedError
from zkqueue.flows import ends
from zkqueue.flows.definition import Step
from zkqueue.flows.flow import Flow
from zkqueue.jobs.queue import JobQueue
from zkqueue.jobs.scope import HeldJob, release_many

log = logging.getLogger("zkqueue.aio.flow")

#: Seconds one claim waits for a due step job before the claim loop looks at stop() again.
CLAIM_WAIT = 0.5
#: Seconds to wait after a claim failed (e.g. the connection is lost) before the next one.
CLAIM_ERROR_PAUSE = 1.0
#: Seconds between two tries for a slot of a ``max_concurrency`` step (and the wait of the claim that follows).
SLOT_WAIT = 0.25


@dataclass(frozen=True)
class _StepQueue:
    """A step's job queue as :func:`zkqueue.aio.held.claim_held` takes it (a :class:`~zkqueue.aio.held.JobSource`)."""

    path: str
    sync: JobQueue
    offloader: Offloader


def is_async_handler(handler: Any) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None))


class AsyncFlowWorker(WorkerTask["AsyncFlowWorker"]):
    """Coroutine step handlers of one flow on the running loop (see the module docs). Made by
    :meth:`AsyncFlow.work <zkqueue.aio.AsyncFlow.work>`; ``await worker.stop()`` drains it, cancelling
    :attr:`task` gives running jobs back."""

    def __init__(self, flow: Flow, offloader: Offloader, steps: list[Step], concurrency: int,
                 timeouts: dict[str, float | None], slow_after: float | None,
                 on_stopped: Callable[[AsyncFlowWorker], None] | None = None) -> None:
        for step in steps:
            if not is_async_handler(step.handler):
                raise ConfigurationError(f"the handler of step {step.name!r} must be a coroutine function "
                                         f"(async def), got {step.handler!r}; thread handlers go to Flow.work")
        super().__init__(on_stopped, concurrency, slow_after)
        self._flow = flow
        self._off = offloader
        self._steps = steps
        self._timeouts = timeouts
        self._slow = SlowSteps(slow_after, flow.paths.root)
        self._running: set[asyncio.Task[None]] = set()
        self._committing: set[asyncio.Future[Any]] = set()  # offloaded begin/settle calls under way
        self._give_back: list[HeldJob] = []
        self._counts = dict.fromkeys((ends.COMPLETED, ends.RETRIED, ends.DEAD, ends.DROPPED, ends.RELEASED,
                                      "timed_out"), 0)
        self.peak_in_flight = 0
        self._begin(self._run(), f"zkqueue-aio-flow-{flow.paths.root}")

    @property
    def in_flight(self) -> int:
        """Step handlers running now (all steps)."""
        return len(self._running)

    def stats(self) -> dict[str, int]:
        """This worker's step jobs so far: ``completed``, ``retried``, ``dead``, ``dropped`` (their flow job had
        failed or was gone), ``released`` (given back: cancelled, or the lease was lost), ``timed_out``,
        ``in_flight``, ``peak_in_flight`` and ``slow_reports``."""
        return {**self._counts, "in_flight": self.in_flight, "peak_in_flight": self.peak_in_flight,
                "slow_reports": self._slow.reports}

    # ------------------------------------------------------------------------------------------ loops
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        serves = []
        for step in self._steps:
            source = _StepQueue(self._flow.paths.step(step.name), self._flow.queue(step.name), self._off)
            if step.max_concurrency is None:
                serves.append(loop.create_task(self._serve(step, source)))
            else:
                serves += [loop.create_task(self._serve_slot(step, source))
                           for _ in range(min(self.concurrency, step.max_concurrency))]
        try:
            await asyncio.gather(*serves)
        except asyncio.CancelledError:
            for task in (*serves, *self._running):
                task.cancel()
            await asyncio.gather(*serves, *list(self._running), return_exceptions=True)
            raise
        finally:
            await self._settled()

    async def _settled(self) -> None:
        """Wait for the ends under way, then give back every job nobody ended (one engine call)."""
        while self._committing:
            await asyncio.gather(*list(self._committing), return_exceptions=True)
        give_back, self._give_back = self._give_back, []
        if give_back:
            try:
                await asyncio.shield(self._off.submit(release_many, give_back))
            except Exception:
                log.warning("giving back %d step job(s) of %s failed (their leases expire)", len(give_back),
                            self._flow.paths.root, exc_info=True)

    async def _serve(self, step: Step, source: _StepQueue) -> None:
        running: set[asyncio.Task[None]] = set()
        freed = asyncio.Event()

        def done(task: asyncio.Task[None]) -> None:
            running.discard(task)
            freed.set()

        while not self._stopping.is_set():
            free = self.concurrency - len(running)
            if free <= 0:
                freed.clear()
                await self._wait_for(freed)
                continue
            held = await self._claim(source, free, CLAIM_WAIT)
            if held is None:
                break
            for h in held:
                if self._stopping.is_set():
                    self._give_back.append(h)
                    continue
                task = self._start(step, h)
                running.add(task)
                task.add_done_callback(done)
        if running:  # stop(): drain
            await asyncio.gather(*list(running), return_exceptions=True)

    async def _serve_slot(self, step: Step, source: _StepQueue) -> None:
        """One run at a time of a ``max_concurrency`` step, each under a slot of the flow's semaphore."""
        ident = f"{socket.gethostname()}-{os.getpid()}-aio-{uuid.uuid4().hex[:8]}"
        sem = self._flow.client.Semaphore(self._flow.paths.limit(step.name), ident, max_leases=step.max_concurrency)
        while not self._stopping.is_set():
            acquiring = self._off.submit(sem.acquire, False)
            try:
                got = await asyncio.shield(acquiring)
            except asyncio.CancelledError:
                acquiring.add_done_callback(lambda f: self._let_go(sem, f))
                raise
            except Exception:
                log.warning("a slot of step %s of %s could not be taken; again in %.1fs", step.name,
                            self._flow.paths.root, CLAIM_ERROR_PAUSE, exc_info=True)
                await self._wait_for(self._stopping, CLAIM_ERROR_PAUSE)
                continue
            if not got:
                await self._wait_for(self._stopping, SLOT_WAIT)
                continue
            try:
                held = await self._claim(source, 1, SLOT_WAIT)
                if held is None:
                    break
                for h in held:
                    await self._start(step, h)  # cancelling this loop cancels the job's task too
            finally:
                await asyncio.shield(self._off.submit(sem.release))

    def _let_go(self, sem: Any, acquired: asyncio.Future[bool]) -> None:
        """A slot a cancelled loop got after all: release it."""
        if not acquired.cancelled() and acquired.exception() is None and acquired.result():
            self._off.submit_detached(sem.release)

    async def _claim(self, source: _StepQueue, n: int, wait: float) -> list[HeldJob] | None:
        """Up to ``n`` step jobs; [] after a failed claim (logged, paused); None once the queue is closed."""
        try:
            return await claim_held(source, n, wait)
        except QueueClosedError:
            log.info("step queue %s closed: its claim loop ends", source.path)
            return None
        except Exception:
            log.warning("claiming step jobs of %s failed; again in %.1fs", source.path, CLAIM_ERROR_PAUSE,
                        exc_info=True)
            await self._wait_for(self._stopping, CLAIM_ERROR_PAUSE)
            return []

    def _start(self, step: Step, held: HeldJob) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._one(step, held),
                                                      name=f"zkqueue-aio-step-{step.name}-{held.record.id}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        self.peak_in_flight = max(self.peak_in_flight, len(self._running))
        return task

    async def _offload(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the offloader, carried through to its end even if this task is cancelled."""
        fut = self._off.submit(fn, *args)
        self._committing.add(fut)
        fut.add_done_callback(self._committing.discard)
        return await asyncio.shield(fut)

    # ------------------------------------------------------------------------------------------ one step job
    async def _one(self, step: Step, held: HeldJob) -> None:
        deciding = False  # once the end is being committed, a cancellation no longer gives the job back
        try:
            run = await self._offload(ends.begin, self._flow, step, held)
            if run.job is None:  # its flow job failed meanwhile, or is gone: dropped without running
                deciding = True
                self._count(await self._offload(ends.settle, self._flow, run))
                return
            timeout = self._timeouts.get(step.name)
            limit = asyncio.timeout(timeout)
            error: Exception | None = None
            value: Any = None
            try:
                async with limit:
                    call = step.handler(run.job)
                    if not inspect.isawaitable(call):
                        raise TypeError(f"the handler of step {step.name} returned {type(call).__name__}, "
                                        "not an awaitable")
                    where = f"{step.name}/{run.job.id}"
                    value = await (self._slow.timed(call, where) if inspect.iscoroutine(call) else call)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc
                if isinstance(exc, TimeoutError) and limit.expired():
                    self._counts["timed_out"] += 1
                    error = JobTimeoutError(f"step {step.name} of flow job {run.job.id} ran past its timeout "
                                            f"of {timeout:g} s")
                    error.__cause__ = exc
            deciding = True
            self._count(await self._offload(ends.settle, self._flow, run, value, error))
        except asyncio.CancelledError:  # the worker was cancelled: give the job back unless its end is committing
            if not deciding:
                self._counts[ends.RELEASED] += 1
                self._give_back.append(held)
            raise
        except Exception:  # begin() could not read the flow record (it gave the job back) or a bug of ours
            log.warning("step %s of flow job %s of %s: error outside its handler; the job was given back",
                        step.name, held.record.id, self._flow.paths.root, exc_info=True)
            self._give_back.append(held)

    def _count(self, outcome: str) -> None:
        self._counts[outcome] += 1

    # ------------------------------------------------------------------------------------------ stopping