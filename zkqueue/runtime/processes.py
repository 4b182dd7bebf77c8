"""The process driver: each handler runs in a child process, for CPU-bound tasks.

Each of the ``concurrency`` slots owns one child (started with ``spawn``: the parent runs ZooKeeper client
threads, which a fork would copy half-way) and a parent thread that sends it one job at a time over a pipe and
waits for the answer. The handler must be picklable (a module-level function, or a task caller). Then:

- a job past its timeout gets its child killed (SIGKILL) and replaced; the attempt fails with
  :class:`~zkqueue.errors.JobTimeoutError`;
- a child that dies under a job (``os._exit``, a segfault, the OOM killer) fails that attempt with
  :class:`~zkqueue.errors.WorkerLostError` and is replaced;
- an exception the handler raises comes back as itself when it pickles, else as a
  :class:`~zkqueue.errors.TaskError` naming its type; its traceback from the child is kept as a note.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import pickle
import queue
import threading
import time
from typing import Any

from zkqueue.engine.api import Backoff
from zkqueue.errors import TaskError, WorkerLostError
from zkqueue.runtime import child
from zkqueue.runtime.attempt import RAN, Attempt

log = logging.getLogger("zkqueue.runtime.processes")

_STOP = None


class _Slot:
    """One child process and the pipe to it."""

    def __init__(self, ctx: Any, name: str) -> None:
        self.conn, theirs = ctx.Pipe()
        self.process = ctx.Process(target=child.main, args=(theirs,), name=name, daemon=True)
        self.process.start()
        theirs.close()

    def wait_ready(self) -> bool:
        """Wait for the child to say it is up (its imports done); False if it died first."""
        try:
            return bool(self.conn.recv() == child.READY)
        except (EOFError, OSError):
            return False

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()


class ProcessDriver:
    """Runs attempts in child processes, one slot thread and one child per slot."""

    name = "process"

    def __init__(self, thread_name: str = "zkqueue-proc") -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._prefix = thread_name
        self._work: queue.SimpleQueue[Attempt | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._slots: dict[threading.Thread, _Slot] = {}
        self._running: dict[threading.Thread, Attempt] = {}
        self._numbers = itertools.count(1)
        #: Children killed past a timeout or on a cold stop, and children that died under a job.
        self.killed = 0
        self.lost = 0

    def start(self, concurrency: int) -> None:
        threads = [threading.Thread(target=self._serve, name=f"{self._prefix}-{next(self._numbers)}", daemon=True)
                   for _ in range(concurrency)]
        for thread in threads:
            thread.start()

    def submit(self, attempt: Attempt) -> None:
        self._work.put(attempt)

    def _serve(self) -> None:
        me = threading.current_thread()
        slot = self._new_slot(me)
        try:
            while True:
                attempt = self._work.get()
                if attempt is _STOP:
                    return
                if attempt.settled:
                    continue
                with self._lock:
                    self._running[me] = attempt
                try:
                    answered = self._run(slot, attempt)
                finally:
                    with self._lock:
                        self._running.pop(me, None)
                if not answered:  # the child died or was killed: a new one takes its place
                    slot.kill()
                    slot = self._new_slot(me)
        finally:
            with self._lock:
                self._slots.pop(me, None)
            try:
                slot.conn.send(_STOP)
            except OSError:
                pass
            slot.kill()

    def _new_slot(self, thread: threading.Thread) -> _Slot:
        """A child for ``thread``'s slot, once it is up: an attempt's clock never runs while a child starts."""
        backoff = Backoff(initial=0.2, maximum=5.0)
        while True:
            slot = _Slot(self._ctx, f"{thread.name}-child")
            with self._lock:
                self._slots[thread] = slot
            if slot.wait_ready():
                return slot
            slot.process.join(5)
            log.error("a child process of the pool died as it started (exit code %s); starting another",
                      slot.process.exitcode)
            slot.kill()
            time.sleep(backoff.failed())

    def _run(self, slot: _Slot, attempt: Attempt) -> bool:
        """Send ``attempt`` to the child and settle it with the answer; False if the child gave none."""
        if not attempt.begin():  # settled before it began (a cold stop): never sent
            return True
        try:
            slot.conn.send((attempt.call, attempt.job))
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            attempt.settle(RAN, error=TaskError(f"job {attempt.label} cannot be sent to a child process: {exc}"))
            return True
        except OSError as exc:  # the child is gone already
            return self._lost(slot, attempt, exc)
        try:
            kind, value, trace = slot.conn.recv()
        except (EOFError, OSError) as exc:
            return self._lost(slot, attempt, exc)
        if kind == "ok":
            attempt.settle(RAN, result=value)
        else:
            error = value if isinstance(value, BaseException) else TaskError(str(value))
            if trace:
                error.add_note(f"in child process {slot.process.pid}:\n{trace}")
            attempt.settle(RAN, error=error)
        return True

    def _lost(self, slot: _Slot, attempt: Attempt, exc: BaseException) -> bool:
        slot.process.join(5)
        code = slot.process.exitcode
        if attempt.settled:  # killed past its timeout, or on a cold stop
            return False
        with self._lock:
            self.lost += 1
        log.warning("job %s: its child process %s died (exit code %s)", attempt.label, slot.process.pid, code)
        attempt.settle(RAN, error=WorkerLostError(f"job {attempt.label}'s child process {slot.process.pid} died "
                                                  f"(exit code {code}) while running it"))
        return False

    def abandon(self, attempt: Attempt) -> None:
        """Kill the child running ``attempt`` (timeout, cold stop); its slot thread starts another."""
        with self._lock:
            thread = next((t for t, a in self._running.items() if a is attempt), None)
            slot = self._slots.get(thread) if thread is not None else None
            if slot is None:
                return
            self.killed += 1
        log.warning("job %s: killing its child process %s", attempt.label, slot.process.pid)
        if slot.process.is_alive():
            slot.process.kill()

    def cancel(self, attempt: Attempt) -> None:
        """Nothing to do: a sync handler looks at ``job.cancel_requested`` itself (a child process cannot: its job ends CANCELLED when it returns)."""

    def close(self, wait: float | None = None) -> None:
        """Stop the children once idle (running ones are killed after ``wait`` seconds)."""
        with self._lock:
            threads = list(self._slots)
        for _ in threads:
            self._work.put(_STOP)
        for thread in threads:
            thread.join(wait)
        with self._lock:
            left = list(self._slots.values())
        for slot in left:
            slot.kill()


__all__ = ["ProcessDriver"]
