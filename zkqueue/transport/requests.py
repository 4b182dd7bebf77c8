"""Direct synchronous requests: one kazoo request record through the client's queue, one light reply slot.

:func:`call` sends any request record (``Create``, ``Transaction``, ``MultiRead``...) in order with every other
call of the client and waits for its reply in a ``Reply``, a lock the connection thread releases, instead of
kazoo's two async results chained on its completion thread. :func:`create` is ``client.create`` on this path;
the multi (:mod:`zkqueue.transport.multi`) and multiRead (:mod:`zkqueue.transport.reads`) modules send
through ``send_request`` and wait on the same slots.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import GetChildren2

from zkqueue.transport.ops import CreateOp, _chroot, full_path, to_request

#: Errors meaning "we lost the connection; the outcome of the request is unknown".
CONNECTION_ERRORS = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)

log = logging.getLogger("zkqueue.transport.requests")

__all__ = ["CallbackReply", "call", "create", "send_create", "send_get_children", "send_request"]


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


class CallbackReply(Reply):
    """A :class:`Reply` that also calls ``on_reply(value, exception)`` once, where it is filled: on kazoo's
    connection thread as the reply is read (before the replies that came after it), or in the sender's thread
    when kazoo refuses the request at once (a closed client). ``on_reply`` must be quick and must not block.
    What it raises is logged."""

    __slots__ = ("_on_reply",)

    def __init__(self, on_reply: Callable[[Any, BaseException | None], None]) -> None:
        super().__init__()
        self._on_reply = on_reply

    def set(self, value: Any = None) -> None:
        if not self._settled:
            super().set(value)
            self._notify(value, None)

    def set_exception(self, exception: BaseException) -> None:
        if not self._settled:
            super().set_exception(exception)
            self._notify(None, exception)

    def _notify(self, value: Any, exception: BaseException | None) -> None:
        try:
            self._on_reply(value, exception)
        except Exception:  # never let it take kazoo's connection thread down
            log.exception("a reply callback raised")


def send_request(client: Any, request: Any,
                 on_reply: Callable[[Any, BaseException | None], None] | None = None) -> Reply:
    """Queue ``request`` on the client (in order with its other calls); the reply arrives in the returned slot.
    With ``on_reply`` it is also handed to that callback the moment it is read (see :class:`CallbackReply`), and
    an error queueing it goes to the callback too instead of being raised."""
    if on_reply is None:
        reply = Reply()
        enqueue(client, request, reply)
        return reply
    reply = CallbackReply(on_reply)
    try:
        enqueue(client, request, reply)
    except Exception as exc:  # kazoo's queue refused it half-way (a client closing under us)
        reply.set_exception(exc)  # nothing more if kazoo set its own error before raising
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


def send_get_children(client: Any, path: str, on_reply: Callable[[Any, BaseException | None], None], *,
                      watch: Callable[[Any], None] | None = None) -> Reply:
    """List the children of ``path`` with its stat (getChildren2), leaving a child watch when ``watch`` is given,
    as kazoo's ``get_children_async(include_data=True)`` does; ``on_reply((children, stat), None)`` or
    ``on_reply(None, error)`` runs the moment the reply is read, on kazoo's connection thread. So a reply to a
    request sent after the listing is never seen before the listing is applied (kazoo hands its own async
    results to a completion thread, which may run later)."""
    return send_request(client, GetChildren2(full_path(_chroot(client), path), watch), on_reply)
