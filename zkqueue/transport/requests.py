"""Direct synchronous requests: one kazoo request record through the client's queue, one light reply slot.

:func:`call` sends any request record (``Create``, ``Transaction``, ``MultiRead``...) in order with every other
call of the client and waits for its reply in a ``Reply``, a lock the connection thread releases, instead of
kazoo's two async results chained on its completion thread. :func:`create` is ``client.create`` on this path;
the multi (:mod:`zkqueue.transport.multi`) and multiRead (:mod:`zkqueue.transport.reads`) modules send
through ``send_request`` and wait on the same slots.
"""

from __future__ import annotations

import threading
from typing import Any

from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from zkqueue.transport.ops import CreateOp, to_request

#: Errors meaning "we lost the connection; the outcome of the request is unknown".
CONNECTION_ERRORS = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)

__all__ = ["call", "create", "send_create"]


class Reply:
    """The slot kazoo's connection thread fills with one request's reply (``set``/``set_exception``).

    kazoo's synchronous calls wait through two async results chained on its completion thread (three thread
    hand-offs per request, a ``functools.wraps`` per call); this is one lock released by the connection thread.
    Only the first outcome counts (kazoo may report a closed connection twice for one request).
    """

    __slots__ = ("_done", "_settled", "exception", "value")

    def __init__(self) -> None:
        self._done = threading.Lock()
        self._done.acquire()
        self._settled = False
        self.value: Any = None
        self.exception: BaseException | None = None

    def set(self, value: Any = None) -> None:
        if not self._settled:
            self._settled = True
            self.value = value
            self._release()

    def set_exception(self, exception: BaseException) -> None:
        if not self._settled:
            self._settled = True
            self.exception = exception
            self._release()

    def _release(self) -> None:
        try:
            self._done.release()
        except RuntimeError:  # already released by a racing second outcome
            pass

    def get(self, timeout: float | None = None) -> Any:
        if not self._done.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise KazooTimeoutError(f"no reply within {timeout} seconds")
        self._done.release()
        if self.exception is not None:
            raise self.exception
        return self.value


def call(client: Any, request: Any, *, timeout: float | None = None) -> Any:
    """Send one kazoo request record (``Create``, ``Transaction``, ``MultiRead``...) and wait for its reply.

    The request goes through the client's own queue, in order with every other call; errors are raised as kazoo
    raises them (a request in flight when the connection drops fails with ConnectionLoss). Paths in the reply
    keep the chroot, except a ``Transaction``'s (kazoo removes it). With ``timeout`` a missing reply raises
    ``KazooTimeoutError``; the request may still complete later.
    """
    return send_request(client, request).get(timeout)


def enqueue(client: Any, request: Any, result: Any) -> None:
    """Queue a kazoo request record on ``client``, in order with its other calls; its reply (or error) is set on
    ``result`` (an async result). The one place zkqueue calls kazoo's private ``_call``: kazoo has no public way to
    send a request record it builds no method for (``MultiRead``, a prebuilt ``Transaction``)."""
    client._call(request, result)


def send_request(client: Any, request: Any) -> Reply:
    """Queue ``request`` on the client (in order with its other calls); the reply arrives in the returned slot."""
    reply = Reply()
    enqueue(client, request, reply)
    return reply


def create(client: Any, op: CreateOp, *, timeout: float | None = None) -> str:
    """Create one node (``op``) and return its path (with the server's sequence suffix, without the chroot):
    ``client.create`` through :func:`call`."""
    return client.unchroot(call(client, to_request(client, op), timeout=timeout))


def send_create(client: Any, op: CreateOp) -> Reply:
    """Send the create ``op`` now, in order with the client's other calls, without waiting: ``get()`` on the
    returned slot gives the created path (with the chroot) or raises the create's error. A request sent after it
    on the same session sees the node (ZooKeeper answers one session's requests in order), so parents can be
    created in the same round trip as the children put under them."""
    return send_request(client, to_request(client, op))
