"""Ordered job consumers with persisted progress (Flow's jobqueue on ZooKeeper).

```python
from zkqueue.progress import JobLog, ProgressConsumer
log = JobLog(client, "/logs/blocks")        # append-only; index = the entry's sequence number (first job: 1)
i = log.append(b"block 1")                  # -> 1; log.append_many([...]) -> indexes (one multi); log.head(); log.at(i)

def verify(index: int, job: bytes) -> None: ...   # raises -> retried with backoff, never skipped

c = ProgressConsumer(client, jobs=log, progress_path="/progress/verifier", worker=verify,
                     max_processing=8, max_search_ahead=1000, default_index=0)
with c:                                     # appends wake it (a watch); c.check() for other sources
    c.wait_processed(log.head(), timeout=60)
    print(c.processed_index, c.stats())
```

- ``jobs`` is any object with ``head()`` and ``at_index(i)``; :class:`JobLog` is the built-in one.
- The processed index only moves over consecutive finished jobs and is stored with a version-checked ``set``,
  fenced by the active consumer's election node, every ``progress_interval`` seconds or ``progress_batch`` jobs.
  After a crash the jobs above it run again (at-least-once).
- Several processes may run the same consumer: one is elected (kazoo's Lock recipe at
  ``<progress_path>/leader``), the others stand by and take over when its session ends.
- Pipelines: a worker ``worker(index, job, ctx)`` hands off to the next stage with
  ``ctx.append_and_done(next_log, data)``, one multi with this job's done marker: exactly once.
- ``JobLog.prune()`` deletes the buckets every registered consumer has processed.

Modules: ``log`` (JobLog), ``watch`` (append notifications), ``store`` (the progress node), ``window`` (in-memory
window), ``attempts`` (retries), ``leader`` (election), ``context`` (hand-offs), ``inflight`` (runs not ended yet,
waited for by ``stop()`` and by a new term), ``consumer`` (ProgressConsumer).
"""

from zkqueue.jobs.retry import RetryPolicy
from zkqueue.progress.consumer import Jobs, ProgressConsumer, ProgressStats
from zkqueue.progress.context import JobContext
from zkqueue.progress.log import JobLog
from zkqueue.progress.store import read_index

__all__ = ["JobContext", "JobLog", "Jobs", "ProgressConsumer", "ProgressStats", "RetryPolicy", "read_index"]
