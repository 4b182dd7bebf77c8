"""Ending many held jobs in one engine call: the async worker and scope finish the jobs of a batch together, so
their fenced completions share multis (``complete_nodes`` packs them) instead of one round trip per job.

:class:`~zkqueue.jobs.scope.HeldJob` ends one job per call (``finish`` / ``release``). The batch forms below set the
same fields ``finish``/``release`` set and call the same engine seam (``complete_nodes`` / ``release_nodes``) once
for the batch. They read HeldJob's private fields: a public ``HeldJob.finish_many`` in :mod:`zkqueue.jobs.scope`
would replace them (a seam asked for in issue 21's report). These functions block: they run in the queue's
:class:`~zkqueue.aio.bridge.Offloader`.
"""

from __future__ import annotations

import logging
from typing import Sequence

from zkqueue.engine.seams import Completion
from zkqueue.jobs.scope import HeldJob

log = logging.getLogger("zkqueue.aio.held")


def finish_many(pairs: Sequence[tuple[HeldJob, Completion]]) -> None:
    """End each held job by its completion, in as few fenced multis as possible (never raises for a job: the
    engine logs, retries or releases what fails)."""
    todo = [(h, c) for h, c in pairs if not h._done]
    if not todo:
        return
    outcomes = []
    for held, completion in todo:
        held._done = True
        held._outcome.completion = completion
        outcomes.append(held._outcome)
    todo[0][0]._complete(outcomes)


def release_many(helds: Sequence[HeldJob]) -> None:
    """Give held jobs back untouched (their counted attempts stay counted); they can be claimed again at once."""
    todo = [h for h in helds if not h._done]
    if not todo:
        return
    for held in todo:
        held._done = True
    todo[0]._release([h._outcome for h in todo])
