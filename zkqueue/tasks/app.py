"""App: the task API over job queues. ``app = zkqueue.App("zk1:2181,zk2:2181/myapp")``, ``@app.task`` to declare
tasks, ``task.enqueue(...)`` / ``app.enqueue("module.name", ...)`` to queue jobs, ``handle.result(timeout)`` to
wait for one, and ``app.resolve(job).call(job)`` in a worker. See :mod:`zkqueue.tasks`."""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Callable, TypeVar, overload

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zkqueue.engine import api
from zkqueue.errors import ConfigurationError, JobNotFoundError, UnknownTaskError
from zkqueue.formats.serializers import JsonSerializer
from zkqueue.jobs import store
from zkqueue.jobs.model import Job, check_timeout
from zkqueue.jobs.queue import JobQueue
from zkqueue.jobs.retry import RetryPolicy
from zkqueue.tasks import naming
from zkqueue.tasks.connection import Connection
from zkqueue.tasks.handle import JobHandle
from zkqueue.tasks.params import Call, to_params
from zkqueue.tasks.registry import Registry
from zkqueue.tasks.task import Task

log = logging.getLogger("zkqueue.tasks.app")

F = TypeVar("F", bound=Callable[..., Any])
#: JobQueue keywords an app sets itself (``queue_options`` cannot).
_OWN_QUEUE_OPTIONS = frozenset({"client", "path", "retry", "serializer"})


