"""Flow workers: threads that claim step jobs, run their handlers and commit the hand-offs.

Each worker thread serves one step: it takes a slot of the step's semaphore (kazoo's ``Semaphore`` recipe, when
the step has a ``max_concurrency``: a bound across every worker of the flow), claims one job of the step's queue
(the job layer counts the attempt, fenced by the lease), runs the handler and ends the step: a result or ``Next``
hands off (:mod:`zkqueue.flows.handoff`), an error is retried by the step's policy (the job layer's requeue with a
due time) or, once dead, hands off as a failure. A thread never dies silently: errors of its own are logged,
counted and followed by a growing pause.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import socket
import threading
import traceback as tb
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Protocol

from zkqueue.errors import ConfigurationError, SerializationError
from zkqueue.flows import handoff, store
from zkqueue.flows.definition import Definition, Ending, Step
from zkqueue.flows.handoff import Handoff, StepRef, step_errors
from zkqueue.flows.model import FlowState, Next, StepJob
from zkqueue.jobs import JobQueue, RetryPolicy
from zkqueue.jobs import store as job_store
from zkqueue.jobs.model import now_ms
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
        flow = self._flow
        ref = StepRef(step.name, held.record, held.version, held.ack_ops)
        try:
            read = flow.handoff.read(held.record.id)
            rec = read[0] if read is not None else None
            if rec is None or rec.run != store.run_of(held.record) or rec.state is not FlowState.RUNNING:
                self._end(held, ref, None, read)  # the flow job failed meanwhile, or is gone: the step is dropped
                return
            job = StepJob(rec.id, step.name, held.record.attempts, rec.params, dict(rec.results), list(rec.errors),
                          copy.deepcopy(rec.data))
            before = copy.deepcopy(rec.data)
        except BaseException:
            held.release()
            raise
        try:
            value = step.handler(job)
            chosen = None
            if isinstance(value, Next):
                chosen = value.steps
                for name in chosen:
                    flow.definition.step(name)  # raises ConfigurationError for an unknown step
                value = value.result
            changed = {k: v for k, v in job.data.items() if before.get(k, _MISSING) != v}
            try:
                json.dumps([value, changed])
            except (TypeError, ValueError) as exc:
                raise SerializationError(f"step {step.name} returned a result (or data) that is not JSON: "
                                         f"{exc}") from exc
        except Exception as exc:
            self._failed(step, held, ref, exc, read)
            return
        self._end(held, ref, Ending(ok=True, result=value, chosen=chosen, errors=step_errors(step.name, held.record),
                                    data=changed), read)

    def _failed(self, step: Step, held: HeldJob, ref: StepRef, exc: Exception, read: Any) -> None:
        record = held.record
        trace = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
        errors = record.failed(f"{type(exc).__name__}: {exc}", trace)
        policy = self._flow.retry_of(step)
        if policy.retries(exc, record.attempts) and not isinstance(exc, (ConfigurationError, SerializationError)):
            delay = policy.delay(record.attempts)
            log.warning("step %s of flow job %s failed (attempt %d of %d): %s: %s; again in %.1fs", step.name,
                        record.id, record.attempts, policy.max_attempts, type(exc).__name__, exc, delay)
            held.finish(job_store.retry(self._flow.queue(step.name).paths, record, held.version,
                                        now_ms() + int(delay * 1000), errors))
            self._flow.handoff.counts.count(step.name, "retried")
            self._count()
            return
        log.warning("step %s of flow job %s is dead after attempt %d: %s: %s", step.name, record.id,
                    record.attempts, type(exc).__name__, exc)
        dead = StepRef(step.name, replace(record, errors=errors), ref.version, ref.ack_ops)
        self._end(held, dead, Ending(ok=False, errors=step_errors(step.name, dead.record)), read)

    def _end(self, held: HeldJob, ref: StepRef, ending: Ending | None, read: Any = handoff.UNREAD) -> None:
        try:
            outcome = self._flow.handoff.end(ref, ending, read)
        except Exception as exc:  # racing for ever, no connection, a refused request: the claim counted an attempt
            log.warning("step %s of flow job %s could not hand off (%r): given back for a retry", ref.step,
                        ref.job_id, exc)
            held.release()
            return
        except BaseException:
            held.release()
            raise
        if outcome == handoff.OK:
            held.forget()  # the item and the lease's nodes went in the hand-off's multi: nothing to send
            self._count()
        else:
            held.release()  # the lease was lost: let the engine clear whatever of it is still ours

    def _count(self) -> None:
        with self._lock:
            self.handled += 1


_MISSING = object()

__all__ = ["FlowWorker", "POLL_SECONDS"]
