"""Real Celery worker processes for the end-to-end tests: start, wait until ready, stop, SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.celery.celery_app"


def celery_env(url: str, runs: Path, **extra: str) -> dict[str, str]:
    """The environment of a process of the test app: its URL, the runs folder, the repository on the path."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, ZKQ_CELERY_URL=url, ZKQ_CELERY_RUNS=str(runs), PYTHONPATH=path, **extra)


def celery_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", APP, *args]


class Worker:
    """One ``celery worker`` process (in a process group of its own, so a kill takes its pool children too)."""

    def __init__(self, url: str, runs: Path, logs: Path, name: str, *, pool: str = "solo", concurrency: int = 1,
                 queues: str = "celery", env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log = logs / f"{name}.log"
        self.command = celery_command("worker", "--pool", pool, "-c", str(concurrency), "-n", f"{name}@%h",
                                      "--without-gossip", "--without-mingle", "--without-heartbeat",
                                      "-l", "INFO", "-Q", queues)
        self.env = celery_env(url, runs, ZKQ_CELERY_WORKER=name, **(env or {}))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                         cwd=ROOT, start_new_session=True)
        return self

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the worker logs that it is ready (it consumes from then on)."""
        deadline = time.monotonic() + timeout
        while " ready." not in self.log_text():
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"worker {self.name} exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {self.name} not ready in {timeout} s:\n{self.log_text()[-3000:]}")
            time.sleep(0.05)

    @property
    def hostname(self) -> str:
        import socket

        return f"{self.name}@{socket.gethostname()}"

    def kill(self) -> None:
        """SIGKILL the worker and its pool processes at once (no shutdown of any kind)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 20.0) -> None:
        """A warm shutdown (SIGTERM to the main process, which stops its pool), then SIGKILL to the whole group
        if it takes longer than ``timeout``. (A SIGTERM to the pool processes too makes the main process wait for
        children it has already lost.)"""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        try:  # pool children left behind
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def running_workers(url: str, runs: Path, logs: Path, names: list[str], **options: object) -> Iterator[list[Worker]]:
    """Workers ``names`` on ``url`` (``options`` as :class:`Worker` takes them), started together and ready; all
    stopped afterwards."""
    started = [Worker(url, runs, logs, name, **options).start() for name in names]  # type: ignore[arg-type]
    try:
        for w in started:
            w.wait_ready()
        yield started
    finally:
        for w in started:
            w.stop()
