"""``zkqueue demo``: the task path under failures, with exact accounting.

A 3-node ZooKeeper ensemble; the app of :mod:`zkqueue.ops.demo_app` (resize images, send notifications); two
``zkqueue worker`` processes (the real CLI, in child processes). The demo adds jobs in chunks; a third of the way in
it kills the ZooKeeper leader (the adds go on under the new one), two thirds of the way in it SIGKILLs one worker
while its handlers run. Then it waits until every job is finished and counts, from the job records and from the
side log every handler run writes: added, completed, retried, dead, still pending, lost, and the jobs whose handler
ran twice. ``lost = added - (completed + dead + still pending)``, from the ids, not from counters.

A worker killed mid-run cannot record an outcome: its leases lapse with its ZooKeeper session and the other worker
runs those jobs again. So a handler runs at least once (the "run twice" row measures how often more); what is
exactly once is the recorded outcome of each job, committed in one multi fenced by the lease.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from zkqueue._extras import require

require("rich", what="zkqueue demo")

from kazoo.recipe.watchers import ChildrenWatch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from zkqueue.errors import MissingExtraError, ServerStartError  # noqa: E402
from zkqueue.jobs import JobState  # noqa: E402
from zkqueue.ops import demo_app  # noqa: E402
from zkqueue.server.embedded import ZooKeeperEnsemble  # noqa: E402
from zkqueue.tasks import App, Call  # noqa: E402
from zkqueue.tasks.connection import CONNECT_ENV  # noqa: E402

log = logging.getLogger("zkqueue.ops.demo_tasks")

APP_SPEC = "zkqueue.ops.demo_app:app"
QUEUES = ("images", "notify")
WORKERS = 2
#: Every how many jobs one is a notification that fails its first run; which image job is not an image.
FLAKY_EVERY, DEAD_INDEX = 10, 4
CHUNKS = 12


@dataclass
class TaskDemoReport:
    """The figures of one run of the task demo."""

    added: int = 0
    completed: int = 0
    retried: int = 0
    dead: int = 0
    pending: int = 0
    lost: int = 0
    run_twice: int = 0
    handler_runs: int = 0
    attempts: int = 0
    seconds: float = 0.0
    killed_node: int | None = None
    killed_worker: int | None = None  # its pid
    cut_runs: list[str] = field(default_factory=list)  # jobs whose run the SIGKILL cut
    dead_jobs: list[tuple[str, int, str]] = field(default_factory=list)  # id, attempts, last error
    twice_jobs: list[str] = field(default_factory=list)
    #: Run-twice jobs whose first run finished on the killed worker (its handler returned; the SIGKILL came before
    #: the outcome was committed), and those the side log does not tie to the SIGKILL.
    twice_finished: list[str] = field(default_factory=list)
    twice_other: list[str] = field(default_factory=list)
    #: Jobs whose records count more attempts than their handlers logged runs (claimed, then killed before the
    #: handler's first line).
    unlogged_attempts: list[str] = field(default_factory=list)
    dashboard_url: str | None = None

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing left: every added job completed or is dead."""
        return self.lost == 0 and self.pending == 0 and self.completed + self.dead == self.added


