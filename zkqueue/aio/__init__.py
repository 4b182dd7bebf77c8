"""asyncio for zkqueue: job queues and plain queues for asyncio services and async workers.

```python
from zkqueue.aio import AsyncJobQueue, AsyncQueue, connect
client = await connect("zk1:2181,zk2:2181")
async with AsyncJobQueue(client, "/jobs/mail", retry=RetryPolicy(max_attempts=5)) as jq:
    await jq.add({"to": "a@b"}, job_id="mail-1", timeout=30.0)
    result = await jq.wait_result("mail-1", timeout=30)
    worker = jq.work(send_mail, concurrency=200)     # async def send_mail(job) -> result
    await worker.stop()
```

kazoo has no asyncio API: its results, watches and state changes cross to the loop through
``loop.call_soon_threadsafe`` (:mod:`zkqueue.aio.bridge`). The engine seams that have no async form (the
exactly-once add, claims, fenced completions, puts) run in one small thread pool per queue, never a thread per
call. Semantics are those of :mod:`zkqueue.jobs`, :mod:`zkqueue.flows`, :mod:`zkqueue.progress` and the engine:
these classes wrap them (AsyncFlow, AsyncProgressConsumer: coroutine step handlers and workers on the loop).
"""

from zkqueue.aio.client import connect, disconnect
from zkqueue.aio.flow import AsyncFlow
from zkqueue.aio.flow_worker import AsyncFlowWorker
from zkqueue.aio.jobs import AsyncJobQueue, AsyncTakeScope, JobDeadError
from zkqueue.errors import JobCancelledError
from zkqueue.aio.progress import AsyncJobContext, AsyncProgressConsumer
from zkqueue.aio.queue import NOTHING, AsyncQueue
from zkqueue.aio.worker import AsyncWorker, JobTimeoutError

__all__ = ["NOTHING", "AsyncFlow", "AsyncFlowWorker", "AsyncJobContext", "AsyncJobQueue", "AsyncProgressConsumer",
           "AsyncQueue", "AsyncTakeScope", "AsyncWorker", "JobCancelledError", "JobDeadError", "JobTimeoutError", "connect",
           "disconnect"]
