"""Exchange types and bindings kept in ZooKeeper, so every process routes a publish alike.

kombu's virtual transports keep bindings in the memory of one connection; a fanout (Celery's remote control,
``celery inspect``, events) or a queue bound in another process must be seen by every publisher, so the table
of each exchange lives here::

    <root>/exchanges/<exchange>                        data: the exchange type ("direct", "topic", "fanout")
    <root>/exchanges/<exchange>/<routing key>|<queue>  one binding (names escaped as queue names are)

A binding of an ``auto_delete`` queue (Celery's pidbox and reply queues, event receivers) is an ephemeral node:
it ends with the session of the process that declared it, so a dead worker's remote-control queue stops
receiving broadcasts without anyone cleaning up. Such bindings are created again after a session is lost.

Tables are read once per exchange and then kept current by a children watch (no read per publish). A binding
made by this process is in its own table at once; one made by another process reaches it with the watch event,
i.e. within a round trip.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch

from zkqueue.celery.queues import node_name
from zkqueue.errors import QueuePermissionError
from zkqueue.formats import naming

log = logging.getLogger("zkqueue.celery.routing")

SEPARATOR = "|"


def binding_name(routing_key: str, queue: str) -> str:
    return f"{naming.escape_id(routing_key or '')}{SEPARATOR}{naming.escape_id(queue)}"


def parse_binding(name: str) -> tuple[str, str] | None:
    key, sep, queue = name.partition(SEPARATOR)
    if not sep:
        return None
    return naming.unescape_id(key), naming.unescape_id(queue)


class Bindings:
    """The exchanges of one client under ``root``: types, tables (cached by watches) and bindings."""

    def __init__(self, client: KazooClient, root: str) -> None:
        self.client = client
        self.base = f"{root.rstrip('/')}/exchanges"
        self._lock = threading.Lock()
        self._tables: dict[str, set[tuple[str, str]]] = {}
        self._watches: dict[str, ChildrenWatch] = {}
        self._types: dict[str, str] = {}
        self._ephemeral: dict[str, bytes] = {}  # paths of our ephemeral bindings, to create after a lost session
        self._lost = False
        client.add_listener(self._on_state)

    def exchange_path(self, exchange: str) -> str:
        return f"{self.base}/{node_name(exchange)}"

    # ------------------------------------------------------------------------------------------ exchanges
    def declare(self, exchange: str, type_: str) -> None:
        """Store ``exchange``'s type (the first declaration's type stays)."""
        path = self.exchange_path(exchange)
        with _permission(path):
            try:
                self.client.create(path, type_.encode(), makepath=True)
            except NodeExistsError:
                pass
        self._types.setdefault(exchange, type_)

    def exchange_type(self, exchange: str) -> str | None:
        """The type another process declared ``exchange`` with (None: not declared)."""
        known = self._types.get(exchange)
        if known is not None:
            return known
        try:
            data, _ = self.client.get(self.exchange_path(exchange))
        except NoNodeError:
            return None
        type_ = data.decode() or None
        if type_:
            self._types[exchange] = type_
        return type_

    def delete_exchange(self, exchange: str) -> None:
        path = self.exchange_path(exchange)
        self._types.pop(exchange, None)
        with self._lock:
            self._tables.pop(exchange, None)
        try:
            self.client.delete(path, recursive=True)
        except NoNodeError:
            pass

    # ------------------------------------------------------------------------------------------ bindings
    def bind(self, exchange: str, routing_key: str, queue: str, *, ephemeral: bool = False) -> None:
        parent = self.exchange_path(exchange)
        path = f"{parent}/{binding_name(routing_key, queue)}"
        with _permission(path):
            if self.client.exists(parent) is None:
                try:
                    self.client.create(parent, self._types.get(exchange, "").encode(), makepath=True)
                except NodeExistsError:
                    pass
            try:
                self.client.create(path, b"", ephemeral=ephemeral)
            except NodeExistsError:
                pass
        if ephemeral:
            self._ephemeral[path] = b""
        with self._lock:
            table = self._tables.get(exchange)
            if table is not None:
                table.add((routing_key or "", queue))

    def unbind(self, exchange: str, routing_key: str, queue: str) -> None:
        path = f"{self.exchange_path(exchange)}/{binding_name(routing_key, queue)}"
        self._ephemeral.pop(path, None)
        try:
            self.client.delete(path)
        except NoNodeError:
            pass
        with self._lock:
            table = self._tables.get(exchange)
            if table is not None:
                table.discard((routing_key or "", queue))

    def unbind_queue(self, queue: str) -> None:
        """Remove every binding of ``queue`` in every exchange."""
        try:
            exchanges = self.client.get_children(self.base)
        except NoNodeError:
            return
        suffix = SEPARATOR + naming.escape_id(queue)
        for ex in exchanges:
            try:
                names = self.client.get_children(f"{self.base}/{ex}")
            except NoNodeError:
                continue
            for name in names:
                if name.endswith(suffix) and parse_binding(name) is not None and parse_binding(name)[1] == queue:
                    self._ephemeral.pop(f"{self.base}/{ex}/{name}", None)
                    try:
                        self.client.delete(f"{self.base}/{ex}/{name}")
                    except NoNodeError:
                        pass

    def table(self, exchange: str) -> list[tuple[str, str]]:
        """(routing key, queue) of every binding of ``exchange``, kept current by a watch after the first call."""
        with self._lock:
            table = self._tables.get(exchange)
            if table is not None:
                return sorted(table)
        path = self.exchange_path(exchange)
        if self.client.exists(path) is None:
            return []  # nothing bound (yet): looked up again at the next publish

        def changed(children: list[str]) -> None:
            rows = {row for row in map(parse_binding, children) if row is not None}
            with self._lock:
                self._tables[exchange] = rows

        try:
            watch = ChildrenWatch(self.client, path, changed)
        except NoNodeError:
            return []
        with self._lock:
            self._watches[exchange] = watch
            return sorted(self._tables.get(exchange, ()))

    # ------------------------------------------------------------------------------------------ sessions
    def _on_state(self, state: KazooState) -> None:  # kazoo's event thread: never block it
        if state == KazooState.LOST:
            self._lost = True
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            if self._ephemeral:
                threading.Thread(target=self._restore_ephemeral, name="zkqueue-celery-bindings", daemon=True).start()

    def _restore_ephemeral(self) -> None:
        for path in list(self._ephemeral):
            try:
                self.client.create(path, b"", ephemeral=True, makepath=True)
            except NodeExistsError:
                pass
            except Exception:
                log.warning("could not restore binding %s after a lost session", path, exc_info=True)

    def close(self) -> None:
        self.client.remove_listener(self._on_state)
        with self._lock:
            self._tables.clear()
            self._watches.clear()


class _permission:
    """Turn ZooKeeper's NoAuthError into a clear :class:`~zkqueue.errors.QueuePermissionError`."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, NoAuthError):
            raise QueuePermissionError(
                f"ZooKeeper refused to write {self.path}: the node's ACL does not let this connection's "
                "credentials (the user:password of the broker URL) create or change it") from exc
        return False
