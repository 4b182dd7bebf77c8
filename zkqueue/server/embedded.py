"""Real ZooKeeper 3.9 servers (1 or 3 nodes) on loopback, started from jars, for tests, demos and benchmarks.

``ZooKeeperEnsemble`` writes one ``zoo.cfg`` per node into a temporary folder, starts each node as a
``QuorumPeerMain`` JVM with the system ``java``, and waits until every node answers ``srvr`` with a mode
(leader or follower): an open port is not enough, since a server listens before it can serve. A single node is a
quorum of one, not a standalone server (see ``_write_config``).

It never leaks a JVM: ``close()`` runs on context exit, at interpreter exit, and the child is asked to die with
its parent (``PR_SET_PDEATHSIG``) when the ensemble is created from the main thread.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from zkqueue.errors import EnvironmentProblem, ServerStartError
from zkqueue.server.jars import zookeeper_classpath

log = logging.getLogger("zkqueue.server.embedded")

#: Marker on every JVM command line we start, so leftovers can be found (``find_leftover_servers``).
PROCESS_MARKER = "-Dzkqueue.embedded=1"
MIN_JAVA = 17
_FOUR_LETTER_WORDS = "ruok,srvr,mntr,stat,envi,conf,isro,cons,wchs"

_LIVE: "weakref.WeakSet[ZooKeeperEnsemble]" = weakref.WeakSet()


def java_version(java: str = "java") -> int:
    """The major version of ``java``; raises EnvironmentProblem with install advice when absent or too old."""
    exe = shutil.which(java)
    if exe is None:
        raise EnvironmentProblem(
            f"'{java}' was not found on PATH. zkqueue's embedded ZooKeeper needs Java {MIN_JAVA}+: "
            "install it with `apt-get install openjdk-17-jre-headless` (Debian/Ubuntu), "
            "`brew install openjdk@17` (macOS), or set JAVA_HOME and put $JAVA_HOME/bin on PATH."
        )
    out = subprocess.run([exe, "-version"], capture_output=True, text=True, timeout=30)
    text = out.stderr + out.stdout
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not match:
        raise EnvironmentProblem(f"could not read the Java version from `{exe} -version`: {text.strip()[:200]}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" style
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise EnvironmentProblem(
            f"{exe} is Java {major}; ZooKeeper 3.9 as shipped with pyspark needs Java {MIN_JAVA}+. "
            "Install openjdk-17 and put it first on PATH."
        )
    return major


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports the OS reports free on ``host`` right now.

    All sockets stay bound until every port is chosen, so the OS cannot hand the same port out twice.
    """
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port(host: str = "127.0.0.1") -> int:
    """One TCP port the OS reports free on ``host`` right now."""
    return free_ports(1, host)[0]


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command and return the whole answer ('' when nobody answers)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode("ascii"))
            chunks = []
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class NodeSpec:
    """Ports and folder of one server."""

    index: int
    myid: int
    client_port: int
    peer_port: int
    election_port: int
    directory: Path

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_file(self) -> Path:
        return self.directory / "zookeeper.log"


@dataclass
class _Node:
    spec: NodeSpec
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False
    console: list[str] = field(default_factory=list)


