"""Job queues on the queue engine: distinct jobs with records and results, attempts counted when a job is claimed
(a crashed worker's attempt counts), retries with exponential backoff, dead letters, scoped takes and workers.

```python
from zkqueue.jobs import JobQueue, RetryPolicy, JobState
with JobQueue(client, "/jobs/mail", retry=RetryPolicy(max_attempts=5)) as jq:
    jq.add({"to": "a@b"}, job_id="mail-1")          # "mail-1", or None while that id is unfinished
    with jq.take(max_jobs=10, timeout=5.0) as jobs:  # all completed on a clean exit, all failed on an exception
        ...
    worker = jq.work(handler, concurrency=4)         # handler(job) -> result (stored); raises -> retry or dead
```

Every change of a job is one ZooKeeper multi fenced by the worker's lease: the claim counts the attempt; the ack
moves the record to ``completed/`` with the result; a failure requeues the item with a due time and records the
error; the last failure moves the record to ``dead/``. Layout: :mod:`zkqueue.jobs.store`. A ``rate_limit``
(:class:`RateLimit`) bounds the jobs started per time window across every worker: :mod:`zkqueue.jobs.rate`.
"""

from zkqueue.jobs.model import Job, JobError, JobState
from zkqueue.jobs.queue import JobQueue
from zkqueue.jobs.rate import RateLimit
from zkqueue.jobs.reaper import Keep
from zkqueue.jobs.repeats import Repeat
from zkqueue.jobs.retry import RetryPolicy
from zkqueue.jobs.scope import ClaimedJob, HeldJob, TakeScope

__all__ = ["ClaimedJob", "HeldJob", "Job", "JobError", "JobQueue", "JobState", "JobWorker", "Keep", "RateLimit",
           "Repeat", "RetryPolicy", "TakeScope"]


def __getattr__(name: str) -> object:
    if name == "JobWorker":  # the runtime's Worker (the layer above: imported on first use)
        from zkqueue.runtime.worker import Worker  # noqa: PLC0415

        return Worker
    raise AttributeError(f"module 'zkqueue.jobs' has no attribute {name!r}")
