"""The Celery result backend ``zkqueue://``: results, states, groups and chords in ZooKeeper.

::

    import zkqueue.celery  # registers zkqueue:// with kombu (broker) and Celery (result backend)
    app = Celery("proj", broker="zkqueue://zk1:2181,zk2:2181/celery", backend="zkqueue://zk1:2181,zk2:2181/celery")

- **Results**: one node per task id (:mod:`.result_store`), Celery's encoded meta as its data; a value over the
  packet limit goes through zkqueue's large-item blobs. A write is version-checked against the state it was
  decided on: a stored SUCCESS is never overwritten (Celery's rule against a lost worker's late write), without
  the race of a read followed by a blind write.
- **Waiting**: ``AsyncResult.get()``, ``join`` and ``join_native`` wait on kazoo watches (:mod:`.waiting`), not by
  polling the server.
- **Expiry**: ``supports_autoexpire = False``; ``cleanup()`` (Celery beat's daily ``backend_cleanup`` task)
  deletes what is older than ``result_expires`` (:mod:`.expiry`).
- **Groups**: ``GroupResult.save()``/``restore()``/``delete()`` on a node per group id.
- **Chords**: an exact counter per chord (:mod:`.chords`): each part counted once, the body fired by exactly one.

Settings: ``result_backend = "zkqueue://[user:password@]host1:2181,host2:2181/chroot[?root=/celery-results]"``
(the URL's ``root`` option names the backend's node in the chroot; default ``/celery-results``) and
``result_backend_transport_options``: ``connect_timeout`` (seconds, default 10), ``session_timeout``, ``root``,
``max_value_bytes`` (largest stored value, default 64 MiB), ``wait`` (seconds a request waits for a lost
connection to come back, default 60).

The backend shares the process's kazoo client with the transport (:mod:`.client`) when the URLs name the same
servers and chroot, and takes one of its own in each forked pool process.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import timedelta
from typing import Any

from zkqueue._extras import require

require("celery", what="the zkqueue:// Celery result backend")

from billiard.exceptions import Terminated, TimeLimitExceeded, WorkerLostError  # noqa: E402
from celery import states
from celery.backends.base import KeyValueStoreBackend
from celery.canvas import Signature, maybe_signature
from celery.exceptions import ChordError
from celery.exceptions import TimeoutError as CeleryTimeoutError
from celery.result import GroupResult, allow_join_result, result_from_tuple
from kombu.utils.encoding import bytes_to_str, ensure_bytes

from zkqueue.celery import client as clients
from zkqueue.celery import late_acks, publish_with
from zkqueue.celery.chords import ChordCounter
from zkqueue.celery.expiry import SweepReport, sweep
from zkqueue.celery.result_store import ResultStore, Stored
from zkqueue.celery.url import ZkUrl, parse_url
from zkqueue.celery.waiting import WaitTimeout, wait_many
from zkqueue.engine.api import CONNECTION_ERRORS, DEFAULT_MAX_ITEM_BYTES
from zkqueue.errors import ConfigurationError, ConnectionLostError

log = logging.getLogger("zkqueue.celery.backend")

DEFAULT_ROOT = "/celery-results"
DEFAULT_CONNECT_TIMEOUT = 10.0


class ZkQueueBackend(KeyValueStoreBackend):
    """Celery result backend on ZooKeeper (see the module docstring)."""

    supports_autoexpire = False
    supports_native_join = True
    supports_result_compression = True  # the stored bytes come back unchanged
    persistent = True
    implements_incr = False  # chords are counted by ChordCounter, not by Celery's incr protocol
    key_t = str  # keys are node paths relative to the backend's root, not bytes

    def __init__(self, app: Any, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(app, url=url, **kwargs)
        text = url or app.conf.result_backend
        if not isinstance(text, str) or "://" not in text:
            raise ConfigurationError(f"the zkqueue result backend needs a zkqueue:// URL, got {text!r}")
        self._zk_url: ZkUrl = parse_url(text)
        options = dict(app.conf.get("result_backend_transport_options") or {})
        self.root = str(options.get("root") or self._zk_url.options.get("root") or DEFAULT_ROOT)
        self._connect_timeout = float(options.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT))
        self._session_timeout = options.get("session_timeout")
        self._max_value_bytes = int(options.get("max_value_bytes", DEFAULT_MAX_ITEM_BYTES))
        self._wait = float(options.get("wait", 60.0))
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._shared: clients.SharedClient | None = None
        self._store: ResultStore | None = None
        self._chords: ChordCounter | None = None
        # A worker's transport on the same servers may let this backend commit its late acks (see .late_acks).
        late_acks.register(self._zk_url.connect_string, app)

    # ------------------------------------------------------------------------------------------ connection
    @property
    def store(self) -> ResultStore:
        """The process's result store (a client acquired on first use; again in a forked child)."""
        pid = os.getpid()
        if self._store is None or self._pid != pid:
            with self._lock:
                if self._store is None or self._pid != pid:
                    self._shared = clients.acquire(self._zk_url, connect_timeout=self._connect_timeout,
                                                   session_timeout=self._session_timeout)
                    store = ResultStore(self._shared.client, self.root, max_value_bytes=self._max_value_bytes,
                                        wait=self._wait)
                    store.ensure()
                    self._chords = ChordCounter(store)
                    self._store, self._pid = store, pid
        return self._store

    @property
    def chords(self) -> ChordCounter:
        self.store  # noqa: B018 - builds the counter with the store
        assert self._chords is not None
        return self._chords

    def close(self) -> None:
        """Let go of the shared client (the last user stops it)."""
        with self._lock:
            shared, self._shared, self._store, self._chords = self._shared, None, None, None
        if shared is not None and self._pid == os.getpid():
            clients.release(shared)

    def as_uri(self, include_password: bool = False) -> str:
        return self._zk_url.as_uri(include_password=include_password)

    def exception_safe_to_retry(self, exc: BaseException) -> bool:
        return isinstance(exc, (*CONNECTION_ERRORS, ConnectionLostError))

    # ------------------------------------------------------------------------------------------ keys
    task_keyprefix = "tasks/"
    group_keyprefix = "groups/"
    chord_keyprefix = "chords/"

    def _get_key_for(self, prefix: str, id: Any, key: str = "") -> str:
        return f"{prefix}{id}{key}"

    def _path(self, key: Any) -> str:
        """The node of a key made by ``get_key_for_task``/``group``/``chord``."""
        key = bytes_to_str(key)
        for prefix, path in ((self.task_keyprefix, self.store.task_path),
                             (self.group_keyprefix, self.store.group_path),
                             (self.chord_keyprefix, self.store.chord_path)):
            if key.startswith(prefix):
                return path(key[len(prefix):])
        return self.store.task_path(key)

    # Celery's generic key-value calls, for code that uses them directly.
    def get(self, key: Any) -> bytes | None:
        stored = self.store.read(self._path(key))
        return None if stored is None else stored.value

    def mget(self, keys: list[Any]) -> list[bytes | None]:
        return [None if s is None else s.value for s in self.store.read_many([self._path(k) for k in keys])]

    def set(self, key: Any, value: Any) -> None:
        data = ensure_bytes(value)
        self.store.update(self._path(key), lambda _current: data)

    def delete(self, key: Any) -> None:
        self.store.delete(self._path(key))

    # ------------------------------------------------------------------------------------------ task results
    def _store_result(self, task_id: str, result: Any, state: str, traceback: Any = None, request: Any = None,
                      **kwargs: Any) -> Any:
        meta = self._get_result_meta(result=result, state=state, traceback=traceback, request=request)
        meta["task_id"] = bytes_to_str(task_id)
        data = ensure_bytes(self.encode(meta))

        def decide(current: Stored | None) -> bytes | None:
            if current is not None and current.value != data:
                if self.decode(current.value).get("status") == states.SUCCESS:
                    return None  # a success stays (a late write of a lost worker must not replace it)
            return data

        self.store.update(self.store.task_path(bytes_to_str(task_id)), decide,
                          self._late_ack_ops(state, result, request))
        return result

    def _late_ack_ops(self, state: str, result: Any, request: Any) -> list[Any]:
        """The ack ops of the message of ``request`` to commit with its result (see :mod:`.late_acks`): for a task
        that acks late, stores its result here, is no chord's part, and ended as Celery then acks it (a success,
        or an error the task raised; not a lost pool process or a time limit, which the main process handles)."""
        if request is None or getattr(request, "is_eager", False) or getattr(request, "chord", None):
            return []
        if state not in (states.SUCCESS, states.FAILURE):
            return []
        if state == states.FAILURE and isinstance(result, (WorkerLostError, TimeLimitExceeded, Terminated)):
            return []
        if not late_acks.acks_with_result(self.app.tasks.get(getattr(request, "task", None) or "")):
            return []
        return late_acks.ack_ops_of(request, self._zk_url.connect_string)

    def _get_task_meta_for(self, task_id: str) -> dict[str, Any]:
        stored = self.store.read(self.store.task_path(bytes_to_str(task_id)))
        if stored is None:
            return {"status": states.PENDING, "result": None}
        return self.decode_result(stored.value)

    def task_result_exists(self, task_id: str) -> bool:
        return self.store.read(self.store.task_path(bytes_to_str(task_id))) is not None

    def _forget(self, task_id: str) -> None:
        self.store.delete(self.store.task_path(bytes_to_str(task_id)))

    def _ready_meta(self, stored: Stored | None) -> dict[str, Any] | None:
        if stored is None:
            return None
        meta = self.decode_result(stored.value)
        return meta if meta["status"] in states.READY_STATES else None

    def wait_for(self, task_id: str, timeout: float | None = None, interval: float = 0.5, no_ack: bool = True,
                 on_interval: Any = None) -> dict[str, Any]:
        """The meta of ``task_id`` once it is ready, waiting on a watch of its node."""
        self._ensure_not_eager()
        task_id = bytes_to_str(task_id)
        cached = self._cache.get(task_id)
        if cached is not None and cached["status"] in states.READY_STATES:
            return cached
        try:
            for _path, meta in wait_many(self.store, [self.store.task_path(task_id)], self._ready_meta,
                                         timeout=timeout, tick=interval or 0.5, on_tick=on_interval):
                if meta["status"] == states.SUCCESS:
                    self._cache[task_id] = meta
                if on_interval is not None:
                    # One more look at the parents once the result is in, as Celery's result consumers do after
                    # every wake-up: a chain or chord whose earlier step failed raises that step's own error
                    # rather than the ChordError its body was failed with.
                    on_interval()
                return meta
        except WaitTimeout:
            raise CeleryTimeoutError("The operation timed out.") from None
        raise AssertionError("unreachable")

    def get_many(self, task_ids: Any, timeout: float | None = None, interval: float = 0.5, no_ack: bool = True,
                 on_message: Any = None, on_interval: Any = None, max_iterations: Any = None,
                 READY_STATES: Any = states.READY_STATES) -> Any:
        """``(task_id, meta)`` for each of ``task_ids`` as it becomes ready (watches, not polling)."""
        ids = [bytes_to_str(t) for t in dict.fromkeys(task_ids)]
        waiting = []
        for task_id in ids:
            cached = self._cache.get(task_id)
            if cached is not None and cached["status"] in READY_STATES:
                yield task_id, cached
            else:
                waiting.append(task_id)
        if not waiting:
            return
        by_path = {self.store.task_path(t): t for t in waiting}
        try:
            for path, meta in wait_many(self.store, list(by_path), self._ready_meta, timeout=timeout,
                                        tick=interval or 0.5, on_tick=on_interval):
                task_id = by_path[path]
                self._cache[task_id] = meta
                if on_message is not None:
                    on_message(meta)
                yield task_id, meta
        except WaitTimeout:
            raise CeleryTimeoutError(f"Operation timed out ({timeout})") from None

    # ------------------------------------------------------------------------------------------ groups
    def _save_group(self, group_id: str, result: Any) -> Any:
        data = ensure_bytes(self.encode({"result": result.as_tuple()}))
        self.store.update(self.store.group_path(bytes_to_str(group_id)), lambda _current: data)
        return result

    def _restore_group(self, group_id: str) -> dict[str, Any] | None:
        stored = self.store.read(self.store.group_path(bytes_to_str(group_id)))
        if stored is None:
            return None
        meta = self.decode(stored.value)
        meta["result"] = result_from_tuple(meta["result"], self.app)
        return meta

    def _delete_group(self, group_id: str) -> None:
        self.store.delete(self.store.group_path(bytes_to_str(group_id)))

    # ------------------------------------------------------------------------------------------ chords
    def apply_chord(self, header_result_args: Any, body: Any, **kwargs: Any) -> None:
        """Save the header's GroupResult (the part that completes the chord joins it); the counter node is made
        by ``set_chord_size`` or the first part."""
        self.ensure_chords_allowed()
        header = self.app.GroupResult(*header_result_args)
        header.save(backend=self)

    def set_chord_size(self, group_id: str, chord_size: int) -> None:
        self.chords.set_size(bytes_to_str(group_id), chord_size)

    def add_to_chord(self, chord_id: str, result: Any) -> None:
        self.chords.add_one(bytes_to_str(chord_id))

    def on_chord_part_return(self, request: Any, state: str, result: Any, **kwargs: Any) -> None:
        """Count this finished part once; the part that completes the chord joins the header and sends the body."""
        gid, tid = request.group, request.id
        if not gid or not tid or not request.chord:
            return
        outcome = self.chords.record(gid, tid, request.chord.get("chord_size"))
        if not outcome.fire:
            return
        callback = maybe_signature(request.chord, app=self.app)
        # Marked sent once the body went (or failed the chord); not when _fire raised before that (e.g. the
        # header's results could not be read): then the part, delivered again, fires it.
        if not self._fire(gid, tid, callback, outcome.fired_version):
            self.chords.mark_sent(gid, tid)

    def _fire(self, gid: str, tid: str, callback: Any, fired_version: int) -> bool:
        """Join the header and send the body (or fail it); True when the body's publish marked it sent in its own
        multi (see :mod:`.publish_with`), else the caller marks it."""
        deps = GroupResult.restore(gid, backend=self)
        if deps is None:
            self.chord_error_from_stack(callback, ChordError(f"GroupResult {gid} no longer exists"))
            return False
        try:
            with allow_join_result():
                values = deps.join_native(timeout=self.app.conf.result_chord_join_timeout, propagate=True)
        except Exception as exc:  # noqa: BLE001 - any failure of a part fails the chord, as Celery's backends do
            culprit = _failed_part(deps)
            reason = f"Dependency {culprit} raised {exc!r}" if culprit is not None else repr(exc)
            log.warning("chord %s failed: %s", gid, reason)
            error = ChordError(reason)
            error.__cause__ = exc
            self.chord_error_from_stack(callback, error)
            return False
        # A body of one message (a task's signature; a group or chain may publish several) is published with its
        # "sent" mark in one multi when the broker is zkqueue on this client.
        ops = self.chords.sent_ops(gid, tid, fired_version) if type(callback) is Signature else []
        state = publish_with.PENDING  # PENDING after the publish: nobody took the ops, the caller marks it sent
        try:
            if ops:
                with publish_with.publish_with(self.store.client, ops, callback.freeze().id) as attached:
                    callback.delay(values)
                state = attached.state
            else:
                callback.delay(values)
        except Exception as exc:
            log.exception("chord %s: sending the body failed", gid)
            error = ChordError(f"Callback error: {exc!r}")
            error.__cause__ = exc
            self.chord_error_from_stack(callback, error)
            return False
        if state == publish_with.REFUSED:
            log.warning("chord %s: the body was marked sent by another delivery of its part first: not sent again",
                        gid)
            return True
        deps.delete()
        return state == publish_with.COMMITTED

    # ------------------------------------------------------------------------------------------ expiry
    def cleanup(self) -> SweepReport | None:
        """Delete results older than ``result_expires`` (called by Celery beat's ``backend_cleanup`` task)."""
        expires = self.expires
        if isinstance(expires, timedelta):
            expires = expires.total_seconds()
        if not expires:
            return None
        return sweep(self.store, float(expires))

    def __reduce__(self, args: tuple = (), kwargs: dict | None = None) -> Any:
        return super().__reduce__(args, dict(kwargs or {}, url=self.url))


def _failed_part(results: Any) -> str | None:
    """The id of the first task of a chord header (nested groups included) that ended in a failure state."""
    for result in results.results:
        if hasattr(result, "results"):
            found = _failed_part(result)
            if found is not None:
                return found
        elif result.state in states.PROPAGATE_STATES:
            return result.id
    return None