class ZooKeeperEnsemble:
    """A real ZooKeeper ensemble of ``size`` nodes (1 or 3, any odd number works) on 127.0.0.1.

    Use it as a context manager::

        with ZooKeeperEnsemble(size=3) as zk:
            client = KazooClient(zk.connect_string)

    ``tick_time_ms`` is short by default (200 ms) so tests can ask for sessions as short as 2 ticks;
    ``max_session_timeout_ms`` keeps ordinary 10-30 s sessions possible.
    """

    host = "127.0.0.1"

    def __init__(
        self,
        size: int = 1,
        *,
        base_port: int | None = None,
        tick_time_ms: int = 200,
        init_limit: int = 50,
        sync_limit: int = 25,
        max_session_timeout_ms: int = 60_000,
        force_sync: bool = False,
        heap_mb: int = 512,
        java: str = "java",
        classpath: str | None = None,
        directory: str | os.PathLike[str] | None = None,
        extra_config: dict[str, str] | None = None,
        jvm_options: list[str] | None = None,
        start_timeout: float = 90.0,
    ) -> None:
        if size < 1:
            raise ValueError("an ensemble needs at least one node")
        self.size = size
        self.tick_time_ms = tick_time_ms
        self.init_limit = init_limit
        self.sync_limit = sync_limit
        self.max_session_timeout_ms = max_session_timeout_ms
        self.force_sync = force_sync
        self.heap_mb = heap_mb
        self.java = java
        self.extra_config = dict(extra_config or {})
        self.jvm_options = list(jvm_options or [])
        self.start_timeout = start_timeout
        self._classpath = classpath
        self._own_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="zkqueue-zk-"))
        self._base_port = base_port
        self._nodes: list[_Node] = []
        self._lock = threading.RLock()
        self._closed = False
        self._started = False

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> "ZooKeeperEnsemble":
        self.start_all()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start_all(self) -> "ZooKeeperEnsemble":
        """Write the configuration, start every node, and wait until the ensemble serves."""
        with self._lock:
            if self._started:
                return self
            java_version(self.java)
            self._classpath = self._classpath or zookeeper_classpath()
            self._nodes = [_Node(spec) for spec in self._plan_nodes()]
            for node in self._nodes:
                self._write_config(node.spec)
            _LIVE.add(self)
            self._started = True
            try:
                for i in reversed(range(self.size)):
                    self._spawn(i)
                self.wait_ready(self.start_timeout)
            except BaseException:
                self.close()
                raise
            log.info("ZooKeeper ensemble of %d ready at %s", self.size, self.connect_string)
            return self

    def close(self) -> None:
        """Stop every node (SIGKILL after a short grace) and remove the temporary folder."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for i, node in enumerate(self._nodes):
                if node.process is not None and node.process.poll() is None:
                    self._terminate(i, grace=3.0)
            _LIVE.discard(self)
            if self._own_directory and not os.environ.get("ZKQUEUE_KEEP_ZK_DIRS"):
                shutil.rmtree(self.directory, ignore_errors=True)

    # ----------------------------------------------------------------- properties
    @property
    def connect_string(self) -> str:
        """``127.0.0.1:p1,127.0.0.1:p2,...`` over every node."""
        return ",".join(f"{self.host}:{n.spec.client_port}" for n in self._nodes)

    def node_connect_string(self, i: int) -> str:
        return f"{self.host}:{self._nodes[i].spec.client_port}"

    @property
    def nodes(self) -> list[NodeSpec]:
        return [n.spec for n in self._nodes]

    def is_running(self, i: int) -> bool:
        proc = self._nodes[i].process
        return proc is not None and proc.poll() is None

    def pid(self, i: int) -> int | None:
        proc = self._nodes[i].process
        return proc.pid if proc is not None and proc.poll() is None else None

    def mode(self, i: int) -> str | None:
        """'standalone', 'leader' or 'follower' as the node reports it, or None if it does not serve."""
        if self._nodes[i].paused:
            return None
        answer = four_letter_word(self.host, self._nodes[i].spec.client_port, "srvr")
        match = re.search(r"^Mode: (\S+)", answer, re.MULTILINE)
        return match.group(1) if match else None

    def leader(self) -> int:
        """Index of the current leader (the single node of a one-node ensemble)."""
        for i in range(self.size):
            if self.mode(i) in ("leader", "standalone"):
                return i
        raise ServerStartError("no node reports itself leader right now")

    def followers(self) -> list[int]:
        return [i for i in range(self.size) if self.mode(i) == "follower"]

    def log_tail(self, i: int, lines: int = 40) -> str:
        node = self._nodes[i]
        text = ""
        with contextlib.suppress(OSError):
            text = node.spec.log_file.read_text(errors="replace")
        out = "\n".join(text.splitlines()[-lines:])
        return out or "(the server wrote no log)"

    # ----------------------------------------------------------------- fault controls
    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` (no clean shutdown)."""
        with self._lock:
            node = self._nodes[i]
            if node.process is not None and node.process.poll() is None:
                if node.paused:
                    os.kill(node.process.pid, signal.SIGCONT)
                node.process.kill()
                node.process.wait(timeout=30)
            node.paused = False
            log.info("killed ZooKeeper node %d", i)

    def stop(self, i: int) -> None:
        """Stop node ``i`` with SIGTERM (SIGKILL after 10 s)."""
        with self._lock:
            self._terminate(i, grace=10.0)
            log.info("stopped ZooKeeper node %d", i)

    def start(self, i: int, wait: bool = True, timeout: float | None = None) -> None:
        """Start node ``i`` again on its ports and data folder; with ``wait``, until it serves."""
        with self._lock:
            if self.is_running(i):
                return
            self._spawn(i)
        if wait:
            self.wait_node_ready(i, timeout or self.start_timeout)

    def restart(self, i: int, wait: bool = True) -> None:
        self.stop(i)
        self.start(i, wait=wait)

    def pause(self, i: int) -> None:
        """Freeze node ``i`` with SIGSTOP: it holds its sockets but answers nothing. Returns once every thread of
        the node has stopped (see :func:`_wait_stopped`)."""
        with self._lock:
            node = self._nodes[i]
            if node.process is None or node.process.poll() is not None:
                raise ServerStartError(f"node {i} is not running; cannot pause it")
            os.kill(node.process.pid, signal.SIGSTOP)
            node.paused = True
            _wait_stopped(node.process.pid, i)

    def resume(self, i: int) -> None:
        with self._lock:
            node = self._nodes[i]
            if node.process is not None and node.paused:
                os.kill(node.process.pid, signal.SIGCONT)
            node.paused = False

    # ----------------------------------------------------------------- readiness
    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every running node serves, and (for more than one node) one of them leads."""
        deadline = time.monotonic() + (timeout or self.start_timeout)
        running = [i for i in range(self.size) if self.is_running(i) or self._nodes[i].process is not None]
        for i in running:
            self.wait_node_ready(i, max(0.1, deadline - time.monotonic()))
        if self.size > 1:
            while time.monotonic() < deadline:
                modes = [self.mode(i) for i in running]
                if modes.count("leader") == 1 and all(m in ("leader", "follower") for m in modes):
                    return
                time.sleep(0.05)
            raise ServerStartError(f"the ensemble elected no leader within the timeout (modes: {modes})")

    def wait_node_ready(self, i: int, timeout: float) -> None:
        """Wait until node ``i`` answers ``ruok`` and reports a serving mode; raise with its log tail if it dies."""
        node = self._nodes[i]
        deadline = time.monotonic() + timeout
        next_log_check = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            proc = node.process
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise ServerStartError(
                    f"ZooKeeper node {i} exited (code {code}) before it served.\n"
                    f"{self._explain_failure(i)}\n--- last lines of {node.spec.log_file} ---\n{self.log_tail(i)}"
                )
            if four_letter_word(self.host, node.spec.client_port, "ruok", timeout=1.0) == "imok" and self.mode(i):
                return
            if time.monotonic() >= next_log_check:
                # A server whose main thread died (a missing jar, a port clash) keeps its JVM alive: read its log.
                next_log_check = time.monotonic() + 0.5
                fatal = self._fatal_problem(i)
                if fatal:
                    raise ServerStartError(
                        f"ZooKeeper node {i} failed while starting: {fatal}\n"
                        f"--- last lines of {node.spec.log_file} ---\n{self.log_tail(i)}"
                    )
            time.sleep(0.05)
        raise ServerStartError(
            f"ZooKeeper node {i} did not serve within {timeout:.0f} s.\n"
            f"--- last lines of {node.spec.log_file} ---\n{self.log_tail(i)}"
        )

    # ----------------------------------------------------------------- internals
    def _plan_nodes(self) -> list[NodeSpec]:
        specs = []
        ports = free_ports(3 * self.size) if self._base_port is None else []
        for i in range(self.size):
            if self._base_port is not None:
                client, peer, election = (self._base_port + 10 * i + k for k in range(3))
            else:
                client, peer, election = ports[3 * i : 3 * i + 3]
            folder = self.directory / f"node{i + 1}"
            specs.append(NodeSpec(i, i + 1, client, peer, election, folder))
        return specs

    def _write_config(self, spec: NodeSpec) -> None:
        spec.data_dir.mkdir(parents=True, exist_ok=True)
        (spec.data_dir / "myid").write_text(f"{spec.myid}\n")
        cfg = {
            "tickTime": str(self.tick_time_ms),
            "initLimit": str(self.init_limit),
            "syncLimit": str(self.sync_limit),
            "dataDir": str(spec.data_dir),
            "clientPort": str(spec.client_port),
            "clientPortAddress": self.host,
            "maxClientCnxns": "0",
            "minSessionTimeout": str(2 * self.tick_time_ms),
            "maxSessionTimeout": str(self.max_session_timeout_ms),
            "admin.enableServer": "false",
            "4lw.commands.whitelist": _FOUR_LETTER_WORDS,
            "forceSync": "yes" if self.force_sync else "no",
            "reconfigEnabled": "false",
            # One node runs as a quorum of one, not in standalone mode: a standalone 3.9 server accepts clients before
            # it has loaded its data, and a connection it refuses then is never closed (ZOOKEEPER-5051: the close
            # path throws on the missing database). kazoo waits session_timeout / len(hosts) for the answer, so a
            # client that reconnects in that moment of a restart waits out its whole session, which expires. A
            # quorum peer refuses such connections cleanly.
            "standaloneEnabled": "false",
            "autopurge.purgeInterval": "0",
        }
        for other in self._nodes or []:
            s = other.spec
            cfg[f"server.{s.myid}"] = f"{self.host}:{s.peer_port}:{s.election_port}"
        cfg.update(self.extra_config)
        lines = [f"{k}={v}" for k, v in cfg.items()]
        (spec.directory / "zoo.cfg").write_text("\n".join(lines) + "\n")
        (spec.directory / "log4j2.properties").write_text(
            "status = error\n"
            "appender.file.type = File\n"
            "appender.file.name = FILE\n"
            f"appender.file.fileName = {spec.log_file}\n"
            "appender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = %d{HH:mm:ss.SSS} %-5p [%t] %c{1} - %m%n\n"
            "rootLogger.level = info\n"
            "rootLogger.appenderRef.file.ref = FILE\n"
        )

    def _command(self, spec: NodeSpec) -> list[str]:
        return [
            self.java,
            PROCESS_MARKER,
            f"-Dzkqueue.embedded.owner={os.getpid()}",
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",
            "-Dfile.encoding=UTF-8",
            f"-Dlog4j2.configurationFile={spec.directory / 'log4j2.properties'}",
            f"-Dzookeeper.log.dir={spec.directory}",
            "-Dzookeeper.admin.enableServer=false",
            *self.jvm_options,
            "-cp",
            self._classpath or "",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(spec.directory / "zoo.cfg"),
        ]

    def _spawn(self, i: int) -> None:
        node = self._nodes[i]
        if self._closed:
            raise ServerStartError("this ensemble was closed")
        console = open(node.spec.directory / "console.out", "ab")  # noqa: SIM115 - owned by the child
        try:
            node.process = subprocess.Popen(
                self._command(node.spec),
                stdout=console,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=node.spec.directory,
                preexec_fn=_set_pdeathsig if threading.current_thread() is threading.main_thread() else None,
            )
        finally:
            console.close()
        node.paused = False
        log.debug("started ZooKeeper node %d (pid %d, port %d)", i, node.process.pid, node.spec.client_port)

    def _terminate(self, i: int, grace: float) -> None:
        node = self._nodes[i]
        proc = node.process
        if proc is None or proc.poll() is not None:
            return
        if node.paused:
            os.kill(proc.pid, signal.SIGCONT)
            node.paused = False
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)

    def _fatal_problem(self, i: int) -> str | None:
        """A one-line diagnosis when the node's log or console shows a startup failure, else None."""
        text = self.log_tail(i, 400)
        with contextlib.suppress(OSError):
            text += (self._nodes[i].spec.directory / "console.out").read_text(errors="replace")[-4000:]
        if "Address already in use" in text:
            return f"a port of node {i} is already taken by another program (port clash)"
        missing = re.search(r"NoClassDefFoundError: (\S+)|ClassNotFoundException: (\S+)", text)
        if missing:
            return f"a jar is missing from the classpath: class {missing.group(1) or missing.group(2)} not found"
        return None

    def _explain_failure(self, i: int) -> str:
        return self._fatal_problem(i) or "see the log below"