class App:
    """Tasks and their job queues on one ZooKeeper ensemble, under ``/<namespace>`` (default ``/zkqueue``): queue
    ``q`` at ``/<namespace>/queues/q``, the worker registry at :attr:`workers_path`.

    ``connect``: a kazoo connect string (``"zk1:2181,zk2:2181/myapp"``, a chroot allowed); default: the
    ``ZKQUEUE_CONNECT`` environment variable. Or ``client``: a started KazooClient the caller owns. The app
    connects on first use (``connect_timeout`` seconds; ``client_options`` go to KazooClient) and ``close()`` (or
    ``with app:``) ends it. ``serializer`` turns params and results into bytes (JSON by default); ``retry`` is the
    :class:`~zkqueue.jobs.RetryPolicy` of tasks without their own (and of the queues); ``queue_options`` are other
    :class:`~zkqueue.jobs.JobQueue` keywords for every queue (``keep_completed``, ``rate_limit``, ...).
    Thread-safe; after a fork the child connects on its own.
    """

    def __init__(self, connect: str | None = None, *, client: KazooClient | None = None,
                 namespace: str = naming.DEFAULT_NAMESPACE, serializer: Any = None, retry: RetryPolicy | None = None,
                 connect_timeout: float = 15.0, client_options: Mapping[str, Any] | None = None,
                 queue_options: Mapping[str, Any] | None = None) -> None:
        self.namespace = naming.check_namespace(namespace)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigurationError(f"retry must be a RetryPolicy, got {retry!r}")
        self.retry = retry or RetryPolicy()
        if serializer is not None and not (callable(getattr(serializer, "serialize", None))
                                           and callable(getattr(serializer, "deserialize", None))):
            raise ConfigurationError(f"serializer must have serialize() and deserialize(), got {serializer!r}")
        self.serializer = serializer or JsonSerializer()
        options = dict(queue_options or {})
        taken = sorted(_OWN_QUEUE_OPTIONS & set(options))
        if taken:
            raise ConfigurationError(f"queue_options cannot set {', '.join(taken)}: the app sets them")
        self._queue_options = options
        self._connection = Connection(connect, client, connect_timeout, client_options)
        self._registry = Registry()
        self._queues: dict[str, JobQueue] = {}
        self._lock = threading.Lock()
        self._canvases: Any = None  # the CanvasHandoff of this app's canvases, made on first use
        self._canvas_flow: Any = None  # a read-only Flow over the canvas records (get, wait)

    # ------------------------------------------------------------------------------------------ connection
    @property
    def connect(self) -> str | None:
        """The connect string (None for an app made with a client)."""
        return self._connection.connect

    @property
    def client(self) -> KazooClient:
        """The app's KazooClient, connected on first use."""
        self._check_process()
        return self._connection.client()

    def _check_process(self) -> None:
        if self._connection.forked():  # a child process: the parent's queues and their threads are not here
            self._queues = {}
            self._lock = threading.Lock()
            self._canvases = self._canvas_flow = None

    def close(self) -> None:
        """Close the app's job queues (their workers stop first) and a client it made. Idempotent; the app cannot
        be used afterwards (:class:`~zkqueue.errors.QueueClosedError`)."""
        self._check_process()
        with self._lock:
            queues, self._queues = list(self._queues.values()), {}
            self._connection.closed = True
            flow, self._canvas_flow = self._canvas_flow, None
        if flow is not None:
            flow.close()
        for jq in queues:
            try:
                jq.close()
            except Exception:  # noqa: BLE001 - close the others and the client anyway
                log.warning("closing job queue %s failed", jq.paths.root, exc_info=True)
        self._connection.close()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ tasks
    @overload
    def task(self, fn: F, /) -> Task[Any, Any]: ...

    @overload
    def task(self, fn: None = None, /, *, name: str | None = None, queue: str | None = None,
             retry: RetryPolicy | None = None, timeout: float | None = None) -> Callable[[F], Task[Any, Any]]: ...

    def task(self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None, queue: str | None = None,
             retry: RetryPolicy | None = None, timeout: float | None = None) -> Any:
        """Register a function as a task: ``@app.task`` or ``@app.task(queue="mail", retry=RetryPolicy(...),
        timeout=30.0)``. ``name``: default ``module.qualname``; ``queue``: default ``"default"``; ``retry``: its
        jobs' policy (its ``max_attempts`` is stored in each job's record), default the app's; ``timeout``:
        seconds one attempt may run (each enqueue may give another). Coroutine functions are tasks too (the
        worker runs them on a loop). :class:`~zkqueue.errors.DuplicateTaskError` for a name taken by another
        function."""
        queue = naming.check_queue_name(queue) if queue is not None else naming.DEFAULT_QUEUE
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigurationError(f"retry must be a RetryPolicy or None, got {retry!r}")
        timeout = check_timeout(timeout)
        if name is not None:
            naming.check_task_name(name)

        def register(fn: Callable[..., Any]) -> Task[Any, Any]:
            if not callable(fn) or isinstance(fn, Task):
                raise ConfigurationError(f"@app.task needs a function, got {fn!r}")
            task_name = name if name is not None else naming.check_task_name(naming.default_task_name(fn))
            return self._registry.add(Task(self, fn, name=task_name, queue=queue, retry=retry, timeout=timeout))

        if fn is not None:
            return register(fn)
        return register

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]:
        """The registered tasks by name (a read-only, live view)."""
        return self._registry.view

    def resolve(self, job: Job) -> Task[Any, Any]:
        """The task that runs ``job`` (by the name in its record); :class:`~zkqueue.errors.UnknownTaskError`
        (never retried) when this app does not know it, or the job names no task."""
        task = self._registry.get(job.task)
        if task is None:
            raise UnknownTaskError(job.task, naming.queue_of_path(self.namespace, job.queue_path), job.id,
                                   app=self._describe())
        return task

    # ------------------------------------------------------------------------------------------ queues
    def queue_path(self, queue: str) -> str:
        """The path of the job queue named ``queue``: ``/<namespace>/queues/<queue>``."""
        return naming.queue_path(self.namespace, naming.check_queue_name(queue))

    @property
    def workers_path(self) -> str:
        """Where the app's live workers register: ``/<namespace>/workers``."""
        return naming.workers_path(self.namespace)

    def queue(self, name: str) -> JobQueue:
        """The started :class:`~zkqueue.jobs.JobQueue` named ``name`` on the app's client (one per name, made on
        first use; the app closes it)."""
        path = self.queue_path(name)
        self._check_process()
        jq = self._queues.get(name)
        if jq is not None:
            return jq
        client = self._connection.client()
        with self._lock:
            jq = self._queues.get(name)
            if jq is None:
                jq = JobQueue(client, path, retry=self.retry, serializer=self.serializer,
                              on_exhausted=functools.partial(self._exhausted, name), **self._queue_options)
                jq.start()
                self._queues[name] = jq
                log.debug("job queue %s started", path)
        return jq

    def queue_names(self) -> list[str]:
        """The queues of the registered tasks and those that exist in ZooKeeper, sorted."""
        try:
            stored = self.client.get_children(naming.queues_path(self.namespace))
        except NoNodeError:
            stored = []
        return sorted(self._registry.queues() | set(stored))

    # ------------------------------------------------------------------------------------------ enqueueing
    def enqueue(self, name: str, /, *args: Any, **kwargs: Any) -> JobHandle:
        """Queue a job of the task called ``name`` (its module need not be imported here) with these arguments;
        its handle at once. The queue is the task's when it is registered here, else ``"default"``; every keyword
        is the task's (options go through :meth:`enqueue_with`)."""
        return self.enqueue_with(name, args=args, kwargs=kwargs)

    def enqueue_with(self, name: str, *, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                     queue: str | None = None, job_id: str | None = None, delay: float | None = None,
                     run_at: datetime | None = None, priority: int = 0, timeout: float | None = None) -> JobHandle:
        """:meth:`enqueue` with options: ``queue`` (default: the task's if registered here, else ``"default"``),
        and those of :meth:`Task.enqueue_with <zkqueue.tasks.Task.enqueue_with>`."""
        task, queue, timeout = self._target(name, queue, timeout)
        params = to_params(args, kwargs)
        job_id = uuid.uuid4().hex if job_id is None else job_id
        jq = self.queue(queue)
        added = jq.add(params, job_id, delay=delay, run_at=run_at, priority=priority, timeout=timeout, task=name,
                       max_attempts=task.max_attempts if task is not None else None)
        return JobHandle(jq, queue, job_id, created=added is not None, task=name)

    def enqueue_many(self, name: str, items: Iterable[Any], *, queue: str | None = None, delay: float | None = None,
                     run_at: datetime | None = None, priority: int = 0, timeout: float | None = None
                     ) -> list[JobHandle]:
        """Queue a job of task ``name`` per item in one ``JobQueue.add_all``; see :meth:`Task.enqueue_many
        <zkqueue.tasks.Task.enqueue_many>` for the items. Handles in item order; an id given twice (or
        unfinished already) has ``created`` False except on its first, created, occurrence."""
        task, queue, timeout = self._target(name, queue, timeout)
        calls = [Call.of(item) for item in items]
        if not calls:
            return []
        ids = [call.job_id if call.job_id is not None else uuid.uuid4().hex for call in calls]
        jobs = [(job_id, to_params(call.args, call.kwargs)) for job_id, call in zip(ids, calls)]
        jq = self.queue(queue)
        rejected = Counter(jq.add_all(jobs, delay=delay, run_at=run_at, priority=priority, timeout=timeout,
                                      task=name, max_attempts=task.max_attempts if task is not None else None))
        given, seen = Counter(ids), Counter[str]()
        handles = []
        for job_id in ids:
            created = seen[job_id] == 0 and rejected[job_id] < given[job_id]
            seen[job_id] += 1
            handles.append(JobHandle(jq, queue, job_id, created=created, task=name))
        return handles

    def _target(self, name: str, queue: str | None, timeout: float | None
                ) -> tuple[Task[Any, Any] | None, str, float | None]:
        """The registered task called ``name`` (or None), the queue its job goes to, and the job's timeout."""
        naming.check_task_name(name)
        task = self._registry.get(name)
        if queue is not None:
            queue = naming.check_queue_name(queue)
        else:
            queue = task.queue if task is not None else naming.DEFAULT_QUEUE
        timeout = check_timeout(timeout)
        if timeout is None and task is not None:
            timeout = task.timeout
        return task, queue, timeout

    # ------------------------------------------------------------------------------------------ looking
    def job(self, job_id: str, queue: str | None = None) -> JobHandle:
        """A handle of the job ``job_id`` in ``queue``, or (None) in whichever of :meth:`queue_names` holds it
        (one multiRead for all). :class:`~zkqueue.errors.JobNotFoundError` if no queue holds it; a
        ConfigurationError if several do (give ``queue``)."""
        if queue is not None:
            jq = self.queue(queue)
            job = jq.get(job_id)
            if job is None:
                raise JobNotFoundError(f"no job {job_id!r} in queue {queue!r}")
            return JobHandle(jq, queue, job_id, created=False, task=job.task)
        names = self.queue_names()
        paths = {name: store.Paths(naming.queue_path(self.namespace, name)) for name in names}
        reads = [(name, path) for name in names
                 for path in (paths[name].record(job_id), *paths[name].ended(job_id))]
        found = sorted({name for (name, _p), res in zip(reads, api.multi_read(self.client, [p for _n, p in reads]))
                        if not isinstance(res, BaseException)}) if reads else []
        if not found:
            raise JobNotFoundError(f"no job {job_id!r} in any queue of the app ({', '.join(names) or 'none'})")
        if len(found) > 1:
            raise ConfigurationError(f"job id {job_id!r} is in queues {', '.join(found)}: give queue=")
        return self.job(job_id, found[0])

    # ------------------------------------------------------------------------------------------ canvases
    @property
    def canvases_path(self) -> str:
        """Where the app's canvases (chain, group, chord) keep their records: ``/<namespace>/canvases``."""
        return f"/{self.namespace}/canvases"

    def canvases(self) -> Any:
        """The :class:`~zkqueue.flows.canvas_handoff.CanvasHandoff` of the app's canvases (made on first use)."""
        self._check_process()
        if self._canvases is None:
            from zkqueue.flows.canvas_handoff import CanvasHandoff

            self.client  # connects first
            with self._lock:
                if self._canvases is None:
                    self._canvases = CanvasHandoff(self)
        return self._canvases

    def canvas_flow(self) -> Any:
        """A read-only :class:`~zkqueue.flows.Flow` over the canvas records (``get``, ``wait``)."""
        canvases = self.canvases()
        if self._canvas_flow is None:
            from zkqueue.flows.flow import Flow

            canvases.ensure()
            flow = Flow(self.client, self.canvases_path, keep=None)
            flow.start(create=False)
            self._canvas_flow = flow
        return self._canvas_flow

    def canvas(self, canvas_id: str) -> Any:
        """A :class:`~zkqueue.flows.canvas.CanvasHandle` of the canvas ``canvas_id`` (to read its state, wait for
        its result or cancel it later)."""
        from zkqueue.flows.canvas import CanvasHandle

        if not isinstance(canvas_id, str) or not canvas_id:
            raise ConfigurationError(f"a canvas id is a non-empty str, got {canvas_id!r}")
        return CanvasHandle(self, canvas_id, created=False)

    def _exhausted(self, queue: str, record: Any, version: int) -> Any:
        """Each queue's ``on_exhausted``: a canvas node's job out of attempts (its workers kept dying) is dead in
        its canvas record, in the claim's multi; other jobs go to the dead letters (None)."""
        if not record.headers or "zkqueue.canvas" not in record.headers:
            return None
        return self.canvases().exhausted_node(queue, record, version)

    # ------------------------------------------------------------------------------------------ describing
    def _describe(self) -> str:
        where = f" at {self.connect}" if self.connect is not None else ""
        return f"/{self.namespace}{where}"

    def __repr__(self) -> str:
        return f"App({self.connect!r}, namespace={self.namespace!r}, tasks={len(self._registry.view)})"
