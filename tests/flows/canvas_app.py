"""The tasks of the canvas tests (test_canvas*.py, tests/faults/test_canvas_faults.py), run by real ``zkqueue worker
tests.flows.canvas_app:app`` processes.

``ZKQUEUE_CONNECT`` names the test's ZooKeeper; ``CANVAS_DIR`` a directory the test and the tasks share: ``runs``
gets one line ``<task> <key> <pid>`` per attempt of the tasks that take a ``key`` (one O_APPEND write, so a test
counts the runs that really began), and the blocking task waits for ``release`` there. A test process registers
the same tasks on an app of its own with :func:`register` (same names), to build canvases of them.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

import zkqueue
from zkqueue import RetryPolicy

#: No task blocks longer than this, whatever the test does.
LONGEST = 60.0
#: Two attempts, no backoff: a failing member is dead fast.
RETRY = RetryPolicy(max_attempts=2, backoff=0.0, jitter=False)


def _dir() -> str:
    return os.environ["CANVAS_DIR"]


def note_run(task: str, key: str) -> None:
    fd = os.open(os.path.join(_dir(), "runs"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{task} {key} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def add(x: int, y: int) -> int:
    return x + y


def mul(x: int, y: int) -> int:
    return x * y


def pid_of(x: Any) -> list[Any]:
    """``[x, this worker's pid]``."""
    return [x, os.getpid()]


def merge(values: list[Any], key: str = "") -> dict[str, Any]:
    """A chord body: the values in order, and how many; notes its run under ``key``."""
    if key:
        note_run("merge", key)
    return {"values": values, "n": len(values)}


def member(i: int, key: str = "") -> int:
    """A chord member: notes its run under ``key``/``i``; returns ``i * i``."""
    if key:
        note_run("member", f"{key}/{i}")
    return i * i


def boom(x: Any) -> Any:
    raise ValueError(f"boom {x}")


def hold(x: Any, key: str) -> Any:
    """Notes its run, then waits for the ``release`` file."""
    note_run("hold", key)
    deadline = time.monotonic() + LONGEST
    while not os.path.exists(os.path.join(_dir(), "release")):
        if time.monotonic() > deadline:
            raise TimeoutError("release never came")
        time.sleep(0.02)
    return x


def size(blob: str) -> int:
    return len(blob)


def register(app: zkqueue.App) -> SimpleNamespace:
    """The tasks on ``app``, under the names a worker of :data:`app` knows them by."""
    out = {}
    for fn in (add, mul, pid_of, merge, member, boom, hold, size):
        out[fn.__name__] = app.task(name=f"canvas.{fn.__name__}", retry=RETRY)(fn)
    return SimpleNamespace(**out)


_app: zkqueue.App | None = None


def __getattr__(name: str) -> Any:
    """``app``: the workers' app (on ``ZKQUEUE_CONNECT``), made when a worker loads it, not at import."""
    global _app
    if name != "app":
        raise AttributeError(name)
    if _app is None:
        _app = zkqueue.App(retry=RETRY,
                           client_options={"timeout": float(os.environ.get("CANVAS_SESSION_TIMEOUT", "10"))})
        register(_app)
    return _app
