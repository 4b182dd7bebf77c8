"""The thread driver: handlers run on ``concurrency`` slot threads of this process.

A thread cannot be killed. When an attempt runs past its timeout the runtime fails it (its lease is given up and
the job retried by its policy) and the driver lets that thread go: a new slot thread takes its place, so the
worker keeps its concurrency, and the old thread ends when the handler returns, its late result refused
(:mod:`zkqueue.runtime.attempt`). Threads let go are counted (:attr:`ThreadDriver.hung`).

Whatever a handler raises, ``BaseException`` included (a ``KeyboardInterrupt`` or ``asyncio.CancelledError`` out
of a sync handler), fails that attempt like an exception does; the slot thread goes on.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import queue
import threading

from zkqueue.errors import ConfigurationError
from zkqueue.runtime.attempt import RAN, Attempt

log = logging.getLogger("zkqueue.runtime.threads")


class ThreadDriver:
    """Runs attempts on slot threads (``zkqueue-job-N``)."""

    name = "thread"

    def __init__(self, thread_name: str = "zkqueue-job") -> None:
        self._prefix = thread_name
        self._work: queue.SimpleQueue[Attempt | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running: dict[threading.Thread, Attempt] = {}
        self._let_go: set[threading.Thread] = set()
        self._threads: set[threading.Thread] = set()
        self._numbers = itertools.count(1)
        #: Slot threads let go past a timeout (still running a handler that did not return).
        self.hung = 0

    def start(self, concurrency: int) -> None:
        for _ in range(concurrency):
            self._spawn()

    def _spawn(self) -> None:
        thread = threading.Thread(target=self._serve, name=f"{self._prefix}-{next(self._numbers)}", daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def submit(self, attempt: Attempt) -> None:
        self._work.put(attempt)

    def _serve(self) -> None:
        me = threading.current_thread()
        try:
            while True:
                attempt = self._work.get()
                if attempt is None:
                    return
                if attempt.settled:  # timed out or given back before it started
                    continue
                with self._lock:
                    self._running[me] = attempt
                try:
                    run(attempt)
                finally:
                    with self._lock:
                        self._running.pop(me, None)
                        let_go = me in self._let_go
                        self._let_go.discard(me)
                if let_go:  # a new thread took this slot while the handler hung
                    log.info("a slot thread let go after job %s's timeout ended", attempt.label)
                    return
        finally:
            with self._lock:
                self._threads.discard(me)

    def abandon(self, attempt: Attempt) -> None:
        """``attempt`` was settled without its handler (timeout, cold stop): let its thread go, start another."""
        with self._lock:
            thread = next((t for t, a in self._running.items() if a is attempt), None)
            if thread is None or thread in self._let_go:
                return  # not started yet (skipped when it is), or already let go
            self._let_go.add(thread)
            self.hung += 1
        log.warning("job %s: its handler thread %s is still running after the attempt ended; a new thread takes "
                    "its slot", attempt.label, thread.name)
        self._spawn()

    def cancel(self, attempt: Attempt) -> None:
        """Nothing to do: a sync handler looks at ``job.cancel_requested`` itself."""

    def close(self, wait: float | None = None) -> None:
        """Stop the slot threads once they are idle; wait up to ``wait`` seconds for them (hung ones are left)."""
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join(wait)


def run(attempt: Attempt) -> None:
    """Call the handler on this thread and settle the attempt with what comes of it."""
    if not attempt.begin():  # settled before it began (a cold stop): never run
        return
    try:
        value = attempt.call(attempt.job)
        if inspect.iscoroutine(value):
            value.close()
            raise ConfigurationError(f"job {attempt.label}'s handler returned a coroutine: coroutine handlers "
                                     "run on the asyncio driver (an async task, or zkqueue.aio)")
    except BaseException as exc:  # noqa: BLE001 - any exit of a handler is that attempt's failure
        attempt.settle(RAN, error=exc)
        return
    attempt.settle(RAN, result=value)


__all__ = ["ThreadDriver", "run"]