class RunLog:
    """Reads the side log the handlers append to (see :mod:`zkqueue.ops.demo_app`), as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._rest = b""
        self.starts: Counter[str] = Counter()
        self.fails: Counter[str] = Counter()
        self.dones: Counter[str] = Counter()
        self.running: dict[int, set[str]] = defaultdict(set)  # pid -> jobs it runs now
        self.started_at: dict[tuple[int, str], float] = {}  # (pid, job) -> when its latest run started
        self.history: dict[str, list[tuple[str, int]]] = defaultdict(list)  # job -> (event, pid) in order

    def refresh(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()  # an incomplete last line waits for the next read
        for line in lines:
            event, job_id, pid_text, at = line.decode().split(" ")
            pid = int(pid_text)
            self.history[job_id].append((event, pid))
            if event == "start":
                self.starts[job_id] += 1
                self.running[pid].add(job_id)
                self.started_at[(pid, job_id)] = float(at)
            else:
                (self.dones if event == "done" else self.fails)[job_id] += 1
                self.running[pid].discard(job_id)

    def ran_twice(self) -> list[str]:
        """Jobs whose handler started at least twice without a failed run to explain it."""
        return sorted(j for j, n in self.starts.items() if n - self.fails[j] >= 2)


def plan_jobs(jobs: int) -> dict[str, list[Call]]:
    """The calls of each task: every other job an image to resize (one of them not an image: it goes dead), the
    others notifications (every ``FLAKY_EVERY``-th fails its first run)."""
    calls: dict[str, list[Call]] = {demo_app.RESIZE: [], demo_app.NOTIFY: []}
    formats = ("PNG", "JPEG", "WEBP")
    for i in range(jobs):
        if i % 2 == 0:
            job_id = f"img-{i:05d}"
            image = {"id": job_id, "format": "PDF" if i == DEAD_INDEX else formats[i % 3],
                     "width": 640 + i % 7 * 160, "height": 480 + i % 5 * 120}
            calls[demo_app.RESIZE].append(Call(args=(image,), job_id=job_id))
        else:
            job_id = f"msg-{i:05d}"
            calls[demo_app.NOTIFY].append(Call(args=(job_id, f"user{i % 37}@example.com", f"your thumbnail {i}"),
                                               kwargs={"flaky": i % FLAKY_EVERY == 1}, job_id=job_id))
    return calls


def run_task_demo(jobs: int = 600, *, concurrency: int = 4, kill_node: bool = True, kill_worker: bool = True,
                  keep_open: bool = False, timeout: float = 120.0, console: Console | None = None) -> TaskDemoReport:
    """Run the task demo and print its accounting; returns the figures (see the module's docstring)."""
    console = console or Console()
    report = TaskDemoReport()
    workdir = Path(tempfile.mkdtemp(prefix="zkqueue-demo-"))
    runs = RunLog(workdir / demo_app.RUN_LOG)
    start = time.monotonic()
    console.print(f"[bold]zkqueue demo[/bold]: {jobs} jobs of two tasks ({demo_app.RESIZE}, {demo_app.NOTIFY}) run by "
                  f"two `zkqueue worker` processes; a ZooKeeper node is killed while jobs are added"
                  f"{' and a worker is SIGKILLed mid-run' if kill_worker else ''}; then the accounting. "
                  f"(`zkqueue demo --queue`: the lock-safe queue demo.)")
    console.print("[bold]Starting a 3-node ZooKeeper ensemble[/bold] (jars from the pyspark wheel) ...")
    with ZooKeeperEnsemble(size=3) as zk, contextlib.ExitStack() as stack:
        connect = zk.connect_string
        console.print(f"ensemble ready at {connect}, leader is node {zk.leader()}")
        app = demo_app.make_app(connect)
        stack.callback(app.close)
        for name in QUEUES:
            app.queue(name)  # the queues exist before the dashboard and the workers look
        report.dashboard_url = _start_dashboard(stack, app, console)
        env = {**os.environ, CONNECT_ENV: connect, demo_app.DIR_ENV: str(workdir)}
        workers = _start_workers(stack, app, env, workdir, concurrency, console, timeout)
        _show_workers(env, console)

        calls = plan_jobs(jobs)
        added = _add_jobs(app, calls, zk, workers[0], runs, report, console, kill_node, kill_worker)
        report.added = len(added)
        _wait_finished(app, report.added, timeout, console)
        if not keep_open:  # else the survivor stays up, for `zkqueue workers` and the dashboard, until Ctrl-C
            _stop(workers[1:], console)
        _account(app, added, runs, report)
        report.seconds = time.monotonic() - start
        _print_summary(console, report, connect, workdir, keep_open)
        if keep_open:
            _hold(console, connect)
    if report.ok and not keep_open and not report.twice_other:
        shutil.rmtree(workdir, ignore_errors=True)  # kept when something is to be looked into
    return report


# ---------------------------------------------------------------------------------------------- setting up
def _start_dashboard(stack: contextlib.ExitStack, app: App, console: Console) -> str | None:
    """Serve ``zkqueue dashboard`` of the app's queues in this process for the demo's duration; its URL, or None
    (with the command to run) when the dashboard extra is not installed."""
    root = f"/{demo_app.NAMESPACE}/queues"
    try:
        require("flask", what="the demo's dashboard")
        from werkzeug.serving import make_server  # noqa: PLC0415

        from zkqueue.ops.dashboard.app import create_app  # noqa: PLC0415
    except MissingExtraError as exc:
        console.print(f"no dashboard ({exc}); with it: zkqueue dashboard --connect <ensemble> --root {root}")
        return None
    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request amid the demo's output
    server = make_server("127.0.0.1", 0, create_app(app.client, root=root), threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="zkqueue-demo-dashboard", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

    stack.callback(stop)
    url = f"http://127.0.0.1:{server.server_port}/"
    console.print(f"dashboard of {root} at [link={url}]{url}[/link] while the demo runs "
                  f"(what `zkqueue dashboard --root {root}` serves)")
    return url


def _start_workers(stack: contextlib.ExitStack, app: App, env: dict[str, str], workdir: Path, concurrency: int,
                   console: Console, timeout: float) -> list[subprocess.Popen[bytes]]:
    """Two ``zkqueue worker`` processes of the demo app; returns once both registered (a watch on the registry)."""
    registered = threading.Event()
    app.client.ensure_path(app.workers_path)

    def on_children(children: list[str]) -> bool:
        if len(children) >= WORKERS:
            registered.set()
        return not registered.is_set()  # False ends the watch

    ChildrenWatch(app.client, app.workers_path, on_children)
    command = [sys.executable, "-m", "zkqueue.ops.cli", "worker", APP_SPEC, "-c", str(concurrency), "--quiet",
               "--shutdown-timeout", "10"]
    workers: list[subprocess.Popen[bytes]] = []
    stack.callback(_stop, workers, None)
    for i in range(WORKERS):
        with (workdir / f"worker-{i + 1}.log").open("wb") as out:
            workers.append(subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True))
    console.print(f"started {WORKERS} workers: zkqueue worker {APP_SPEC} -c {concurrency} (pids "
                  f"{', '.join(str(w.pid) for w in workers)})")
    deadline = time.monotonic() + timeout
    while not registered.wait(0.2):
        dead = [w for w in workers if w.poll() is not None]
        if dead or time.monotonic() > deadline:
            tail = (workdir / f"worker-{workers.index(dead[0]) + 1}.log").read_text()[-2000:] if dead else ""
            raise ServerStartError(f"the demo's workers did not register within {timeout:g}s"
                                   + (f"; one exited with {dead[0].returncode}:\n{tail}" if dead else ""))
    return workers


def _show_workers(env: dict[str, str], console: Console) -> None:
    """Run ``zkqueue workers`` once, as a user would, and show what it lists."""
    out = subprocess.run([sys.executable, "-m", "zkqueue.ops.cli", "workers", APP_SPEC], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    console.print(f"$ zkqueue workers {APP_SPEC}")
    console.print((out.stdout or out.stderr).rstrip(), markup=False, highlight=False, soft_wrap=True)


# ---------------------------------------------------------------------------------------------- the run
def _add_jobs(app: App, calls: dict[str, list[Call]], zk: ZooKeeperEnsemble, victim: subprocess.Popen[bytes],
              runs: RunLog, report: TaskDemoReport, console: Console, kill_node: bool, kill_worker: bool
              ) -> dict[str, str]:
    """Add the jobs in chunks, killing the leader after a third of them and SIGKILLing ``victim`` after two
    thirds; the ids added (acknowledged), each with its queue."""
    added: dict[str, str] = {}
    per_task = {name: [c[k::CHUNKS] for k in range(CHUNKS)] for name, c in calls.items()}
    total = sum(len(c) for c in calls.values())
    console.print(f"adding {total} jobs in {CHUNKS} chunks: resize (images) and notify (notify)")
    for k in range(CHUNKS):
        t0 = time.monotonic()
        for name, chunks in per_task.items():
            queue = app.tasks[name].queue
            for handle in app.enqueue_many(name, chunks[k]):
                if handle.created:
                    added[handle.id] = queue
        if report.killed_node is not None and k == CHUNKS // 3:
            console.print(f"  the next chunk was acknowledged {time.monotonic() - t0:.1f} s later, under the new "
                          f"leader (node {_leader(zk)}): adds wait out the election (the table checks that none is lost)")
        if kill_node and k == CHUNKS // 3 - 1:
            report.killed_node = _kill_leader(zk, console, len(added))
        if kill_worker and report.killed_worker is None and k >= 2 * CHUNKS // 3 - 1:
            # two thirds in, at the first chunk after which a handler of the victim is seen running (after the
            # last chunk, up to 5 s of looking)
            _kill_worker(victim, runs, report, console, 5.0 if k == CHUNKS - 1 else 0.2)
    console.print(f"added {len(added)} jobs")
    return added


def _leader(zk: ZooKeeperEnsemble) -> str:
    try:
        return str(zk.leader())
    except ServerStartError:
        return "?"


def _kill_leader(zk: ZooKeeperEnsemble, console: Console, added: int) -> int | None:
    try:
        leader = zk.leader()
    except ServerStartError:
        return None
    zk.kill(leader)
    console.print(f"[red]killed ZooKeeper node {leader} (the leader)[/red] after {added} adds; the other two keep "
                  f"quorum and elect a new leader. Clients of that node reconnect to another: a WARNING line or "
                  f"two each, then a RECONNECTED line")
    return leader


def _kill_worker(victim: subprocess.Popen[bytes], runs: RunLog, report: TaskDemoReport, console: Console,
                 look: float) -> None:
    """SIGKILL ``victim`` once the side log shows a handler of it running; after ``look`` seconds of looking, only
    if ``look`` is the last chance (5 s), else not yet."""
    deadline = time.monotonic() + look
    while True:
        runs.refresh()
        if runs.running[victim.pid]:
            break
        if time.monotonic() > deadline:
            if look < 5.0:
                return  # after the next chunk
            break
        time.sleep(0.01)  # the side log is a file: looked at again shortly
    victim.send_signal(signal.SIGKILL)
    killed_at = time.time()
    victim.wait(timeout=30)
    runs.refresh()  # what it wrote before it died
    report.killed_worker = victim.pid
    report.cut_runs = sorted(runs.running[victim.pid])
    cut = ", ".join(f"{j} started {1000 * (killed_at - runs.started_at[(victim.pid, j)]):.0f} ms before"
                    for j in report.cut_runs) or "none"
    console.print(f"[red]SIGKILLed worker pid {victim.pid}[/red] with {len(report.cut_runs)} handler run(s) in "
                  f"progress ({cut}); its leases lapse with its ZooKeeper session "
                  f"(~{demo_app.SESSION_TIMEOUT:g} s), then the other worker runs those jobs")


def _wait_finished(app: App, added: int, timeout: float, console: Console) -> None:
    """Until every added job is completed or dead (or ``timeout`` seconds), with a progress bar."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    deadline = time.monotonic() + timeout
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("finished", total=added)
        while True:
            counts = [app.queue(name).counts() for name in QUEUES]
            finished = sum(c["completed"] + c["dead"] for c in counts)
            progress.update(bar, completed=finished)
            if finished >= added or time.monotonic() > deadline:
                return
            time.sleep(0.25)  # a progress bar's refresh


def _stop(workers: list[subprocess.Popen[bytes]], console: Console | None) -> None:
    """SIGTERM (a warm shutdown) the workers still running, and wait for them (SIGKILL after 20 s)."""
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    for w in workers:
        try:
            code = w.wait(timeout=20)
        except subprocess.TimeoutExpired:
            w.kill()
            code = w.wait()
        if console is not None:
            console.print(f"worker pid {w.pid} stopped on SIGTERM (exit {code})")


# ---------------------------------------------------------------------------------------------- counting
def _account(app: App, added: dict[str, str], runs: RunLog, report: TaskDemoReport) -> None:
    """The figures, from the job records (by id) and the side log."""
    completed: set[str] = set()
    dead: set[str] = set()
    pending: set[str] = set()
    attempts: dict[str, int] = {}
    for name in QUEUES:
        jq = app.queue(name)
        dead_letters = jq.dead_letters()
        for job in jq.completed() + dead_letters:
            (completed if job.state is JobState.COMPLETED else dead).add(job.id)
            if job.id in added:
                report.attempts += job.attempts
                attempts[job.id] = job.attempts
                if job.errors and job.attempts > 1:
                    report.retried += 1
        for job in dead_letters:
            last = (job.last_error or "").strip().splitlines()
            report.dead_jobs.append((job.id, job.attempts, last[-1] if last else "no error recorded"))
        with contextlib.suppress(Exception):
            pending |= set(app.client.get_children(jq.paths.records))
    ids = set(added)
    report.completed = len(ids & completed)
    report.dead = len(ids & dead)
    report.pending = len(ids & pending - completed - dead)
    report.lost = len(ids - completed - dead - pending)
    runs.refresh()
    report.handler_runs = sum(runs.starts[j] for j in ids)
    report.twice_jobs = [j for j in runs.ran_twice() if j in ids]
    report.run_twice = len(report.twice_jobs)
    for job_id in report.twice_jobs:
        if job_id in report.cut_runs:
            continue
        first_by_victim = [e for e, pid in runs.history[job_id] if pid == report.killed_worker]
        if first_by_victim[-2:] == ["start", "done"]:
            report.twice_finished.append(job_id)
        else:
            report.twice_other.append(job_id)
    report.unlogged_attempts = sorted(j for j, n in attempts.items() if n > runs.starts[j])


def _print_summary(console: Console, report: TaskDemoReport, connect: str, workdir: Path, keep_open: bool) -> None:
    table = Table(title="zkqueue demo: tasks under failures, exact accounting")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("from")
    table.add_row("added", str(report.added), "acknowledged adds")
    table.add_row("completed", str(report.completed), "job records")
    table.add_row("retried", str(report.retried), "records with a failed attempt, run again")
    table.add_row("dead", str(report.dead), "dead letters")
    table.add_row("still pending", str(report.pending), "unfinished records")
    table.add_row("lost", f"[{'red' if report.lost else 'green'}]{report.lost}[/]",
                  "added - (completed + dead + still pending)")
    table.add_row("run twice", str(report.run_twice), "side log: handler started again, no failure between")
    table.add_row("handler runs / attempts", f"{report.handler_runs} / {report.attempts}", "side log / records")
    table.add_row("ZooKeeper node killed", "none" if report.killed_node is None else f"node {report.killed_node}", "")
    table.add_row("worker SIGKILLed", "none" if report.killed_worker is None else f"pid {report.killed_worker}", "")
    table.add_row("seconds", f"{report.seconds:.1f}", "")
    console.print(table)
    flaky = report.retried - sum(1 for _j, attempts, _e in report.dead_jobs if attempts > 1)
    console.print(f"retried: {flaky} notification(s) failed once with a transient error and completed on the retry"
                  + ("; the dead job(s) were retried too, until their attempts ran out" if report.dead else ""))
    for job_id, attempts, error in report.dead_jobs:
        console.print(f"dead: {job_id} by design, after {attempts} attempts (last error: {error}); it waits in the "
                      f"dead letters (zkqueue jobs dead, retry-dead)", markup=False, highlight=False)
    cut = [j for j in report.twice_jobs if j in report.cut_runs]
    if cut:
        console.print(f"run twice: {', '.join(cut)}: the SIGKILL cut the handler mid-run, so the job ran again on "
                      f"the other worker.")
    if report.twice_finished:
        console.print(f"run twice, finished before the SIGKILL: {', '.join(report.twice_finished)}: the handler "
                      f"returned on the killed worker, which died before committing the outcome, so the job ran "
                      f"again on the other worker.")
    if report.twice_other:
        console.print(f"run twice, not tied to the SIGKILL by the side log: {', '.join(report.twice_other)}: see "
                      f"the worker logs (a worker that loses its ZooKeeper session loses its leases).")
    if report.run_twice:
        console.print("Handlers run at least once; what is exactly once is each job's recorded outcome (one, "
                      "committed in a multi fenced by the lease, so a cut run cannot record a second).")
    elif report.killed_worker is not None:
        console.print("run twice: 0: no handler of the killed worker had started its job's work; its claimed jobs "
                      "ran once, on the other worker. Handlers run at least once in general.")
    if report.unlogged_attempts:
        console.print(f"attempts without a handler run: {', '.join(report.unlogged_attempts)}: an attempt is counted "
                      f"when the worker starts the job, and the SIGKILL came before its handler's first line")
    verdict = "[green]nothing lost, nothing left[/green]" if report.ok else "[red]accounting does not balance[/red]"
    console.print(f"{verdict}: completed + dead = {report.completed + report.dead} of {report.added} added")
    console.print("[bold]Where to look next[/bold]")
    if report.dashboard_url:
        console.print(f"  dashboard: {report.dashboard_url}" + ("" if keep_open else " (up while the demo ran)"),
                      soft_wrap=True)
    gone = "" if keep_open else " (the demo's ensemble stops with it: --keep-open keeps it)"
    console.print(f"  live workers: ZKQUEUE_CONNECT={connect} zkqueue workers {APP_SPEC}{gone}", highlight=False,
                  soft_wrap=True)
    console.print(f"  dead letters: zkqueue jobs dead --connect {connect} /{demo_app.NAMESPACE}/queues/images",
                  highlight=False, soft_wrap=True)
    kept = (f"; the worker logs and the side log: {workdir}" if keep_open or not report.ok or report.twice_other
            else "")
    console.print(f"  the tasks: zkqueue/ops/demo_app.py{kept}", highlight=False, soft_wrap=True)


def _hold(console: Console, connect: str) -> None:
    """Keep the ensemble and the dashboard up until Ctrl-C or SIGTERM."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    console.print(f"the ensemble ({connect}), the dashboard and the surviving worker stay up; Ctrl-C ends the demo",
                  soft_wrap=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


__all__ = ["RunLog", "TaskDemoReport", "plan_jobs", "run_task_demo"]
