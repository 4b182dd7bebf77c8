"""Tasks of the Celery end-to-end tests (shared tasks: the worker's app and the test's client app both see them).

Every task that a test counts appends one line to ``$ZKQ_CELERY_RUNS/<token>`` when it runs (``O_APPEND`` writes of
one line are atomic), so a test can tell exactly how often, and where, a task ran.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from celery import shared_task, signals


def note(token: str) -> int:
    """Record one run of ``token`` (pid and host); how many runs it has had, this one included."""
    folder = Path(os.environ["ZKQ_CELERY_RUNS"])
    path = folder / token
    line = f"{os.getpid()} {socket.gethostname()} {os.environ.get('ZKQ_CELERY_WORKER', '?')}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return len(path.read_text().splitlines())


def runs(token: str) -> list[str]:
    path = Path(os.environ["ZKQ_CELERY_RUNS"]) / token
    return path.read_text().splitlines() if path.exists() else []


@shared_task
def add(x: int, y: int) -> int:
    return x + y


@shared_task
def mul(x: int, y: int) -> int:
    return x * y


@shared_task(bind=True)
def xsum(self: Any, values: list[int], token: str | None = None) -> int:
    if token:
        note(token)
    return sum(values)


@shared_task
def boom(x: int) -> int:
    raise ValueError(f"boom {x}")


@shared_task(bind=True, max_retries=3)
def retry_once(self: Any, token: str) -> int:
    """Fails its first run with a retry in 1 s; the second run returns the number of runs."""
    count = note(token)
    if count < 2:
        raise self.retry(countdown=1)
    return count


@shared_task
def size_of(data: str) -> int:
    return len(data)


@shared_task
def text_of(n: int) -> str:
    return "r" * n


@shared_task
def when() -> float:
    return time.time()


@shared_task(acks_late=True)
def counted(token: str) -> str:
    note(token)
    return token


@shared_task(acks_late=True)
def counted_number(n: int, token: str) -> int:
    note(token)
    return n


@signals.after_task_publish.connect(weak=False)
def die_after_a_chord_body(sender: str | None = None, headers: dict | None = None, **_kwargs: Any) -> None:
    """A worker whose environment names a token in ``ZKQ_CELERY_DIE_AFTER_BODY`` SIGKILLs its whole process group
    the moment it has published an :func:`xsum` carrying that token (a chord's body, published by the part that
    completed the chord): the death between the body's publish and the part's ack."""
    token = os.environ.get("ZKQ_CELERY_DIE_AFTER_BODY")
    if token and sender == xsum.name and token in str((headers or {}).get("kwargsrepr")):
        os.killpg(os.getpgid(0), signal.SIGKILL)


@signals.task_success.connect(weak=False)
def die_after_a_success(sender: Any = None, result: Any = None, **_kwargs: Any) -> None:
    """A worker whose environment names a token in ``ZKQ_CELERY_DIE_AFTER_SUCCESS`` SIGKILLs its whole process group
    once a task returned that token: ``task_success`` is sent after the result is stored and before the worker's
    main process acks the message (the death between the two)."""
    token = os.environ.get("ZKQ_CELERY_DIE_AFTER_SUCCESS")
    if token and result == token:
        os.killpg(os.getpgid(0), signal.SIGKILL)


@shared_task(acks_late=True)
def slow_first(token: str, seconds: float = 120.0) -> int:
    """Its first run hangs (to be killed); a later run returns the number of runs at once."""
    count = note(token)
    if count == 1:
        time.sleep(seconds)
    return count


@shared_task
def stamped(token: str) -> float:
    """Notes the time it started (one line ``<epoch seconds> <pid>`` in the runs file ``token``); returns it."""
    started = time.time()
    folder = Path(os.environ["ZKQ_CELERY_RUNS"])
    fd = os.open(folder / token, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{started:.6f} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return started


def start_times(token: str) -> list[float]:
    """The start times :func:`stamped` noted for ``token``, in order."""
    return sorted(float(line.split()[0]) for line in runs(token))


@shared_task
def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds
