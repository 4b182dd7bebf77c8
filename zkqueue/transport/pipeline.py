"""Pipelined async calls: start many requests at once, so they share the connection back to back.

* :func:`get_many`, :func:`create_many`, :func:`delete_many` and :func:`pipeline` issue many ``*_async`` calls
  at once and gather their results in order (value or exception object per call); :func:`gather` waits for
  async results already started.
* ``DerivedResult`` is one async result made of several (the chunks of a multiRead, the reply of a multi turned
  into a MultiResult), settled in the thread that asks for it; ``ready_result`` is an async result answered at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult

from zkqueue.transport.ops import CreateOp

__all__ = ["Call", "create_many", "delete_many", "gather", "get_many", "pipeline"]

# ---------------------------------------------------------------------------------------------------------------
# Derived async results
# ---------------------------------------------------------------------------------------------------------------


def ready_result(client: Any, value: Any) -> IAsyncResult:
    result = client.handler.async_result()
    result.set(value)
    return result


class DerivedResult:
    """An IAsyncResult whose value is ``combine([part values])``, or the first part's exception.

    The value is computed in the thread that asks for it, never through kazoo's completion thread: a
    synchronous call made from inside a kazoo callback (which runs on that thread) would otherwise wait for a
    step queued behind itself and deadlock. Only :meth:`rawlink` callbacks go through the completion thread,
    like kazoo's own.
    """

    def __init__(self, parts: list[IAsyncResult], combine: Callable[[list[Any]], Any]) -> None:
        self._parts = parts
        self._combine = combine
        self._lock = threading.Lock()
        self._settled = False
        self._value: Any = None
        self._exception: BaseException | None = None
        self._links: dict[Callable[[Any], None], Callable[[Any], None]] = {}

    def ready(self) -> bool:
        return all(part.ready() for part in self._parts)

    def _settle(self) -> bool:
        if not self.ready():
            return False
        with self._lock:
            if not self._settled:
                failed = next((part for part in self._parts if not part.successful()), None)
                if failed is not None:
                    self._exception = failed.exception
                else:
                    try:
                        self._value = self._combine([part.value for part in self._parts])
                    except Exception as exc:  # noqa: BLE001 - delivered as the result's exception
                        self._exception = exc
                self._settled = True
        return True

    def successful(self) -> bool:
        return self._settle() and self._exception is None

    @property
    def exception(self) -> BaseException | None:
        return self._exception if self._settle() else None

    @property
    def value(self) -> Any:
        return self._value if self._settle() else None

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for part in self._parts:
            part.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.ready()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if block:
            self.wait(timeout)
        if not self._settle():
            raise KazooTimeoutError(f"no reply within {timeout} seconds")
        if self._exception is not None:
            raise self._exception
        return self._value

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def set(self, value: Any = None) -> None:
        raise TypeError("a derived async result is set by its requests")

    def set_exception(self, exception: BaseException) -> None:
        raise TypeError("a derived async result is set by its requests")

    def rawlink(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(self)`` once every part is done (on kazoo's completion thread)."""
        lock = threading.Lock()
        remaining = [len(self._parts)]

        def one_done(_: IAsyncResult) -> None:
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                callback(self)

        self._links[callback] = one_done
        for part in self._parts:
            part.rawlink(one_done)

    def unlink(self, callback: Callable[[Any], None]) -> None:
        linked = self._links.pop(callback, None)
        if linked is not None:
            for part in self._parts:
                part.unlink(linked)


# ---------------------------------------------------------------------------------------------------------------
# Pipelined async calls
# ---------------------------------------------------------------------------------------------------------------

Call: TypeAlias = Callable[[], IAsyncResult] | tuple[Any, ...]


