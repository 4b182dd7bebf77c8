"""Flows: pipelines of job queues with atomic hand-off, fan-out and fan-in, and one shared record per flow job.

```python
from zkqueue.flows import Flow, FlowState, Next

flow = Flow(client, "/flows/access")
flow.step("check", check_access, next="update")                      # handler(job) -> result
flow.step("update", update_roles, next=["discord", "telegram"])      # fan-out: one job per next step
flow.step("discord", grant_discord)
flow.step("telegram", grant_telegram)
flow.step("notify", notify, after=["discord", "telegram"], on_failure="continue")   # fan-in (a join)
with flow:
    flow.add({"user": 62, "guild": 1985}, job_id="join-62-1985", step="check")   # the id, or None while running
    with flow.work(concurrency=4):          # 4 handlers at once over every step (or flow.work(steps=["check"]))
        job = flow.wait("join-62-1985", timeout=30)
    job.state is FlowState.COMPLETED and job.results["notify"]    # FlowJob(id, state, pending, results, errors,
                                                                  #         history, params, data)
```

Each step is a job queue of :mod:`zkqueue.jobs` (retries with the step's ``RetryPolicy``), worked by the one
worker runtime (:mod:`zkqueue.runtime`: attempts counted when they start, ``timeout=`` enforced, warm then cold
stops; see :mod:`zkqueue.flows.worker`). A step's end commits in ONE multi, fenced like the job layer's: its item
and job record go, the flow record takes its result and a history entry (version-checked: sibling branches that end
together serialize on it and retry), and the next steps' items are created; so a join is queued exactly once, by
the end of the last step it waits for. A handler may pick the next step at run time by returning
``Next("step", result)``. A dead step ends the flow job FAILED and drops its queued steps (``on_failure="fail"``,
the default) or lets it go on (``"continue"``, a join then runs with the failure recorded); a flow job with nothing
queued is over, so nothing waits for ever. ``max_concurrency`` bounds a step's runs across all workers (kazoo's
``Semaphore``: :mod:`zkqueue.flows.limits`). Layout: :mod:`zkqueue.flows.store`.
"""

from zkqueue.flows.definition import Step
from zkqueue.flows.flow import Flow
from zkqueue.flows.model import FlowJob, FlowState, HistoryEntry, Next, StepError, StepJob
from zkqueue.flows.worker import FlowWorker

__all__ = ["Flow", "FlowJob", "FlowState", "FlowWorker", "HistoryEntry", "Next", "Step", "StepError", "StepJob"]
