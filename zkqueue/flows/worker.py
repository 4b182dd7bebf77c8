"""Flow workers: threads that claim step jobs, run their handlers and commit the hand-offs.

Each worker thread serves one step: it takes a slot of the step's semaphore (kazoo's ``Semaphore`` recipe, when
the step has a ``max_concurrency``: a bound across every worker of the flow), claims one job of the step's queue
(the job layer counts the attempt, fenced by the lease), runs the handler and ends the step: a result or ``Next``
hands off (:mod:`zkqueue.flows.handoff`), an error is retried by the step's policy (the job layer's requeue with a
due time) or, once dead, hands off as a failure. A thread never dies silently: errors of its own are logged,
counted and followed by a growing pause.
"""

from __future__ import annotations

import inspect
import logging
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from zkqueue.errors import ConfigurationError
from zkqueue.flows import ends, store
from zkqueue.flows.definition import Definition, Step
from zkqueue.flows.handoff import Handoff
from zkqueue.jobs import JobQueue, RetryPolicy
from zkqueue.jobs.scope import HeldJob



class WorkedFlow(Protocol):
    """What :class:`FlowWorker` uses of its :class:`~zkqueue.flows.flow.Flow`."""

    client: Any
    paths: store.Paths
    definition: Definition
    handoff: Handoff

    def queue(self, name: str) -> JobQueue: ...

    def retry_of(self, step: Step) -> RetryPolicy: ...

log = logging.getLogger("zkqueue.flows.worker")

#: How long a worker thread waits for a job (or a semaphore slot) before it looks at its stop flag again.
POLL_SECONDS = 0.25


class FlowWorker:
    """Running workers of a flow; :meth:`stop` (or leaving the ``with`` block) lets running steps finish."""

    def __init__(self, flow: WorkedFlow, steps: list[Step], concurrency: int) -> None:
        self._flow = flow
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.errors = 0  # worker-loop errors (logged)
        self.handled = 0  # step jobs ended by these workers
        self._pools: list[ThreadPoolExecutor] = []
        self._threads: list[threading.Thread] = []
        for step in steps:
            if step.max_concurrency is not None:  # a semaphore slot per run: one thread claims one job at a time
                self._threads += [threading.Thread(target=self._serve_limited, args=(step,),
                                                   name=f"zkqueue-flow-{step.name}-{i}", daemon=True)
                                  for i in range(concurrency)]
            else:  # one thread claims as many jobs as there are free threads in the step's pool
                pool = ThreadPoolExecutor(concurrency, thread_name_prefix=f"zkqueue-flow-{step.name}")
                self._pools.append(pool)
                self._threads.append(threading.Thread(target=self._serve, args=(step, pool, concurrency),
                                                      name=f"zkqueue-flow-{step.name}-claims", daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float | None = 60.0) -> None:
        """Stop claiming; wait for running steps to end and commit."""
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)
        for pool in self._pools:
            pool.shutdown(wait=True)

    def __enter__(self) -> FlowWorker:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------ loops
    def _serve(self, step: Step, pool: ThreadPoolExecutor, concurrency: int) -> None:
        free = threading.Semaphore(concurrency)

        def run(held: HeldJob) -> None:
            try:
                self._handle(step, held)
            except Exception:
                self._loop_error(step, 1)
            finally:
                free.release()

        def claim() -> None:
            if not free.acquire(timeout=POLL_SECONDS):
                return
            n = 1
            while n < concurrency and free.acquire(blocking=False):
                n += 1
            try:
                helds = self._flow.queue(step.name).claim_many(n, timeout=POLL_SECONDS)
            except BaseException:
                for _ in range(n):
                    free.release()
                raise
            for _ in range(n - len(helds)):
                free.release()
            for held in helds:
                pool.submit(run, held)

        self._forever(step, claim)

    def _serve_limited(self, step: Step) -> None:
        ident = f"{socket.gethostname()}-{os.getpid()}-{threading.current_thread().name}"
        sem = self._flow.client.Semaphore(self._flow.paths.limit(step.name), ident, max_leases=step.max_concurrency)

        def claim_and_run() -> None:
            if not sem.acquire(timeout=POLL_SECONDS):
                return
            try:
                held = self._flow.queue(step.name).claim(timeout=POLL_SECONDS)
                if held is not None:
                    self._handle(step, held)
            finally:
                sem.release()

        self._forever(step, claim_and_run)

    def _forever(self, step: Step, once: Any) -> None:
        """Call ``once()`` until stopped; errors are logged and counted, with a growing pause between them."""
        failures = 0
        while not self._stop.is_set():
            try:
                once()
                failures = 0
            except Exception:
                failures += 1
                self._loop_error(step, failures)
                self._stop.wait(min(5.0, 0.05 * 2 ** min(failures, 7)))
            except BaseException:
                log.exception("flow worker of step %s stops on an exit exception", step.name)
                raise

    def _loop_error(self, step: Step, failures: int) -> None:
        with self._lock:
            self.errors += 1
        log.warning("flow worker of step %s: error (%d in a row); going on", step.name, failures, exc_info=True)

    # ------------------------------------------------------------------------------------------ one step job
    def _handle(self, step: Step, held: HeldJob) -> None:
        """Run one claimed step job on this thread and commit its end (:mod:`zkqueue.flows.ends`)."""
        run = ends.begin(self._flow, step, held)
        if run.job is None:  # the flow job failed meanwhile, or is gone: the step is dropped
            outcome = ends.settle(self._flow, run)
        else:
            try:
                value = step.handler(run.job)
                if inspect.iscoroutine(value):
                    value.close()
                    raise ConfigurationError(f"step {step.name} has a coroutine handler: run it with "
                                             "zkqueue.aio.AsyncFlow.work")
            except Exception as exc:
                outcome = ends.settle(self._flow, run, error=exc)
            except BaseException:
                ends.release(held)
                raise
            else:
                outcome = ends.settle(self._flow, run, value)
        if outcome != ends.RELEASED:
            self._count()

    def _count(self) -> None:
        with self._lock:
            self.handled += 1


__all__ = ["FlowWorker", "POLL_SECONDS"]