def _start(client: Any, call: Call) -> IAsyncResult:
    if callable(call):
        return call()
    if isinstance(call, tuple) and call:
        fn, *args = call
        if isinstance(fn, str):
            if not fn.endswith("_async"):
                raise ValueError(f"pipeline calls name a *_async client method, got {fn!r}")
            fn = getattr(client, fn)
        if callable(fn):
            return fn(*args)
    raise TypeError(f"not a pipeline call: {call!r}; use a zero-arg callable or (method, *args)")


def _failed_now(client: Any, exc: Exception) -> IAsyncResult:
    result = client.handler.async_result()
    result.set_exception(exc)
    return result


def gather(results: Sequence[IAsyncResult], timeout: float | None = None) -> list[Any]:
    """Wait for every async result, in order; each slot is the value or the exception object.

    With ``timeout`` (seconds, for the whole batch) a slot still pending at the deadline holds a
    ``KazooTimeoutError``; its request may still complete later.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    out: list[Any] = []
    for result in results:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not result.wait(wait):
            out.append(KazooTimeoutError("no reply within the pipeline timeout"))
        elif result.successful():
            out.append(result.value)
        else:
            out.append(result.exception)
    return out


def pipeline(client: Any, calls: Iterable[Call], *, timeout: float | None = None) -> list[Any]:
    """Start every call at once (so their requests share the connection back to back), then gather results in
    order. A call is a zero-arg callable returning an IAsyncResult, or a tuple ``(method, *args)`` where
    method is a callable or the name of a client ``*_async`` method, e.g. ``("delete_async", "/a", 3)``.
    A call that raises when started (bad arguments) yields its exception in its slot.
    """
    started: list[IAsyncResult] = []
    for call in calls:
        try:
            started.append(_start(client, call))
        except Exception as exc:  # noqa: BLE001 - reported per slot, like a failed request
            started.append(_failed_now(client, exc))
    return gather(started, timeout)


def get_many(client: Any, paths: Iterable[str], *, timeout: float | None = None) -> list[Any]:
    """Pipelined ``get`` of each path: ``(data, ZnodeStat)`` or an exception object per path, in order."""
    return pipeline(client, [(client.get_async, path) for path in paths], timeout=timeout)


def create_many(
    client: Any,
    items: Iterable[CreateOp | tuple[Any, ...]],
    *,
    timeout: float | None = None,
) -> list[Any]:
    """Pipelined independent creates (not a transaction): the created path or an exception object per item.

    An item is a :class:`CreateOp`, ``(path, data)`` or ``(path, data, kwargs)`` with ``create_async`` keyword
    arguments (acl, ephemeral, sequence, makepath).
    """
    calls: list[Call] = []
    for item in items:
        if isinstance(item, CreateOp):
            kwargs: dict[str, Any] = {"acl": item.acl, "ephemeral": item.ephemeral, "sequence": item.sequence}
            calls.append(_bind(client.create_async, (item.path, item.data), kwargs))
        elif isinstance(item, tuple) and len(item) in (2, 3):
            kwargs = dict(item[2]) if len(item) == 3 else {}
            calls.append(_bind(client.create_async, (item[0], item[1]), kwargs))
        else:
            calls.append(_bind(_reject, (item,)))
    return pipeline(client, calls, timeout=timeout)


def delete_many(
    client: Any, items: Iterable[str | tuple[str, int]], *, timeout: float | None = None
) -> list[Any]:
    """Pipelined independent deletes: ``True`` or an exception object per item (a path or (path, version))."""
    calls: list[Call] = []
    for item in items:
        if isinstance(item, str):
            calls.append((client.delete_async, item))
        elif isinstance(item, tuple) and len(item) == 2:
            calls.append((client.delete_async, item[0], item[1]))
        else:
            calls.append(_bind(_reject, (item,)))
    return pipeline(client, calls, timeout=timeout)


def _bind(
    fn: Callable[..., IAsyncResult], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
) -> Callable[[], IAsyncResult]:
    return lambda: fn(*args, **(kwargs or {}))


def _reject(item: Any) -> IAsyncResult:
    raise TypeError(f"not a valid item: {item!r}")
