"""``zkqueue worker`` as real processes against a real ZooKeeper: a producer that enqueues by name without the task's
module, warm and cold shutdown by signal, the process pool (a CPU-bound task, a child that crashes, a child that
hangs), a thread handler hung past its timeout, a poison job that kills its worker process, and the registry of live
workers (``zkqueue workers``).

The app is worker_tasksmod.py, copied as ``tasksmod.py`` into the test's directory, which is on the workers'
PYTHONPATH. Its handlers append ``start <job id> <pid>`` to a file as each attempt begins: every test compares the
attempts that the job records count with the runs that really began.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest

from zkqueue import App, Call, JobState
from zkqueue.jobs import Job
from zkqueue.server.testing import wait_for
from zkqueue.tasks.live import live_workers

SOURCE = Path(__file__).with_name("worker_tasksmod.py")
CLI = [sys.executable, "-m", "zkqueue.ops.cli"]
#: Seconds a worker process may take to do what a test asks (generous: the machine is shared).
PATIENCE = 60.0


class WorkerProcess:
    """A ``zkqueue worker tasksmod:app ...`` process (in a process group of its own), its output in a log file."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = PATIENCE) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.pid} still runs after {timeout} s; its log:\n{self.log()[-4000:]}"
                                 ) from None

    def wait_log(self, text: str, timeout: float = PATIENCE) -> None:
        wait_for(lambda: text in self.log(), timeout, message=f"worker {self.pid} never logged {text!r}:\n"
                 + self.log()[-4000:])

    def kill_group(self) -> None:
        """SIGKILL what is left of its process group (it, and children of its process pool)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait()


class Tasks:
    """A test's directory (tasksmod.py, the starts file, the release file, the workers' logs) and the environment of
    its processes."""

    def __init__(self, root: Path, zk_hosts: str) -> None:
        self.dir = root
        shutil.copy(SOURCE, root / "tasksmod.py")
        self.vars = {"ZKQUEUE_CONNECT": zk_hosts, "TASKS_DIR": str(root)}
        path = os.environ.get("PYTHONPATH")
        self.env = {**os.environ, **self.vars, "PYTHONPATH": str(root) + (os.pathsep + path if path else "")}
        self.workers: list[WorkerProcess] = []
        self._apps: list[App] = []

    def worker(self, *args: str, session_timeout: float = 10.0) -> WorkerProcess:
        log_path = self.dir / f"worker-{len(self.workers)}.log"
        with open(log_path, "wb") as out:
            proc = subprocess.Popen([*CLI, "worker", "tasksmod:app", *args], cwd=self.dir, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**self.env, "TASKS_SESSION_TIMEOUT": str(session_timeout)})
        self.workers.append(WorkerProcess(proc, log_path))
        return self.workers[-1]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], cwd=self.dir, env=self.env, capture_output=True, text=True,
                              timeout=PATIENCE)

    def module(self, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
        """tasksmod imported here, as a producer that knows the tasks imports it (its app connects on first use)."""
        for name, value in self.vars.items():
            monkeypatch.setenv(name, value)
        spec = importlib.util.spec_from_file_location("tasksmod", self.dir / "tasksmod.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self._apps.append(module.app)
        return module

    def starts(self) -> list[tuple[str, int]]:
        """(job id, pid) of every attempt begun so far, in order."""
        try:
            text = (self.dir / "starts").read_text()
        except FileNotFoundError:
            return []
        out = []
        for line in text[: text.rfind("\n") + 1].splitlines():  # whole lines only
            _start, key, pid = line.split()
            out.append((key, int(pid)))
        return out

    def start_counts(self) -> Counter[str]:
        return Counter(key for key, _pid in self.starts())

    def release(self) -> None:
        (self.dir / "release").touch()

    def close(self) -> None:
        for worker in self.workers:
            worker.kill_group()
        for app in self._apps:
            app.close()


@pytest.fixture
def tasks(tmp_path: Path, zk_hosts: str) -> Iterator[Tasks]:
    t = Tasks(tmp_path, zk_hosts)
    try:
        yield t
    finally:
        t.close()


@pytest.fixture
def reader(zk_client: Any) -> Iterator[App]:
    """An app without the tasks (it never imports tasksmod): reads jobs, enqueues by name."""
    with App(client=zk_client) as app:
        yield app


def attempts(jq: Any, keys: list[str]) -> dict[str, int]:
    return {key: jq.get(key).attempts for key in keys}


def first_error(job: Job) -> str:
    assert job.errors, f"job {job.id} has no error"
    return job.errors[0].error


# ---------------------------------------------------------------------------------------------- by name, burst
def test_a_producer_enqueues_by_name_and_a_burst_worker_runs_it(tasks, reader) -> None:
    producer_dir = tasks.dir / "producer"
    producer_dir.mkdir()
    producer = textwrap.dedent("""
        import importlib.util, json
        import zkqueue
        assert importlib.util.find_spec("tasksmod") is None     # the task's module is not even importable here
        with zkqueue.App() as app:                                # ZKQUEUE_CONNECT
            job = app.enqueue("tasksmod.send_mail", "a@b", subject="hi")
            print(job.id, flush=True)
            print(json.dumps(job.result(timeout=60)), flush=True)
    """)
    out_path = tasks.dir / "producer.out"
    env = {k: v for k, v in tasks.env.items() if k != "PYTHONPATH"}
    with open(out_path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", producer], cwd=producer_dir, env=env, stdout=out,
                                stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: out_path.read_text().endswith("\n") or proc.poll() is not None, timeout=PATIENCE)
        assert proc.poll() is None, proc.communicate()[1]
        (job_id,) = out_path.read_text().split()  # enqueued: the burst worker has a job to find

        worker = tasks.worker("--burst")  # every queue of the app's tasks
        assert worker.wait() == 0, worker.log()  # it exits by itself once nothing is left to run
        _out, err = proc.communicate(timeout=PATIENCE)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    expected = {"to": "a@b", "subject": "hi", "worker_pid": worker.pid}
    assert out_path.read_text().split("\n")[1] == json.dumps(expected)  # the producer's wait saw it too
    handle = reader.job(job_id)
    assert handle.queue == "default" and handle.task == "tasksmod.send_mail"
    assert handle.result(timeout=10) == expected
    job = handle.get()
    assert (job.state, job.attempts, job.errors) == (JobState.COMPLETED, 1, [])
    log = worker.log()
    assert f"tasksmod.send_mail[{job_id}] started (attempt 1)" in log and "burst: nothing left to run" in log
    assert live_workers(reader.client, reader.workers_path) == []  # its registry node went with it


# ---------------------------------------------------------------------------------------------- warm and cold
HELD = [f"held-{i}" for i in range(6)]


def two_running_two_held(tasks: Tasks, reader: App, pool: str = "thread") -> tuple[WorkerProcess, list[str]]:
    """Six jobs that block until released, a worker of concurrency 2 (prefetch 2): two run, two are held ahead, two
    wait in the queue. Returns the worker and the ids of the two that run."""
    reader.enqueue_many("tasksmod.blocked", [Call(args=(key,), job_id=key) for key in HELD], queue="held")
    jq = reader.queue("held")
    worker = tasks.worker("--queues", "held", "--concurrency", "2", "--prefetch", "2", "--pool", pool,
                          "--shutdown-timeout", str(PATIENCE))
    wait_for(lambda: len(tasks.starts()) == 2 and jq.counts()["active"] == 4, timeout=PATIENCE,
             message="two jobs running and two held ahead")
    started = sorted(key for key, _pid in tasks.starts())
    pids = {pid for _key, pid in tasks.starts()}
    if pool == "thread":
        assert pids == {worker.pid}
    else:
        assert len(pids) == 2 and worker.pid not in pids  # two children of the pool
    for key in HELD:
        job = jq.get(key)
        if key in started:
            assert (job.state, job.attempts) == (JobState.ACTIVE, 1)
        else:
            assert (job.state, job.attempts) == (JobState.QUEUED, 0)  # held ahead or not claimed: uncounted
    return worker, started


def warm_stop_begins(tasks: Tasks, reader: App, worker: WorkerProcess, started: list[str],
                     signalled: str = "SIGTERM") -> list[str]:
    """A signal: the held jobs go back uncounted while the running ones go on. The unstarted ids. ``signalled``:
    "SIGTERM" to the worker, or "Ctrl-C" (SIGINT to its whole process group, as a terminal sends it: the children
    of a process pool get it too)."""
    jq = reader.queue("held")
    if signalled == "Ctrl-C":
        os.killpg(worker.pid, signal.SIGINT)
    else:
        worker.signal(signal.SIGTERM)
    wait_for(lambda: jq.counts()["active"] <= 2, timeout=PATIENCE, message="the held jobs given back")
    assert jq.counts()["active"] == 2  # the running two go on
    unstarted = [key for key in HELD if key not in started]
    for key in unstarted:
        job = jq.get(key)
        assert (job.state, job.attempts, job.errors) == (JobState.QUEUED, 0, [])
    assert worker.proc.poll() is None  # still finishing its running jobs
    assert f"signal {'SIGINT' if signalled == 'Ctrl-C' else 'SIGTERM'}: warm shutdown" in worker.log()
    return unstarted


@pytest.mark.parametrize("pool, signalled", [("thread", "SIGTERM"), ("process", "Ctrl-C")])
def test_a_signal_is_a_warm_shutdown(tasks, reader, pool, signalled) -> None:
    jq = reader.queue("held")
    worker, started = two_running_two_held(tasks, reader, pool)
    unstarted = warm_stop_begins(tasks, reader, worker, started, signalled)
    tasks.release()
    assert worker.wait() == 0
    assert tasks.start_counts() == Counter(started)  # no job started after the signal, though slots came free
    for key in started:
        job = jq.get(key)
        assert (job.state, job.attempts, job.result) == (JobState.COMPLETED, 1, f"{key} done")
    assert attempts(jq, unstarted) == dict.fromkeys(unstarted, 0)
    counts = jq.counts()
    assert (counts["queued"], counts["active"], counts["completed"], counts["dead"]) == (4, 0, 2, 0)
    log = worker.log()
    assert "stopped (warm)" in log and "'completed': 2" in log and "'returned': 2" in log


def test_a_second_sigterm_is_a_cold_shutdown(tasks, reader) -> None:
    jq = reader.queue("held")
    worker, started = two_running_two_held(tasks, reader)
    unstarted = warm_stop_begins(tasks, reader, worker, started)  # the first signal was handled
    worker.signal(signal.SIGTERM)  # while both handlers still block
    assert worker.wait() == 1
    log = worker.log()
    assert "cold shutdown" in log and "stopped (cold)" in log and "'given_back': 2" in log
    for key in started:  # given back unfinished, the attempt counted
        job = jq.get(key)
        assert (job.attempts, job.result, job.errors) == (1, None, [])
        assert job.state not in (JobState.COMPLETED, JobState.DEAD)
        assert f"job {key} of {jq.paths.root} is given back unfinished (cold stop)" in log
    assert attempts(jq, unstarted) == dict.fromkeys(unstarted, 0)
    assert jq.counts()["active"] == 0  # no lease left behind: another worker can take them at once

    tasks.release()
    second = tasks.worker("--queues", "held", "--concurrency", "2", "--burst")
    assert second.wait() == 0
    for key in HELD:
        job = jq.get(key)
        assert (job.state, job.result) == (JobState.COMPLETED, f"{key} done")
    assert attempts(jq, HELD) == dict(tasks.start_counts())  # every attempt counted once, and only those
    assert attempts(jq, HELD) == {key: 2 if key in started else 1 for key in HELD}


# ---------------------------------------------------------------------------------------------- --pool process
def test_the_process_pool_runs_cpu_bound_crashing_and_hanging_tasks(tasks, reader, monkeypatch) -> None:
    mod = tasks.module(monkeypatch)
    n = 300_000
    cpu = mod.squares.enqueue_with(args=("cpu-1", n), job_id="cpu-1")
    crash = mod.crash_once.enqueue_with(args=("crash-1",), job_id="crash-1")
    hang = mod.hang_once.enqueue_with(args=("hang-1",), job_id="hang-1")
    assert hang.get().timeout == 1.0
    worker = tasks.worker("--queues", "cpu", "--pool", "process", "--concurrency", "2", "--burst")
    assert worker.wait(45) == 0  # well before the hung child's sleep of 60 s ends: it was killed
    jq = reader.queue("cpu")
    counted = attempts(jq, ["cpu-1", "crash-1", "hang-1"])
    assert counted == dict(tasks.start_counts())  # each attempt counted once, and each one counted began
    assert counted == {"cpu-1": 1, "crash-1": 2, "hang-1": 2}
    starts = tasks.starts()
    pids = {key: [pid for k, pid in starts if k == key] for key in ("cpu-1", "crash-1", "hang-1")}
    assert worker.pid not in {pid for _key, pid in starts}  # every attempt ran in a child
    assert pids["crash-1"][0] != pids["crash-1"][1] and pids["hang-1"][0] != pids["hang-1"][1]  # children replaced

    result = cpu.result(timeout=10)
    assert result == {"sum": (n - 1) * n * (2 * n - 1) // 6, "pid": pids["cpu-1"][0]}
    assert cpu.get().attempts == 1

    assert crash.result(timeout=10) == {"pid": pids["crash-1"][1]}
    job = crash.get()
    assert job.attempts == 2 and first_error(job).startswith("WorkerLostError: ")
    assert f"child process {pids['crash-1'][0]} died (exit code 3)" in first_error(job)

    assert hang.result(timeout=10) == {"pid": pids["hang-1"][1]}
    job = hang.get()
    assert job.attempts == 2 and first_error(job).startswith("JobTimeoutError: ")
    assert f"job hang-1: killing its child process {pids['hang-1'][0]}" in worker.log()


# ---------------------------------------------------------------------------------------------- hung thread
@pytest.mark.parametrize("enqueued", ["by the task", "by name"])
def test_a_hung_thread_handler_times_out_and_its_late_result_is_refused(tasks, reader, monkeypatch,
                                                                       enqueued) -> None:
    """The task's timeout is 1 s. Enqueued by name, from an app that does not know the task, the job's record has
    no timeout: the worker, which knows the task, applies the task's."""
    if enqueued == "by name":
        handle = reader.enqueue_with("tasksmod.hang_thread", args=("hung-1",), job_id="hung-1", queue="hang")
        assert handle.get().timeout is None
    else:
        handle = tasks.module(monkeypatch).hang_thread.enqueue_with(args=("hung-1",), job_id="hung-1")
        assert handle.get().timeout == 1.0
    worker = tasks.worker("--queues", "hang", "--concurrency", "1")
    assert handle.result(timeout=15) == "retry"  # the first attempt still hangs: it never returns by itself
    job = handle.get()
    assert (job.state, job.attempts, job.result) == (JobState.COMPLETED, 2, "retry")
    assert first_error(job) == "JobTimeoutError: job hung-1 ran past its timeout of 1 s"
    assert tasks.starts() == [("hung-1", worker.pid)] * 2

    tasks.release()  # the hung first attempt returns "late" now
    worker.wait_log("job hung-1: its successful result came after the attempt had timed out; refused")
    job = handle.get()
    assert (job.state, job.attempts, job.result) == (JobState.COMPLETED, 2, "retry")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert handle.get().result == "retry" and tasks.start_counts() == {"hung-1": 2}


