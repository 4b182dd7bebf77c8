"""The loop of a process driver's child (:mod:`zkqueue.runtime.processes`): receive ``(call, job)``, run it, send
back ``("ok", result, None)`` or ``("error", exception, traceback)``; ``None`` ends it. Coroutine results are run
to completion here. An exception or result that does not pickle is sent as text."""

from __future__ import annotations

import asyncio
import inspect
import pickle
import signal
import traceback
from multiprocessing.connection import Connection
from typing import Any


#: The first message of a child: it is up and takes jobs.
READY = ("ready", None, None)


def main(conn: Connection) -> None:
    # The worker decides when a child stops (it kills one past a timeout or on a cold stop): a Ctrl-C or a SIGTERM
    # sent to the whole process group must not end the job it runs during a warm shutdown.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn.send(READY)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        call, job = message
        try:
            value = call(job)
            if inspect.iscoroutine(value):
                value = asyncio.run(value)
            answer: tuple[str, Any, str | None] = ("ok", value, None)
        except BaseException as exc:  # noqa: BLE001 - every exit of the handler is the attempt's failure
            answer = ("error", exc, traceback.format_exc())
        conn.send(_picklable(answer))


def _picklable(answer: tuple[str, Any, str | None]) -> tuple[str, Any, str | None]:
    try:
        pickle.dumps(answer[1])
        return answer
    except Exception as exc:  # noqa: BLE001 - anything that does not pickle is sent as text
        kind, value, trace = answer
        if kind == "ok":
            return ("error", f"the result of type {type(value).__name__} cannot be sent back: {exc}", None)
        return ("error", f"{type(value).__name__}: {value}", trace)
