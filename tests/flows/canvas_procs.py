"""``zkqueue worker tests.flows.canvas_app:app`` processes for the canvas tests, and the test's own app of the same
tasks (see canvas_app.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from zkqueue import App
from zkqueue.server.testing import wait_for

from tests.flows import canvas_app

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "zkqueue.ops.cli"]
SPEC = "tests.flows.canvas_app:app"
#: Seconds a worker process may take to do what a test asks (generous: the machine is shared).
PATIENCE = 60.0


class CanvasWorker:
    """One ``zkqueue worker`` process (a process group of its own), its output in a log file."""

    def __init__(self, hosts: str, work_dir: Path, name: str, *args: str, session_timeout: float = 10.0) -> None:
        self.log_path = work_dir / f"{name}.log"
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "ZKQUEUE_CONNECT": hosts, "CANVAS_DIR": str(work_dir), "PYTHONPATH": path,
               "CANVAS_SESSION_TIMEOUT": str(session_timeout)}
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen([*CLI, "worker", SPEC, "--quiet", *args], cwd=ROOT, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self.pid = self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_started(self) -> None:
        wait_for(lambda: " started: queues " in self.log() or self.proc.poll() is not None, PATIENCE,
                 message=f"worker {self.pid} did not start:\n{self.log()[-3000:]}")
        assert self.proc.poll() is None, self.log()[-3000:]

    def kill(self) -> None:
        """SIGKILL it (and anything of its group) at once."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


class CanvasEnv:
    """A test's ZooKeeper chroot, directory and workers, and an app of the same tasks (``tasks``)."""

    def __init__(self, hosts: str, work_dir: Path) -> None:
        self.hosts = hosts
        self.dir = work_dir
        self.workers: list[CanvasWorker] = []
        os.environ["CANVAS_DIR"] = str(work_dir)  # the tasks this process runs itself (none, normally)
        self.app = App(hosts, retry=canvas_app.RETRY)
        self.tasks: SimpleNamespace = canvas_app.register(self.app)

    def worker(self, *args: str, session_timeout: float = 10.0) -> CanvasWorker:
        w = CanvasWorker(self.hosts, self.dir, f"worker-{len(self.workers)}", *args, session_timeout=session_timeout)
        self.workers.append(w)
        return w

    def runs(self) -> list[tuple[str, str, int]]:
        """(task, key, pid) of every noted run, in order."""
        try:
            text = (self.dir / "runs").read_text()
        except FileNotFoundError:
            return []
        return [(t, k, int(p)) for t, k, p in (line.split() for line in text[: text.rfind("\n") + 1].splitlines())]

    def run_counts(self, task: str) -> Counter[str]:
        return Counter(k for t, k, _p in self.runs() if t == task)

    def release(self) -> None:
        (self.dir / "release").touch()

    def reset(self) -> None:
        for name in ("release", "runs"):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / name).unlink()

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        self.app.close()
