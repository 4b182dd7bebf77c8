"""Holding jobs from the event loop: claiming them and ending them, for the async take scope
(:mod:`zkqueue.aio.jobs`). (Async job and flow workers run on the one worker runtime, :mod:`zkqueue.runtime`.)

It only needs what :class:`JobSource` names (the wrapped sync queue, the thread pool, the path). Claims and ends
are the job layer's own seams (``JobQueue.claim_many``, :func:`~zkqueue.jobs.scope.finish_many`,
:func:`~zkqueue.jobs.scope.release_many`): they block, so they run in the queue's
:class:`~zkqueue.aio.bridge.Offloader`, and the ends of many jobs go in one engine call, so their fenced completions
share multis instead of one round trip per job.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from zkqueue.engine.api import Completion
from zkqueue.aio.bridge import Offloader
from zkqueue.jobs.claims import Claimed
from zkqueue.jobs.queue import JobQueue
from zkqueue.jobs.scope import HeldJob, finish_many, release_many

log = logging.getLogger("zkqueue.aio.held")


class JobSource(Protocol):
    """What claiming and ending jobs from the loop needs of an async job queue
    (:class:`~zkqueue.aio.AsyncJobQueue` is one)."""

    @property
    def path(self) -> str: ...

    @property
    def sync(self) -> JobQueue: ...

    @property
    def offloader(self) -> Offloader: ...


async def claim_held(source: JobSource, max_jobs: int, wait: float | None, *,
                     block_leases: bool = False) -> list[HeldJob]:
    """``claim_many`` in the offloader; if the awaiting task is cancelled, what the claim still returns is given
    back with its attempts uncounted (nobody ran it) instead of being lost under a lease nobody ends."""
    fut = source.offloader.submit(source.sync.claim_many, max_jobs, wait, block_leases=block_leases)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        outcomes = source.sync.outcomes

        def give_back(f: asyncio.Future[list[HeldJob]]) -> None:
            if not f.cancelled() and f.exception() is None and f.result():
                source.offloader.submit_detached(
                    finish_many, [(h, outcomes.unstarted(Claimed(h.record, h.version))) for h in f.result()])

        fut.add_done_callback(give_back)
        raise


async def end_held(source: JobSource, ends: list[tuple[HeldJob, Completion]], give_back: list[HeldJob]) -> None:
    """Commit ``ends`` and release ``give_back``, each in one engine call, in the offloader."""
    if ends:
        await source.offloader.run(finish_many, ends)
    if give_back:
        await source.offloader.run(release_many, give_back)
