"""Typed exceptions raised by zkqueue. Every error a user can act on has its own class."""

from __future__ import annotations

from typing import Any


class ZkQueueError(Exception):
    """Base class of every zkqueue error."""


class EnvironmentProblem(ZkQueueError):
    """Something zkqueue needs on this machine is missing (java, jars, a free port)."""


class MissingExtraError(EnvironmentProblem, ImportError):
    """An optional part of zkqueue was used without the package it needs; the message names the extra that brings
    it (``pip install 'zkqueue[dashboard]'``). An ``ImportError`` too, so code that tries an optional import keeps
    working. ``package`` is the missing import name, ``extra`` the extra that installs it."""

    def __init__(self, package: str, extra: str, what: str | None = None, hint: str = "") -> None:
        needs = what or "this part of zkqueue"
        message = f"{needs} needs {package}, which is not installed: pip install 'zkqueue[{extra}]'"
        if hint:
            message += f" ({hint})"
        super().__init__(message)
        self.package = package
        self.extra = extra
        self.what = what
        self.hint = hint
        self.name = package  # ImportError's attribute: the module that could not be imported

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.package, self.extra, self.what, self.hint))


class ServerStartError(ZkQueueError):
    """An embedded ZooKeeper server did not come up; the message carries the tail of its log."""


class InvalidPathError(ZkQueueError, ValueError):
    """A ZooKeeper path that the server would reject, or one a queue cannot use."""


class ConfigurationError(ZkQueueError, ValueError):
    """A builder option or combination of options that cannot work."""


class QueueStateError(ZkQueueError, RuntimeError):
    """The queue is not in a state that allows the call."""


class QueueNotStartedError(QueueStateError):
    """The queue was used before ``start()``."""


class QueueClosedError(QueueStateError):
    """The queue was used after ``close()``."""


class ItemTooLargeError(ZkQueueError, ValueError):
    """A serialized item (with its framing) is larger than the server's packet limit (jute.maxbuffer)."""

    def __init__(self, size: int, limit: int, what: str = "item") -> None:
        super().__init__(
            f"{what} is {size} bytes framed, over the {limit}-byte limit (ZooKeeper jute.maxbuffer); "
            "split it or raise the limit on both server and client"
        )
        self.size = size
        self.limit = limit


class CorruptItemError(ZkQueueError, ValueError):
    """Bytes that are not a valid Curator ItemSerializer frame."""


class SerializationError(ZkQueueError):
    """The user's serializer failed to turn an item into bytes or back."""


class LockLostError(ZkQueueError):
    """This consumer no longer owns an item's lock (its session expired); the ack was refused."""


class LockPathConflictError(ConfigurationError):
    """The lock path cannot be used as configured (for example it is an item node, or holds data of its own)."""


class QueuePermissionError(ZkQueueError, PermissionError):
    """ZooKeeper refused an operation for lack of credentials (ACL)."""


class CuratorPeerError(ZkQueueError):
    """The Curator peer failed: a non-zero exit, a timeout, or output it should not have produced.

    ``stderr`` holds the tail of the peer's standard error (Java stack traces land there).
    """

    def __init__(self, message: str, *, returncode: int | None = None, stderr: str = "") -> None:
        detail = f"{message} (exit code {returncode})" if returncode is not None else message
        if stderr.strip():
            detail += "\n--- peer stderr (tail) ---\n" + stderr.rstrip()
        super().__init__(detail)
        self.returncode = returncode
        self.stderr = stderr


class NoSuchElementError(ZkQueueError, LookupError):
    """``element()``/``remove()`` on an empty SimpleDistributedQueue (Curator: NoSuchElementException)."""


class QueueFullError(QueueStateError):
    """A bounded queue (``max_items`` / the Spark sink's ``maxItems``) stayed full past the allowed wait."""


class JobNotFoundError(ZkQueueError, LookupError):
    """No job at this index of a job source (yet): ``JobLog.at`` past its head, or index 0 (the log's origin)."""


class JobPrunedError(JobNotFoundError):
    """The job at this index was pruned (``JobLog.prune``): a consumer resuming behind it cannot run it."""


class LogFormatError(ZkQueueError, ValueError):
    """A job log's nodes hold what :class:`~zkqueue.progress.JobLog` did not write (or another bucket size)."""


class AppendUncertainError(ZkQueueError):
    """An append's reply was lost and other appends followed: it may or may not be in the log.

    ``indexes`` are the indexes it has if it was stored."""

    def __init__(self, message: str, indexes: list[int]) -> None:
        super().__init__(message)
        self.indexes = indexes


