"""AsyncFlow: the flows of :mod:`zkqueue.flows` for asyncio code, on the same records and hand-offs.

It wraps a :class:`~zkqueue.flows.Flow` (:attr:`AsyncFlow.sync`) on the same client and path, so flow records,
step queues, retries, fan-out and joins are the sync layer's own, and sync and async flows on one path work
together (a sync ``add`` runs on async workers and the other way round). How each call reaches ZooKeeper without
blocking the loop:

- ``get``, ``wait``: kazoo's async requests and a watch on the flow record, bridged to the loop
  (:mod:`zkqueue.aio.bridge`); ``wait`` sleeps until the record changes, it does not poll.
- ``start``, ``close``, ``add``, ``counts``, ``jobs``, ``reap``, and the workers' reads of a flow record before a
  step and their step ends (hand-offs, retries): the sync call in the flow's ONE small thread pool
  (:class:`~zkqueue.aio.bridge.Offloader`), never a thread per call.
- ``work``: coroutine step handlers on the loop, on the one worker runtime, whose threads claim, start and time
  step jobs (:mod:`zkqueue.aio.flow_worker`).

```python
flow = AsyncFlow(client, "/flows/access", retry=RetryPolicy(max_attempts=3))
flow.step("check", check_access, next="update")          # async def check_access(job) -> result
flow.step("update", update_roles, next=["discord", "telegram"], timeout=10.0)
flow.step("discord", grant_discord)
flow.step("telegram", grant_telegram)
async with flow:
    await flow.add({"user": 62}, job_id="join-62", step="check")
    async with flow.work(concurrency=50):
        job = await flow.wait("join-62", timeout=30)
```
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any, Callable, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zkqueue.aio.lifecycle import Opened
from zkqueue.aio.bridge import Offloader, from_kazoo, to_loop
from zkqueue.aio.flow_worker import AsyncFlowWorker
from zkqueue.errors import ConfigurationError, QueueStateError
from zkqueue.flows.flow import Flow
from zkqueue.flows.model import FlowJob, FlowRecord
from zkqueue.jobs import Keep, RetryPolicy
from zkqueue.jobs.model import check_timeout

log = logging.getLogger("zkqueue.aio.flow")


class AsyncFlow(Opened):
    """A flow at ``path`` for asyncio code: define steps with :meth:`step`, then ``async with flow:``.

    ``retry``, ``acl``, ``keep`` and ``reap_interval`` are those of :class:`~zkqueue.flows.Flow`.
    ``executor_threads`` sizes the thread pool of the blocking seams; None (default) picks 4 plus one per step
    when the flow starts.
    """

    kind = "flow"

    def __init__(self, client: KazooClient, path: str, *, retry: RetryPolicy | None = None,
                 acl: Sequence[Any] | None = None, keep: Keep | None = Keep(), reap_interval: float = 60.0,
                 executor_threads: int | None = None) -> None:
        #: The sync flow this one wraps (same client, path, steps and options).
        self.sync = Flow(client, path, retry=retry, acl=acl, keep=keep, reap_interval=reap_interval)
        if executor_threads is not None and (isinstance(executor_threads, bool)
                                             or not isinstance(executor_threads, int) or executor_threads < 1):
            raise ConfigurationError(f"executor_threads must be an int >= 1 or None, got {executor_threads!r}")
        self._executor_threads = executor_threads
        self._reap_interval = float(reap_interval)
        self._timeouts: dict[str, float | None] = {}
        self._offloader: Offloader | None = None
        self._workers: list[AsyncFlowWorker] = []
        self._reaper: asyncio.Task[None] | None = None
        self._state = "new"

    @property
    def path(self) -> str:
        return self.sync.paths.root

    @property
    def client(self) -> KazooClient:
        return self.sync.client

    @property
    def offloader(self) -> Offloader:
        """The thread pool of the blocking seams (made by :meth:`start`)."""
        if self._offloader is None:
            raise ConfigurationError(f"flow {self.path} is not started; use 'async with' or await start()")
        return self._offloader

    # ------------------------------------------------------------------------------------------ definition
    def step(self, name: str, handler: Callable[[Any], Any], *, next: str | Sequence[str] | None = None,  # noqa: A002
             after: Sequence[str] | None = None, on_failure: str | None = None, retry: RetryPolicy | None = None,
             max_concurrency: int | None = None, max_per_second: int | None = None,
             timeout: float | None = None) -> AsyncFlow:
        """Define step ``name`` as :meth:`Flow.step <zkqueue.flows.Flow.step>` does; :meth:`work` needs
        ``handler`` to be a coroutine function (``async def handler(job)``). ``timeout``: seconds a run of this
        step may take before it is cancelled and the attempt fails (default: the ``timeout`` given to
        :meth:`work`, else none). Returns the flow."""
        timeout = check_timeout(timeout)
        self.sync.step(name, handler, next=next, after=after, on_failure=on_failure, retry=retry,
                       max_concurrency=max_concurrency, max_per_second=max_per_second)
        self._timeouts[name] = timeout
        return self

    # ------------------------------------------------------------------------------------------ lifecycle
    async def start(self, *, create: bool = True) -> None:
        """Check the steps and create the flow's nodes and step queues (in the thread pool);
        ``create=False`` opens it read-only (see :meth:`Flow.start <zkqueue.flows.Flow.start>`)."""
        if self._state != "new":
            raise QueueStateError(f"async flow {self.path} was already started")
        self._state = "started"
        threads = self._executor_threads or 4 + len(self.sync.definition.steps)
        self._offloader = Offloader(threads, f"zkqueue-aio-flow-{self.path}")
        await self._offloader.run(self.sync.start, create=create)

    async def close(self) -> None:
        """Stop every worker (running handlers finish and commit), then the flow. Idempotent."""
        if self._state in ("closed", "new"):
            self._state = "closed"
            return
        self._state = "closed"
        for worker in list(self._workers):
            await worker.stop()
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
        off = self.offloader
        try:
            await off.run(self.sync.close)
        finally:
            off.shutdown()


    # ------------------------------------------------------------------------------------------ adding
    async def add(self, params: Any, job_id: str | None = None, *, step: str | None = None,
                  headers: dict[str, Any] | None = None, delay: float | None = None, run_at: datetime | None = None,
                  priority: int = 0) -> str | None:
        """:meth:`Flow.add <zkqueue.flows.Flow.add>` in the thread pool: the id, or None while a flow job with
        that id is running."""
        self._check_open()
        return await self.offloader.run(self.sync.add, params, job_id, step=step, headers=headers, delay=delay,
                                        run_at=run_at, priority=priority)

    async def cancel(self, job_id: str) -> bool:
        """:meth:`Flow.cancel <zkqueue.flows.Flow.cancel>` in the thread pool: True if the flow job was running
        (now CANCELLED), False for an unknown or finished id."""
        self._check_open()
        return await self.offloader.run(self.sync.cancel, job_id)

    # ------------------------------------------------------------------------------------------ working
    def work(self, concurrency: int = 1, steps: Sequence[str] | None = None, *, timeout: float | None = None,
             slow_after: float | None = 0.1) -> AsyncFlowWorker:
        """Run the coroutine handlers of every step (or only ``steps``) on this loop until ``await worker.stop()``
        or close(): ``concurrency`` runs per step worked, shared across those steps (``concurrency`` x the number of
        steps at once in all). ``timeout`` is the default of steps defined without one; a handler step that blocks
        the loop longer than ``slow_after`` seconds is reported once per step job. See
        :mod:`zkqueue.aio.flow_worker`. Call it from a coroutine."""
        self._check_open()
        if isinstance(steps, str):
            steps = [steps]
        defn = self.sync.definition
        chosen = [defn.step(s) for s in steps] if steps is not None else list(defn.steps.values())
        if not chosen:
            raise ConfigurationError("no steps to work on")
        default = check_timeout(timeout)
        own = {s.name: self._timeouts.get(s.name) for s in chosen}
        timeouts = {name: default if t is None else t for name, t in own.items()}
        worker = AsyncFlowWorker(self.sync, self.offloader, chosen, concurrency, timeouts, slow_after,
                                 on_stopped=self._forget_worker)
        self._workers.append(worker)
        if self.sync.keep is not None and self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever(),
                                                                   name=f"zkqueue-aio-flow-reaper-{self.path}")
        return worker

    def _forget_worker(self, worker: AsyncFlowWorker) -> None:
        if worker in self._workers:
            self._workers.remove(worker)

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self._reap_interval)
            try:
                await self.reap()
            except Exception:
                log.warning("reaping the flow records of %s failed; again in %.0fs", self.path,
                            self._reap_interval, exc_info=True)

    # ------------------------------------------------------------------------------------------ looking
    async def get(self, job_id: str) -> FlowJob | None:
        """The flow job ``job_id`` (running or finished), or None if unknown: one async read."""
        try:
            data, _stat = await from_kazoo(self.client.get_async(self.sync.paths.flow(job_id)))
        except NoNodeError:
            return None
        return FlowJob.of(FlowRecord.decode(data))

    async def wait(self, job_id: str, timeout: float | None = None) -> FlowJob:
        """The flow job ``job_id`` once it finished (COMPLETED or FAILED): waits on a ZooKeeper watch of its
        record (no polling). Raises ``TimeoutError`` after ``timeout`` seconds,
        :class:`~zkqueue.errors.QueueStateError` for an unknown id."""
        async with asyncio.timeout(timeout):
            return await self._wait(job_id)

    async def _wait(self, job_id: str) -> FlowJob:
        path = self.sync.paths.flow(job_id)
        changed = asyncio.Event()
        wake = to_loop(asyncio.get_running_loop(), lambda *_a: changed.set())
        self.client.add_listener(wake)  # a reconnect (a lost session drops watches): look again
        try:
            while True:
                changed.clear()
                try:
                    data, _stat = await from_kazoo(self.client.get_async(path, watch=wake))
                except NoNodeError:
                    raise QueueStateError(f"no flow job {job_id!r} in {self.path}") from None
                job = FlowJob.of(FlowRecord.decode(data))
                if job.state.finished:
                    return job
                await changed.wait()
        finally:
            self.client.remove_listener(wake)

    async def jobs(self) -> list[FlowJob]:
        """:meth:`Flow.jobs <zkqueue.flows.Flow.jobs>` (in the thread pool)."""
        return await self.offloader.run(self.sync.jobs)

    async def counts(self) -> dict[str, Any]:
        """:meth:`Flow.counts <zkqueue.flows.Flow.counts>` (in the thread pool)."""
        return await self.offloader.run(self.sync.counts)

    async def reap(self) -> int:
        """:meth:`Flow.reap <zkqueue.flows.Flow.reap>` (in the thread pool)."""
        return await self.offloader.run(self.sync.reap)

    def stats(self) -> dict[str, dict[str, int]]:
        """:meth:`Flow.stats <zkqueue.flows.Flow.stats>` (counters in memory: no I/O)."""
        return self.sync.stats()

    def __repr__(self) -> str:
        return f"AsyncFlow(path={self.path!r}, steps={list(self.sync.definition.steps)!r})"
