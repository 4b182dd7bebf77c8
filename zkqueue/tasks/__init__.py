"""The task API: functions registered with an :class:`App`, enqueued as jobs by reference or by name, their results
read through a :class:`JobHandle`. The job queues of :mod:`zkqueue.jobs` are the layer underneath.

```python
import zkqueue

app = zkqueue.App("zk1:2181,zk2:2181/myapp")            # or App() with ZKQUEUE_CONNECT set; connects on first use

@app.task(queue="mail", retry=zkqueue.RetryPolicy(max_attempts=5), timeout=30.0)
def send_mail(to: str, subject: str = "") -> dict: ...

job = send_mail.enqueue("a@b", subject="hi")              # a JobHandle at once
job.result(timeout=30)                                    # on a ZooKeeper watch; JobFailedError when dead
send_mail.enqueue_with(args=("a@b",), job_id="welcome-42", delay=60)   # job.created: False if that id is unfinished
send_mail.enqueue_many([("a@b",), Call(args=("c@d",), kwargs={"subject": "hi"})])   # one add_all
app.enqueue("myapp.tasks.send_mail", "a@b")               # by name, without importing the task's module
app.job("welcome-42")                                     # a handle by id, in whichever queue holds it
chord((fetch.s(u) for u in urls), merge.s()).enqueue()    # canvases: chain, group, chord (zkqueue.flows.canvas)
```

A job's params are ``{"args": [...], "kwargs": {...}}``; its record names its task (``Job.task``) and carries its
task's ``max_attempts``. A worker runs ``app.resolve(job).call(job)``: a job whose task the worker's app does not
know fails at once, never retried (:class:`~zkqueue.errors.UnknownTaskError`).
"""

from zkqueue.flows.canvas import CanvasHandle, Signature, chain, chord, group
from zkqueue.tasks.app import App
from zkqueue.tasks.handle import JobHandle
from zkqueue.tasks.params import Call
from zkqueue.tasks.task import Task

__all__ = ["App", "Call", "CanvasHandle", "JobHandle", "Signature", "Task", "chain", "chord", "group"]