# ---------------------------------------------------------------------------------------------- poison
@pytest.mark.parametrize("concurrency, innocents", [(1, 5), (8, 30)])
def test_a_poison_job_that_kills_its_worker_ends_dead_and_costs_others_nothing(tasks, reader, monkeypatch,
                                                                               concurrency, innocents) -> None:
    """Workers are restarted after each death, as a supervisor would, until a burst worker exits 0. The poison job
    kills its process once every slot of it is running a job (see worker_tasksmod.py), so each death takes exactly
    ``concurrency - 1`` running innocent jobs with it; the jobs held ahead lose nothing."""
    mod = tasks.module(monkeypatch)
    keys = [f"innocent-{i:02d}" for i in range(innocents)]
    mod.innocent.enqueue_many([Call(args=(key,), job_id=key) for key in keys[:2]])
    assert mod.poison.enqueue_with(args=("poison", concurrency), job_id="poison").get().max_attempts == 2
    mod.innocent.enqueue_many([Call(args=(key,), job_id=key) for key in keys[2:]])

    codes, died = [], []
    for _run in range(4):
        worker = tasks.worker("--queues", "poison", "--concurrency", str(concurrency), "--burst",
                              session_timeout=3.0)  # a dead worker's leases end 3 s after it
        codes.append(worker.wait())
        if codes[-1] == 0:
            break
        died.append(worker.pid)
        # The next worker starts once the dead one's leases have ended with its session: else it runs the jobs
        # behind them first, and the poison's retry could start with too few jobs left to fill every slot
        wait_for(lambda: reader.queue("poison").counts()["active"] == 0, timeout=30)
    assert codes == [9, 9, 0]
    assert "job poison used all 2 attempts (its workers were lost)" in worker.log()

    jq = reader.queue("poison")
    poison = jq.get("poison")
    assert (poison.state, poison.attempts) == (JobState.DEAD, 2)
    assert poison.last_error == "worker lost: attempts exhausted without an outcome"
    assert [pid for key, pid in tasks.starts() if key == "poison"] == died  # one start in each dead worker
    for key in keys:
        job = jq.get(key)
        assert (job.state, job.result) == (JobState.COMPLETED, key)
    counted = attempts(jq, keys)
    assert counted == {key: tasks.start_counts()[key] for key in keys}  # attempts == starts, for every job
    assert sum(counted.values()) == innocents + 2 * (concurrency - 1)  # only the jobs running beside the poison
    if concurrency == 1:
        assert counted == dict.fromkeys(keys, 1)


