"""``client = await connect("zk1:2181,zk2:2181")``: a started kazoo client, without blocking the event loop."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from zkqueue.engine.api import new_client
from zkqueue.aio.bridge import post, to_loop

log = logging.getLogger("zkqueue.aio.client")

__all__ = ["connect", "disconnect"]


async def connect(hosts: str, *, timeout: float = 15.0, **kazoo_options: Any) -> KazooClient:
    """A started :class:`~kazoo.client.KazooClient` for ``hosts`` (a ``/chroot`` suffix is allowed), on zkqueue's
    polling handler unless ``handler`` is given; other keywords go to kazoo. The loop waits on a state listener
    (kazoo's ``start_async``), not on a thread; after ``timeout`` seconds without a session the client is stopped
    and ``TimeoutError`` raised."""
    client = new_client(hosts, **kazoo_options)
    loop = asyncio.get_running_loop()
    connected: asyncio.Future[None] = loop.create_future()

    def on_state(state: KazooState) -> None:
        if state == KazooState.CONNECTED:
            post(loop, connected)

    listener = to_loop(loop, on_state)
    client.add_listener(listener)
    try:
        if client.start_async().is_set():
            post(loop, connected)
        try:
            async with asyncio.timeout(timeout):
                await connected
        except BaseException:
            await disconnect(client)
            raise
    finally:
        client.remove_listener(listener)
    return client


async def disconnect(client: KazooClient) -> None:
    """``client.stop()`` and ``close()`` off the loop (they join kazoo's threads), in the loop's default executor."""

    def stop() -> None:
        try:
            client.stop()
        finally:
            client.close()

    await asyncio.get_running_loop().run_in_executor(None, stop)
