"""The app of the ``zkqueue worker`` process tests (test_worker_process.py).

Each test copies this file into a fresh directory as ``tasksmod.py`` and runs ``zkqueue worker tasksmod:app`` with
that directory on PYTHONPATH, ``ZKQUEUE_CONNECT`` set to the test's ZooKeeper and ``TASKS_DIR`` to a directory the
test and the handlers share (``TASKS_SESSION_TIMEOUT``: the app's ZooKeeper session timeout, 10 s by default):

- ``starts``: every handler appends ``start <key> <pid>`` there with one O_APPEND write before it does anything else
  (a job's key is its id), so a test compares the attempts a job's record counts with the runs that really began;
- ``release``: blocking handlers wait (at most :data:`LONGEST` seconds) for this file to exist.

It is not imported from the test directory: the functions must be named ``tasksmod.<function>``.
"""

from __future__ import annotations

import os
import threading
import time

import zkqueue
from zkqueue import RetryPolicy

TASKS_DIR = os.environ["TASKS_DIR"]
STARTS = os.path.join(TASKS_DIR, "starts")
RELEASE = os.path.join(TASKS_DIR, "release")
#: No handler blocks longer than this, whatever the test does.
LONGEST = 60.0

app = zkqueue.App(retry=RetryPolicy(max_attempts=3, backoff=0.0, jitter=False),
                  client_options={"timeout": float(os.environ.get("TASKS_SESSION_TIMEOUT", "10"))})


def note_start(key: str) -> int:
    """Record that an attempt of job ``key`` begins in this process; how many of its attempts began so far."""
    fd = os.open(STARTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"start {key} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    with open(STARTS) as starts:
        return sum(1 for line in starts if line.split()[1:2] == [key])


def wait_released() -> None:
    deadline = time.monotonic() + LONGEST
    while not os.path.exists(RELEASE):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{RELEASE} did not appear within {LONGEST} s")
        time.sleep(0.02)


@app.task
def send_mail(to: str, subject: str = "") -> dict[str, object]:
    return {"to": to, "subject": subject, "worker_pid": os.getpid()}


@app.task(queue="held")
def blocked(key: str) -> str:
    """Runs until the test creates the release file."""
    note_start(key)
    wait_released()
    return f"{key} done"


# ---------------------------------------------------------------------------------------------- --pool process
@app.task(queue="cpu")
def squares(key: str, n: int) -> dict[str, int]:
    """CPU-bound: the sum of i*i for i < n, the slow way."""
    note_start(key)
    total = 0
    for i in range(n):
        total += i * i
    return {"sum": total, "pid": os.getpid()}


@app.task(queue="cpu")
def crash_once(key: str) -> dict[str, int]:
    """Its first attempt kills the process it runs in."""
    if note_start(key) == 1:
        os._exit(3)
    return {"pid": os.getpid()}


@app.task(queue="cpu", timeout=1.0)
def hang_once(key: str) -> dict[str, int]:
    """Its first attempt sleeps far past the task's timeout (the worker kills its child after 1 s)."""
    if note_start(key) == 1:
        time.sleep(LONGEST)
    return {"pid": os.getpid()}


# ---------------------------------------------------------------------------------------------- --pool thread
@app.task(queue="hang", timeout=1.0)
def hang_thread(key: str) -> str:
    """Its first attempt hangs past the timeout until the release file appears, then returns "late"."""
    if note_start(key) == 1:
        wait_released()
        return "late"
    return "retry"


# Poison: a job that kills its whole worker process. It does so only once every slot thread of the process is
# inside a handler, and no innocent job returns while a poison job runs in its process: so no job is ever between
# its attempt being counted and its handler's first line when the process dies, and the jobs that die with the
# poison are exactly the other slots' (concurrency - 1 of them).
_slots = threading.Condition()
_inside = 0
_poisoned = False


@app.task(queue="poison", retry=RetryPolicy(max_attempts=2, backoff=0.0, jitter=False))
def poison(key: str, slots: int) -> None:
    global _inside, _poisoned
    note_start(key)
    with _slots:
        _inside += 1
        _poisoned = True
        _slots.wait_for(lambda: _inside >= slots, timeout=LONGEST)
    os._exit(9)


@app.task(queue="poison")
def innocent(key: str) -> str:
    global _inside
    note_start(key)
    with _slots:
        _inside += 1
        _slots.notify_all()
    time.sleep(0.05)
    with _slots:
        if _poisoned:  # dies with the poison's process (whatever wakes the wait)
            _slots.wait_for(lambda: False, timeout=LONGEST)
        _inside -= 1
    return key