# ---------------------------------------------------------------------------------------------- registry
def test_zkqueue_workers_lists_a_running_worker_until_it_stops(tasks, reader) -> None:
    reader.enqueue_with("tasksmod.blocked", args=("listed-1",), job_id="listed-1", queue="held")
    worker = tasks.worker("--queues", "default,held", "--concurrency", "3")
    (info,) = wait_for(lambda: [w for w in live_workers(reader.client, reader.workers_path)
                                if w.running == ("listed-1",)], timeout=PATIENCE)
    listed = tasks.cli("workers", "tasksmod:app", "--json")
    assert listed.returncode == 0, listed.stderr
    (line,) = listed.stdout.splitlines()
    assert json.loads(line) == {"name": info.name, "host": socket.gethostname(), "pid": worker.pid,
                                "queues": ["default", "held"], "pool": "thread", "concurrency": 3,
                                "started": info.started, "running": ["listed-1"]}
    assert info.name.startswith(f"{socket.gethostname()}.{worker.pid}.")
    assert time.time() - 2 * PATIENCE < info.started <= time.time()
    plain = tasks.cli("workers", "tasksmod:app")
    assert plain.stdout.startswith(f"{info.name}  queues=default,held  pool=threadx3  started=")
    assert plain.stdout.rstrip().endswith("running=1 listed-1")

    tasks.release()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert reader.client.get_children(reader.workers_path) == []
    after = tasks.cli("workers", "tasksmod:app")
    assert (after.returncode, after.stdout) == (0, "") and "no live workers" in after.stderr


def test_a_worker_started_with_start_ahead_runs_each_job_once_and_says_so(tasks, reader) -> None:
    ids = [reader.enqueue("tasksmod.send_mail", f"u{i}@b", subject="hi").id for i in range(40)]
    worker = tasks.worker("--burst", "--concurrency", "2", "--start-ahead", "8")
    assert worker.wait() == 0, worker.log()
    assert "concurrency 2, start ahead 8, burst" in worker.log()
    jobs = [reader.job(job_id).get() for job_id in ids]
    assert [(j.state, j.attempts) for j in jobs] == [(JobState.COMPLETED, 1)] * 40
    bad = tasks.cli("worker", "tasksmod:app", "--start-ahead", "-1")
    assert bad.returncode == 2 and "--start-ahead" in bad.stderr
