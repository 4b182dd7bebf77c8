"""Typed exceptions raised by zkqueue. Every error a user can act on has its own class."""

from __future__ import annotations


class ZkQueueError(Exception):
    """Base class of every zkqueue error."""


class EnvironmentProblem(ZkQueueError):
    """Something zkqueue needs on this machine is missing (java, jars, a free port)."""


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