class AppendConflictError(ZkQueueError):
    """An append (or hand-off) lost the compare-and-set race to other appenders on every try and gave up:
    nothing of it was written, so it is safe to call again."""


class ProgressFormatError(ZkQueueError, ValueError):
    """A progress node holds data that is not a stored processed index."""


class ProgressFencedError(QueueStateError):
    """This consumer is no longer the active one (its election node is gone, or the stored progress changed under
    it): the progress write or hand-off was refused."""


class PutOutcomeUnknown(ZkQueueError):
    """A put's reply was lost and ZooKeeper could not be reached again in time to learn whether it committed.

    ``marker`` is the producer lane's marker node and ``batch`` the put's number in that lane: the put committed
    exactly when the marker's number has reached ``batch``. A producer restarted with the same ``producer_id``
    can still answer it with :func:`zkqueue.engine.put_markers.put_committed`."""

    def __init__(self, message: str, marker: str, batch: int) -> None:
        super().__init__(message)
        self.marker = marker
        self.batch = batch


class SessionLostError(ZkQueueError):
    """The worker's ZooKeeper session ended while a request was outstanding: it expired, or the client did not
    reconnect within the session timeout. Ephemeral locks of that session are gone; the task has to fail.
    (Raised by :mod:`zkqueue.spark.clients`, which still exports the name.) The ``zkqueue://`` kombu transport
    raises it from ``drain_events`` when its connection's session ended (every message it held went back to its
    queue; its acks can no longer be made); it is one of the transport's ``connection_errors``, so kombu and
    Celery reconnect."""


class WaitTimeoutError(ZkQueueError, TimeoutError):
    """A wait for a job's end (``JobQueue.wait_result``, ``JobHandle.result``, ``AsyncJobQueue.wait_result``)
    ran out of time; the job itself goes on. A ``TimeoutError``, so ``except TimeoutError`` catches it."""


class JobTimeoutError(ZkQueueError, TimeoutError):
    """A job's handler ran past its ``timeout`` and was cancelled: the attempt failed (what the record keeps).
    (Raised by the workers; :mod:`zkqueue.aio` still exports the name.)"""


class JobFailedError(ZkQueueError):
    """A job ended without a result: it is in the dead letters. ``job`` is its record (a
    :class:`~zkqueue.jobs.Job`: attempts, every error kept), ``last_error`` its last error ("Type: message")."""

    def __init__(self, job: Any) -> None:
        super().__init__(f"job {job.id} is dead after {job.attempts} attempt(s): {job.last_error}")
        self.job = job
        self.last_error: str | None = job.last_error

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job,))


class JobDeadError(JobFailedError):
    """The job ended in the dead letters: what :meth:`JobQueue.wait_result <zkqueue.jobs.JobQueue.wait_result>`,
    ``JobHandle.result`` and :meth:`AsyncJobQueue.wait_result <zkqueue.aio.AsyncJobQueue.wait_result>` raise. A
    :class:`JobFailedError`, so either name catches it."""


class JobCancelledError(JobFailedError):
    """The job was cancelled (:meth:`JobQueue.cancel <zkqueue.jobs.JobQueue.cancel>`) before it ran or while it
    ran: what ``wait_result`` and ``JobHandle.result`` raise for it. A :class:`JobFailedError`, so that name catches
    it too."""

    def __init__(self, job: Any) -> None:
        ZkQueueError.__init__(self, f"job {job.id} was cancelled after {job.attempts} attempt(s)")
        self.job = job
        self.last_error = job.last_error


class CanvasFailedError(ZkQueueError):
    """A canvas (chain, group, chord) failed: a node was dead after its task's retries (``on_failure="fail"``).
    ``canvas`` is its record (a :class:`~zkqueue.flows.FlowJob`), ``errors`` its nodes' errors."""

    def __init__(self, canvas: Any) -> None:
        last = canvas.errors[-1] if canvas.errors else None
        why = f": node {last.step}: {last.error}" if last is not None else ""
        super().__init__(f"canvas {canvas.id} {canvas.state.value.lower()}{why}")
        self.canvas = canvas
        self.errors = list(canvas.errors)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.canvas,))


class CanvasCancelledError(CanvasFailedError):
    """The canvas was cancelled (``CanvasHandle.cancel``): what its ``result()`` raises. A
    :class:`CanvasFailedError`, so that name catches it too."""