def thread_states(pid: int) -> list[str]:
    """The scheduler state letter of every thread of ``pid`` ('R', 'S', 'T', ...), from /proc."""
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            states.append(stat[stat.rindex(")") + 2])  # the name in parentheses may hold spaces
    return states


def _wait_stopped(pid: int, i: int, timeout: float = 10.0) -> None:
    """Wait until every thread of ``pid`` has stopped. ``kill(SIGSTOP)`` returns once the signal is queued; the
    kernel wakes one thread to act on it, which then stops the others, and until it is scheduled the rest of the
    JVM still runs (on a loaded machine, long enough to answer a request sent right after the kill)."""
    if not os.path.isdir(f"/proc/{pid}/task"):
        return  # no /proc: nothing to look at
    deadline = time.monotonic() + timeout
    while True:
        try:
            states = thread_states(pid)
        except OSError:
            return  # the process is gone: nothing answers
        if all(s in "TtZX" for s in states):
            return
        if time.monotonic() >= deadline:
            raise ServerStartError(f"node {i} (pid {pid}) did not stop within {timeout:g} s of SIGSTOP: {states}")
        time.sleep(0.001)


def find_leftover_servers(owner: int | None = None) -> list[int]:
    """PIDs of live ZooKeeper JVMs started by zkqueue; with ``owner``, only those that process started."""
    pids = []
    marker = PROCESS_MARKER.encode()
    owner_arg = f"-Dzkqueue.embedded.owner={owner}".encode()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            args = Path("/proc", entry, "cmdline").read_bytes().split(b"\0")
            if marker in args and (owner is None or owner_arg in args):
                pids.append(int(entry))
    return pids


def _close_all() -> None:
    for ensemble in list(_LIVE):
        with contextlib.suppress(Exception):
            ensemble.close()


atexit.register(_close_all)