class NonRetryableError(ZkQueueError):
    """Base of the errors that never retry a job, whatever its :class:`~zkqueue.jobs.RetryPolicy` says: the
    attempt that raises one sends the job to the dead letters (:meth:`RetryPolicy.retries
    <zkqueue.jobs.RetryPolicy.retries>`). A task or handler may raise a subclass of its own to give up at once."""


class UnknownTaskError(NonRetryableError, LookupError):
    """A job names a task this app does not know (its module was not imported by the worker), or no task at all
    (it was added by ``JobQueue.add``). ``task``, ``queue`` and ``job_id`` say which; never retried."""

    def __init__(self, task: str | None, queue: str | None, job_id: str | None = None, *, app: str = "") -> None:
        what = f"job {job_id!r}" if job_id is not None else "a job"
        where = f" in queue {queue!r}" if queue is not None else ""
        of = f" of {app}" if app else ""
        if task is None:
            message = (f"{what}{where} names no task (it was added by JobQueue.add, not by a task of the app): "
                       f"an app{of} cannot run it")
        else:
            message = (f"{what}{where} is for task {task!r}, which the app{of} does not know: import the module "
                       f"that defines it where the worker runs (or register it under that name)")
        super().__init__(message)
        self.task = task
        self.queue = queue
        self.job_id = job_id
        self.app = app

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unknown_task, (self.task, self.queue, self.job_id, self.app))


def _unknown_task(task: str | None, queue: str | None, job_id: str | None, app: str) -> UnknownTaskError:
    return UnknownTaskError(task, queue, job_id, app=app)


class TaskParamsError(NonRetryableError, ValueError):
    """A task's job holds params that are not ``{"args": [...], "kwargs": {...}}``: it cannot be called; never
    retried."""


class UndecodableParamsError(NonRetryableError, SerializationError):
    """A job's params (or stored result) cannot be read by its queue's serializer (added with another serializer,
    or written by hand): the job cannot run, and the attempt that finds it sends it to the dead letters at once;
    never retried. ``JobQueue.get`` and the listings still show such a job, its undecodable fields as raw bytes."""


class DuplicateTaskError(ConfigurationError):
    """A second, different function registered under a task name the app already has."""


class ConnectFailedError(ZkQueueError, ConnectionError):
    """No ZooKeeper session could be made for the connect string within the connect timeout (``zkqueue.App``
    connects on first use)."""


class ConnectionLostError(ZkQueueError, ConnectionError):
    """A read (``JobQueue.get``/``counts``, ``Flow.get``/``jobs``/``counts``, ...) found no connection to ZooKeeper
    and waited it out for its bounded time (a queue's ``put_outcome_wait``, a flow's ``read_wait``), and ZooKeeper
    was still not reachable: not a failover that ended in time but an outage. Nothing was written. ``what`` names the
    read, ``waited`` the seconds it waited, ``cause`` the last kazoo error (also ``__cause__``; None when no request
    was sent because the client never reconnected). A ``ConnectionError``, and not a kazoo error: the retry loops
    that catch kazoo's ``ConnectionLoss`` do not swallow it."""

    def __init__(self, what: str, waited: float, cause: BaseException | str | None = None) -> None:
        if cause is None:
            because = "the client did not reconnect"
        else:
            because = f"last error: {cause if isinstance(cause, str) else repr(cause)}"
        super().__init__(f"{what}: no connection to ZooKeeper; waited {waited:.1f} s for it to come back, in vain "
                         f"({because})")
        self.what = what
        self.waited = waited
        self.cause = cause

    def __reduce__(self) -> tuple[Any, ...]:
        cause = self.cause if self.cause is None or isinstance(self.cause, str) else repr(self.cause)
        return (type(self), (self.what, self.waited, cause))


class BrokerConnectionError(ZkQueueError, ConnectionError):
    """The ``zkqueue://`` kombu transport (:mod:`zkqueue.celery`) reached no ZooKeeper server of its broker URL in
    time. In the transport's ``connection_errors``: kombu's ``ensure`` and Celery's consumer reconnect on it, and
    fail over to an alternate URL."""


class WorkerLostError(ZkQueueError):
    """The process that ran a job's attempt died under it (a child of a process pool that exited, was killed by
    the system, or crashed): that attempt failed, and the job is retried by its policy."""


class TaskError(ZkQueueError):
    """A job's handler failed in a child process with an exception that could not be sent back as itself (it does
    not pickle), or its result could not be sent back; the message names the original type."""
