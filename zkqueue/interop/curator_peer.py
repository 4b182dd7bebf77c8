"""Drive Apache Curator 5.9.0's queue recipes from Python, to test and benchmark zkqueue against the real thing.

``CuratorPeer.java`` (next to this module) is a small command-line Curator client over the real recipes
(DistributedQueue, -PriorityQueue, -DelayQueue, -IdQueue, SimpleDistributedQueue) with a byte-identity
serializer. On first use it is compiled with ``javac`` into a jar in a cache folder (``$ZKQUEUE_CACHE_DIR``, else
``$XDG_CACHE_HOME/zkqueue``, else ``~/.cache/zkqueue``) named after a hash of the source, the classpath and the
compiler, under a file lock so parallel test processes do not race. A class-data-sharing archive is dumped next
to it once per JVM option set, which cuts every later JVM start-up by about a third (``ZKQUEUE_PEER_CDS=0`` or
``use_cds=False`` turns it off). Items cross the process boundary as hex lines, so every byte arrives exactly as
sent. The peer logs (WARN and up) to its stderr, whose tail error messages carry.

Example::

    peer = CuratorPeer("127.0.0.1:2181/chroot")
    peer.put("/jobs", [b"a", b"b"])                      # Curator DistributedQueue.put, foreground, in order
    assert peer.consume("/jobs", count=2, timeout=10) == [b"a", b"b"]

    with peer.start_consumer("/jobs", lock_path="/locks") as consumer:   # READY already seen
        ...                                                               # put items from zkqueue
        got = consumer.wait_for_items(3, timeout=10)

Every call has a deadline; a JVM that overruns it is killed, and no JVM outlives the Python process that started
it (live processes are killed at interpreter exit, and consumers also stop when their stdin closes).

Each JVM start costs about half a second: prefer one call with many items over many calls. The default JVM
options favour start-up (C1 only); benchmarks should pass ``jvm_args=THROUGHPUT_JVM_ARGS`` (and ``quiet=True`` to
consumers) so Curator runs at full speed.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Literal

from zkqueue.errors import ConfigurationError, CuratorPeerError, EnvironmentProblem
from zkqueue.server.jars import curator_classpath

log = logging.getLogger("zkqueue.interop.curator_peer")

#: The Java source of the peer; shipped as package data.
PEER_SOURCE = Path(__file__).with_name("CuratorPeer.java")
MAIN_CLASS = "CuratorPeer"
PEER_JAR = "curator-peer.jar"

Kind = Literal["plain", "priority", "delay", "id"]
KINDS: tuple[str, ...] = ("plain", "priority", "delay", "id")
ErrorModeName = Literal["requeue", "delete"]

#: JVM options that make a short-lived peer start fast (C1 only, serial GC). Tests use these (the default).
FAST_START_JVM_ARGS: tuple[str, ...] = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")
#: JVM options for throughput runs (benchmarks): the JVM's own defaults, full JIT.
THROUGHPUT_JVM_ARGS: tuple[str, ...] = ()

#: JVM unified logging writes warnings to stdout by default; the peer's stdout is its protocol.
_QUIET_JVM_LOGS: tuple[str, ...] = ("-Xlog:disable", "-Xlog:all=warning:stderr")

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
#: Extra seconds allowed on top of a command's own work for JVM start-up, connecting and closing.
_STARTUP_SLACK = 30.0


# ----------------------------------------------------------------------------------------------------------------
# Java discovery and compilation


def _java_tool(name: str) -> str:
    """Path of ``java`` or ``javac``: ``$JAVA_HOME/bin`` first, then ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if not found:
        raise EnvironmentProblem(
            f"`{name}` was not found on PATH or in $JAVA_HOME/bin; the Curator peer needs a JDK 17+ "
            "(for example `apt-get install openjdk-17-jdk-headless`)"
        )
    return found


def cache_dir() -> Path:
    """Where compiled peers live: ``$ZKQUEUE_CACHE_DIR``, ``$XDG_CACHE_HOME/zkqueue`` or ``~/.cache/zkqueue``."""
    explicit = os.environ.get("ZKQUEUE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "zkqueue"


def compiled_peer(classpath: str | None = None) -> Path:
    """Compile ``CuratorPeer.java`` if needed and return the path of its jar.

    The jar lives in ``<cache>/peer-<hash>/``, where the hash covers the source, the classpath and the javac
    path, so an edit or a different Curator install compiles afresh. Compilation happens in a temporary folder
    renamed into place under an exclusive file lock, so parallel first uses compile once.
    """
    cp = classpath if classpath is not None else curator_classpath()
    if not PEER_SOURCE.is_file():
        raise EnvironmentProblem(f"the Curator peer source is missing: {PEER_SOURCE}")
    javac = _java_tool("javac")
    source = PEER_SOURCE.read_bytes()
    digest = hashlib.sha256(source + b"\0" + cp.encode() + b"\0" + javac.encode()).hexdigest()[:16]
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"peer-{digest}"
    jar = target / PEER_JAR
    if jar.is_file():
        return jar
    with _file_lock(root / f"peer-{digest}.lock"):
        if jar.is_file():  # another process compiled it while we waited
            return jar
        work = Path(tempfile.mkdtemp(prefix=f"peer-{digest}-", dir=root))
        try:
            src_copy = work / PEER_SOURCE.name
            src_copy.write_bytes(source)
            classes = work / "classes"
            classes.mkdir()
            argv = [javac, "-nowarn", "-encoding", "UTF-8", "-cp", cp, "-d", str(classes), str(src_copy)]
            log.info("compiling the Curator peer into %s", target)
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
            except subprocess.TimeoutExpired as exc:
                raise EnvironmentProblem("javac did not finish compiling the Curator peer within 180 s") from exc
            if done.returncode != 0:
                raise EnvironmentProblem(
                    f"javac failed to compile {PEER_SOURCE} (exit {done.returncode}):\n{done.stdout}{done.stderr}"
                )
            # A jar, not a folder: class-data sharing only archives classes loaded from jars.
            out = work / "out"
            out.mkdir()
            with zipfile.ZipFile(out / PEER_JAR, "w", zipfile.ZIP_DEFLATED) as zf:
                for cls in sorted(classes.glob("*.class")):
                    zf.write(cls, cls.name)
            os.replace(out, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return jar


_CDS_FAILED: set[Path] = set()


def _cds_archive(java: str, jar: Path, run_cp: str, jvm_args: tuple[str, ...]) -> Path | None:
    """A class-data-sharing archive for this peer and these JVM options, dumped on first use; None if the JVM
    cannot make one (the peer then starts without it, only slower).

    The archive cuts a peer's start-up by about a third. It is dumped by one ``warmup`` run (no server needed)
    under the peer folder's lock and renamed into place, so a reader never sees a partial file.
    """
    key = hashlib.sha256("\0".join((java, *jvm_args)).encode()).hexdigest()[:12]
    archive = jar.parent / f"cds-{key}.jsa"
    if archive.is_file():
        return archive
    if archive in _CDS_FAILED or os.environ.get("ZKQUEUE_PEER_CDS", "1") == "0":
        return None
    with _file_lock(jar.parent / "cds.lock"):
        if archive.is_file():
            return archive
        tmp = jar.parent / f"cds-{key}.{os.getpid()}.tmp"
        argv = [java, *jvm_args, *_QUIET_JVM_LOGS, f"-XX:ArchiveClassesAtExit={tmp}", "-cp", run_cp, MAIN_CLASS,
                "warmup"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
            ok = done.returncode == 0 and "WARM" in done.stdout and tmp.is_file()
        except subprocess.TimeoutExpired:
            ok = False
        if not ok:
            log.info("no class-data-sharing archive for the Curator peer; JVMs start without one")
            tmp.unlink(missing_ok=True)
            _CDS_FAILED.add(archive)
            return None
        os.replace(tmp, archive)
    return archive


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl  # noqa: PLC0415 - POSIX only, like the rest of the tooling

    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


# ----------------------------------------------------------------------------------------------------------------
# Process bookkeeping: no JVM outlives us


_LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()


def _register(proc: subprocess.Popen[bytes]) -> None:
    with _LIVE_LOCK:
        _LIVE.add(proc)


def _unregister(proc: subprocess.Popen[bytes]) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    _unregister(proc)


@atexit.register
def _kill_all_live() -> None:
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        _kill(proc)


# ----------------------------------------------------------------------------------------------------------------
# Protocol


def _hex_line(item: bytes, value: object | None = None) -> str:
    if not isinstance(item, (bytes, bytearray, memoryview)):
        raise ConfigurationError(f"items must be bytes, got {type(item).__name__}")
    text = bytes(item).hex()
    if value is None:
        return text
    return f"{text}\t{value}"


def _parse_hex(payload: str, line: str) -> bytes:
    try:
        return bytes.fromhex(payload)
    except ValueError as exc:
        raise CuratorPeerError(f"the peer printed a malformed item line: {line!r}") from exc


def _check_value(kind: str, value: object) -> str:
    """Validate one per-item value and return its text form for the stdin line."""
    if kind == "priority":
        if isinstance(value, bool) or not isinstance(value, int) or not _INT_MIN <= value <= _INT_MAX:
            raise ConfigurationError(f"a Curator priority is a Java int, got {value!r}")
        return str(value)
    if kind == "delay":
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
            raise ConfigurationError(f"a delay epoch is a Java long of epoch milliseconds, got {value!r}")
        return str(value)
    if kind == "id":
        if not isinstance(value, str) or any(ch in value for ch in "\r\n"):
            raise ConfigurationError(f"an id is a str without line breaks, got {value!r}")
        return value
    raise ConfigurationError(f"kind {kind!r} takes no per-item value")


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ConfigurationError(f"unknown queue kind {kind!r}; expected one of {', '.join(KINDS)}")


class _Proc:
    """One running peer: reads its stdout protocol lines and a bounded tail of stderr on daemon threads."""

    def __init__(self, argv: list[str], stdin_data: bytes | None) -> None:
        self.argv = argv
        self._cond = threading.Condition()
        self._lines: list[str] = []  # protocol lines other than ITEM / FAIL
        self.items: list[bytes] = []  # ITEM payloads, in order
        self.failures: list[bytes] = []  # FAIL payloads, in order
        self.protocol_errors: list[str] = []  # stdout lines that could not be parsed
        self._stderr: collections.deque[str] = collections.deque(maxlen=200)
        self._stdout_closed = False
        log.debug("starting Curator peer: %s", " ".join(argv[-12:]))
        try:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except OSError as exc:
            raise EnvironmentProblem(f"cannot start java for the Curator peer: {exc}") from exc
        _register(self.proc)
        self._threads = [
            threading.Thread(target=self._read_stdout, name="curator-peer-out", daemon=True),
            threading.Thread(target=self._read_stderr, name="curator-peer-err", daemon=True),
        ]
        for t in self._threads:
            t.start()
        if stdin_data is not None:
            self._feed(stdin_data)

    def _feed(self, data: bytes) -> None:
        def write() -> None:
            stdin = self.proc.stdin
            assert stdin is not None
            try:
                stdin.write(data)
                stdin.close()
            except (BrokenPipeError, OSError) as exc:  # the peer died early; its exit code tells why
                log.debug("Curator peer closed its stdin early: %s", exc)

        threading.Thread(target=write, name="curator-peer-in", daemon=True).start()

    def _read_stdout(self) -> None:
        stream: IO[bytes] | None = self.proc.stdout
        assert stream is not None
        try:
            for raw in stream:
                line = raw.decode("ascii", "replace").rstrip("\r\n")
                tag, _, rest = line.partition(" ")
                with self._cond:
                    try:
                        if tag == "ITEM":
                            self.items.append(_parse_hex(rest, line))
                        elif tag == "FAIL":
                            self.failures.append(_parse_hex(rest, line))
                        else:
                            self._lines.append(line)
                    except CuratorPeerError as exc:
                        log.error("%s", exc)
                        self.protocol_errors.append(line)
                    self._cond.notify_all()
        except (OSError, ValueError) as exc:  # the stream was closed under us after a kill
            log.debug("Curator peer stdout reader stopped: %s", exc)
        finally:
            with self._cond:
                self._stdout_closed = True
                self._cond.notify_all()

    def _read_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        try:
            for raw in stream:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                self._stderr.append(line)
                log.debug("peer stderr: %s", line)
        except (OSError, ValueError) as exc:  # the stream was closed under us after a kill
            log.debug("Curator peer stderr reader stopped: %s", exc)

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    def lines(self) -> list[str]:
        """Protocol lines other than ITEM and FAIL (READY, PUT, DONE, ...)."""
        with self._cond:
            return list(self._lines)

    def snapshot(self, which: Literal["items", "failures"]) -> list[bytes]:
        with self._cond:
            return list(self.items if which == "items" else self.failures)

    def wait_until(self, predicate: Callable[[_Proc], bool], timeout: float) -> bool:
        """Wait until ``predicate(self)`` holds (called under the lock) or stdout closed; True if it holds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                if self._stdout_closed:
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def close_stdin(self) -> None:
        stdin = self.proc.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(OSError):
                stdin.close()

    def finish(self, timeout: float) -> int:
        """Wait for exit (killing the JVM at the deadline) and for the output threads; return the exit code."""
        try:
            code = self.proc.wait(timeout=max(timeout, 0.0))
        except subprocess.TimeoutExpired:
            _kill(self.proc)
            self._join()
            raise CuratorPeerError(
                f"the Curator peer did not finish within {timeout:.1f} s and was killed: {self._short()}",
                stderr=self.stderr_tail(),
            ) from None
        self._join()
        _unregister(self.proc)
        return code

    def kill(self) -> None:
        _kill(self.proc)
        self._join()

    def _join(self) -> None:
        for t in self._threads:
            t.join(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def _short(self) -> str:
        return " ".join(a for a in self.argv[self.argv.index(MAIN_CLASS) + 1 :])


# ----------------------------------------------------------------------------------------------------------------
# Public API


class ConsumerHandle:
    """A running Curator consumer (``consume`` or ``simple-take``) in its own JVM.

    Use as a context manager, or call :meth:`stop` (graceful) or :meth:`kill` (a crash) when done. Items are
    reported in delivery order; an item the consumer threw on (``fail_on``) is reported by :meth:`failures`
    instead.
    """

    def __init__(self, proc: _Proc, *, limit: float) -> None:
        self._p = proc
        self._limit = limit  # the consumer's own timeout plus start-up slack
        self._started = time.monotonic()
        self._result: int | None = None

    # -- state ---------------------------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        return self._p.proc.pid

    @property
    def running(self) -> bool:
        return self._p.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._p.proc.poll()

    def items(self) -> list[bytes]:
        """The items consumed so far, in order."""
        return self._p.snapshot("items")

    def failures(self) -> list[bytes]:
        """The items the consumer threw on (``fail_on``), in order."""
        return self._p.snapshot("failures")

    def done_count(self) -> int | None:
        """The count from the final ``DONE`` line, or None while the consumer runs."""
        for line in self._p.lines():
            if line.startswith("DONE "):
                return int(line[5:])
        return None

    def stderr(self) -> str:
        """The tail of the peer's standard error."""
        return self._p.stderr_tail()

    # -- waiting ---------------------------------------------------------------------------------------------
    def wait_ready(self, timeout: float = _STARTUP_SLACK) -> None:
        """Block until the queue is started (the peer printed READY); raise CuratorPeerError if it died first."""
        if self._p.wait_until(lambda p: "READY" in p._lines, timeout):
            return
        if self.running:
            self.kill()
            raise CuratorPeerError(f"the Curator consumer was not ready within {timeout:.1f} s",
                                   stderr=self.stderr())
        code = self._p.finish(5)
        self._result = code
        raise CuratorPeerError("the Curator consumer exited before it was ready", returncode=code,
                               stderr=self.stderr())

    def wait_for_items(self, count: int, timeout: float) -> list[bytes]:
        """Block until at least ``count`` items arrived and return them all.

        Raises TimeoutError at the deadline, CuratorPeerError if the peer exited with fewer.
        """
        if self._p.wait_until(lambda p: len(p.items) >= count, timeout):
            return self.items()
        if not self.running:
            code = self._p.finish(5)
            self._result = code
            raise CuratorPeerError(
                f"the Curator consumer exited after {len(self.items())} of {count} items",
                returncode=code,
                stderr=self.stderr(),
            )
        raise TimeoutError(f"the Curator consumer had {len(self.items())} of {count} items after {timeout:.1f} s")

    def wait(self, timeout: float | None = None) -> list[bytes]:
        """Wait for the consumer to end by itself (its count reached or its timeout) and return its items.

        ``timeout`` defaults to the consumer's own timeout plus start-up slack; past it the JVM is killed and
        CuratorPeerError raised.
        """
        if timeout is None:
            timeout = self._limit - (time.monotonic() - self._started)
        return self._finish(timeout)

    def stop(self, timeout: float = 15.0) -> list[bytes]:
        """Ask the consumer to stop (closes its stdin), wait for a clean exit and return its items.

        The item in progress completes (its delete and lock release); no further item is taken.
        """
        if self._result is not None:
            return self.items()
        self._p.close_stdin()
        return self._finish(timeout)

    def kill(self) -> None:
        """Kill the JVM at once (SIGKILL), like a crash. Its session is not closed: the ephemeral lock nodes it
        held vanish only when ZooKeeper expires the session (``session_timeout_ms`` of the peer later)."""
        self._p.kill()
        self._result = self._p.proc.returncode

    def _finish(self, timeout: float) -> list[bytes]:
        if self._result is None:
            try:
                code = self._p.finish(timeout)
            finally:
                self._result = self._p.proc.returncode
            if code != 0:
                raise CuratorPeerError("the Curator consumer failed", returncode=code, stderr=self.stderr())
            if self._p.protocol_errors:
                raise CuratorPeerError(f"the peer printed malformed lines: {self._p.protocol_errors[:3]!r}")
            done = self.done_count()
            items = self.items()
            if done is None:
                raise CuratorPeerError("the Curator consumer exited without its DONE line", stderr=self.stderr())
            if not self._quiet() and done != len(items):
                raise CuratorPeerError(f"the peer reported DONE {done} but printed {len(items)} items")
        return self.items()

    def _quiet(self) -> bool:
        return "--quiet" in self._p.argv

    def __enter__(self) -> ConsumerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._result is not None:
            return
        try:
            self.stop()
        except CuratorPeerError:
            if exc[0] is None:
                raise
            log.warning("Curator consumer did not stop cleanly while handling another error", exc_info=True)
        finally:
            if self.running:
                self.kill()


class CuratorPeer:
    """Run Curator 5.9.0 queue operations against ``connect`` (a ZooKeeper connect string, chroot allowed).

    Each method starts one short-lived JVM. Paths are queue paths as Curator sees them (under the chroot).
    ``values`` (for ``put``) are per-item priorities (int), delay epochs in ms (int) or ids (str), or one such
    value for every item.

    Raises EnvironmentProblem when java/javac or the Curator jars are missing, ConfigurationError for bad
    arguments (before any JVM starts) and CuratorPeerError when the peer fails or overruns its deadline.
    """

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 10_000,
        connect_timeout_ms: int = 10_000,
        log_level: str = "WARN",
        jvm_args: Sequence[str] = FAST_START_JVM_ARGS,
        classpath: str | None = None,
        use_cds: bool = True,
    ) -> None:
        if not connect:
            raise ConfigurationError("connect string is empty")
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.log_level = log_level
        self.jvm_args = tuple(jvm_args)
        self._classpath = classpath
        self.use_cds = use_cds
        self._jvm_prefix: tuple[str, ...] = ()
        self._run_cp: str | None = None

    # -- plumbing --------------------------------------------------------------------------------------------
    def argv(self, command: str, path: str, *options: str) -> list[str]:
        """The full java command line for one peer command (compiles the peer if needed)."""
        if self._run_cp is None:
            cp = self._classpath if self._classpath is not None else curator_classpath()
            jar = compiled_peer(cp)
            java = _java_tool("java")
            run_cp = os.pathsep.join([str(jar), cp])
            archive = _cds_archive(java, jar, run_cp, self.jvm_args) if self.use_cds else None
            self._jvm_prefix = (java, *self.jvm_args, *_QUIET_JVM_LOGS,
                                *((f"-XX:SharedArchiveFile={archive}",) if archive else ()))
            self._run_cp = run_cp
        return [
            *self._jvm_prefix,
            "-cp",
            self._run_cp,
            MAIN_CLASS,
            command,
            "--connect",
            self.connect,
            "--path",
            path,
            "--session-timeout-ms",
            str(self.session_timeout_ms),
            "--connect-timeout-ms",
            str(self.connect_timeout_ms),
            "--log-level",
            self.log_level,
            *options,
        ]

    def run(self, command: str, path: str, options: Sequence[str] = (), stdin_lines: Sequence[str] = (),
            timeout: float = 60.0) -> list[str]:
        """Run one peer command to completion and return its stdout lines; CuratorPeerError on failure."""
        data = "".join(line + "\n" for line in stdin_lines).encode("utf-8")
        proc = _Proc(self.argv(command, path, *options), data)
        code = proc.finish(timeout)
        if code != 0:
            raise CuratorPeerError(f"Curator peer `{command}` failed", returncode=code, stderr=proc.stderr_tail())
        return proc.lines()

    def _expect(self, lines: list[str], tag: str, command: str) -> int:
        for line in lines:
            if line.startswith(tag + " "):
                return int(line[len(tag) + 1 :])
        raise CuratorPeerError(f"Curator peer `{command}` printed no {tag} line: {lines[-5:]!r}")

    # -- queue operations ------------------------------------------------------------------------------------
    def put(
        self,
        path: str,
        items: Sequence[bytes],
        kind: Kind = "plain",
        values: Sequence[int | str] | int | str | None = None,
        background: bool = False,
        *,
        max_items: int | None = None,
        put_timeout: float = 10.0,
        timeout: float = 60.0,
    ) -> int:
        """Put each item with its own Curator ``put`` call, in order, and return how many were put.

        Foreground puts by default, so node sequence order equals ``items`` order; ``background=True`` uses
        Curator's default background puts followed by ``flushPuts``. ``values`` carries the priority / delay
        epoch / id (one per item or one for all; required for delay and id). ``max_items`` builds a bounded
        queue (``QueueBuilder.maxItems``) whose puts wait up to ``put_timeout`` seconds each; puts that time out
        are not counted.
        """
        _check_kind(kind)
        lines = self._item_lines(items, kind, values)
        options = ["--kind", kind]
        if background:
            options.append("--background")
        if max_items is not None:
            if max_items <= 0 or background:
                raise ConfigurationError("max_items must be positive and needs foreground puts")
            options += ["--max-items", str(max_items), "--put-timeout-ms", str(int(put_timeout * 1000))]
        out = self.run("put", path, options, lines, timeout)
        return self._expect(out, "PUT", "put")

    def put_multi(
        self,
        path: str,
        items: Sequence[bytes],
        kind: Literal["plain", "priority", "delay"] = "plain",
        value: int | None = None,
        background: bool = False,
        *,
        timeout: float = 60.0,
    ) -> None:
        """Put all items in ONE Curator ``putMulti`` call: one znode holding every item's frame.

        ``value`` is the priority (default 0) or the delay epoch in ms (required for delay). Curator's id queue
        has no putMulti.
        """
        if kind not in ("plain", "priority", "delay"):
            raise ConfigurationError(f"Curator has no putMulti for kind {kind!r}")
        options = ["--kind", kind]
        if kind == "priority":
            options += ["--priority", _check_value("priority", 0 if value is None else value)]
        elif kind == "delay":
            if value is None:
                raise ConfigurationError("a delay putMulti needs value= (the epoch in ms)")
            options += ["--delay-until", _check_value("delay", value)]
        elif value is not None:
            raise ConfigurationError("a plain putMulti takes no value")
        if background:
            options.append("--background")
        lines = [_hex_line(item) for item in items]
        out = self.run("put-multi", path, options, lines, timeout)
        self._expect(out, "PUT", "put-multi")

    def start_consumer(
        self,
        path: str,
        count: int | None = None,
        timeout: float = 60.0,
        lock_path: str | None = None,
        kind: Kind = "plain",
        *,
        error_mode: ErrorModeName | None = None,
        fail_on: bytes | None = None,
        fail_times: int = 1,
        min_items_before_refresh: int = 0,
        quiet: bool = False,
        wait_ready: bool = True,
    ) -> ConsumerHandle:
        """Start a Curator queue consumer in the background and return its handle.

        The consumer stops after ``count`` items (default: no limit) or ``timeout`` seconds, or when the handle
        stops it. It never takes a znode it will not report, though a multi-item znode is always reported whole.
        ``fail_on`` makes the consumer throw on that payload (``fail_times`` times; -1 = always), which
        exercises Curator's error modes: with ``lock_path``, ``error_mode`` is ``requeue`` (Curator's default) or
        ``delete``. With ``wait_ready`` (the default) this returns once Curator's queue has started. ``quiet``
        (benchmarks) prints no per-item lines: ``items()`` stays empty and ``done_count()`` gives the count.
        """
        _check_kind(kind)
        options = ["--kind", kind, "--timeout-ms", str(int(timeout * 1000)), "--stop-on-eof"]
        if count is not None:
            if count < 0:
                raise ConfigurationError("count must be >= 0")
            options += ["--count", str(count)]
        if lock_path is not None:
            options += ["--lock-path", lock_path]
        if error_mode is not None:
            if error_mode not in ("requeue", "delete"):
                raise ConfigurationError(f"error_mode is 'requeue' or 'delete', not {error_mode!r}")
            if lock_path is None:
                raise ConfigurationError("Curator's error mode only applies with a lock_path")
            options += ["--error-mode", error_mode]
        if fail_on is not None:
            options += ["--fail-on", bytes(fail_on).hex(), "--fail-times", str(fail_times)]
        if min_items_before_refresh:
            options += ["--min-items-before-refresh", str(min_items_before_refresh)]
        if quiet:
            options.append("--quiet")
        return self._start(path, "consume", options, timeout, wait_ready)

    def consume(
        self,
        path: str,
        count: int,
        timeout: float,
        lock_path: str | None = None,
        kind: Kind = "plain",
        **kwargs: object,
    ) -> list[bytes]:
        """Consume up to ``count`` items with a Curator queue consumer within ``timeout`` seconds; return them.

        Returns early once ``count`` items arrived; fewer items mean the timeout passed. Keyword arguments are
        those of :meth:`start_consumer`.
        """
        handle = self.start_consumer(path, count, timeout, lock_path, kind, wait_ready=False, **kwargs)  # type: ignore[arg-type]
        with handle:
            return handle.wait()

    def simple_offer(self, path: str, items: Sequence[bytes], *, timeout: float = 60.0) -> int:
        """``SimpleDistributedQueue.offer`` each item (raw bytes in ``qn-`` nodes); return how many."""
        out = self.run("simple-offer", path, (), [_hex_line(item) for item in items], timeout)
        return self._expect(out, "PUT", "simple-offer")

    def start_simple_taker(self, path: str, count: int | None = None, timeout: float = 60.0, *,
                           wait_ready: bool = True) -> ConsumerHandle:
        """``SimpleDistributedQueue.poll`` in a loop in the background, up to ``count`` items or ``timeout``."""
        options = ["--timeout-ms", str(int(timeout * 1000)), "--stop-on-eof"]
        if count is not None:
            options += ["--count", str(count)]
        return self._start(path, "simple-take", options, timeout, wait_ready)

    def simple_take(self, path: str, count: int, timeout: float) -> list[bytes]:
        """Take up to ``count`` items with ``SimpleDistributedQueue.poll`` within ``timeout`` seconds."""
        with self.start_simple_taker(path, count, timeout, wait_ready=False) as handle:
            return handle.wait()

    def id_remove(self, path: str, item_id: str, lock_path: str | None = None, *, timeout: float = 60.0) -> int:
        """``DistributedIdQueue.remove(id)``: return the number of items Curator removed."""
        _check_value("id", item_id)
        options = ["--id", item_id]
        if lock_path is not None:
            options += ["--lock-path", lock_path]
        out = self.run("id-remove", path, options, (), timeout)
        return self._expect(out, "REMOVED", "id-remove")

    # -- helpers ---------------------------------------------------------------------------------------------
    def _start(self, path: str, command: str, options: list[str], timeout: float, wait_ready: bool
               ) -> ConsumerHandle:
        proc = _Proc(self.argv(command, path, *options), None)
        handle = ConsumerHandle(proc, limit=timeout + _STARTUP_SLACK)
        if wait_ready:
            handle.wait_ready()
        return handle

    @staticmethod
    def _item_lines(items: Sequence[bytes], kind: str,
                    values: Sequence[int | str] | int | str | None) -> list[str]:
        if kind == "plain":
            if values is not None:
                raise ConfigurationError("a plain queue takes no values")
            return [_hex_line(item) for item in items]
        if values is None:
            if kind == "priority":
                values = 0
            else:
                raise ConfigurationError(f"a {kind} put needs values (one per item, or one for all)")
        if isinstance(values, (str, int)):
            per_item: list[int | str] = [values] * len(items)
        else:
            per_item = list(values)
            if len(per_item) != len(items):
                raise ConfigurationError(f"{len(items)} items but {len(per_item)} values")
        return [_hex_line(item, _check_value(kind, v)) for item, v in zip(items, per_item, strict=True)]


# ----------------------------------------------------------------------------------------------------------------
# Benchmark commands (used by the ``benchmarks`` package)


def _parse_result(lines: Sequence[str], command: str, stderr: str = "") -> dict[str, object]:
    import json  # noqa: PLC0415 - only benchmarks need it

    for line in lines:
        if line.startswith("RESULT "):
            try:
                value = json.loads(line[len("RESULT ") :])
            except ValueError as exc:
                raise CuratorPeerError(f"the peer printed a malformed RESULT line: {line!r}") from exc
            if not isinstance(value, dict):
                raise CuratorPeerError(f"the peer printed a malformed RESULT line: {line!r}")
            return value
    raise CuratorPeerError(f"Curator peer `{command}` printed no RESULT line: {list(lines)[-5:]!r}", stderr=stderr)


class BenchConsumer:
    """A ``bench-consume`` peer: started, connected (READY), then released by :meth:`go`; :meth:`stop` ends it
    (stdin EOF) and :meth:`result` returns its RESULT dict (consumed, t_go, t_first, t_last, rss_kb)."""

    def __init__(self, proc: _Proc, limit: float) -> None:
        self._p = proc
        self._limit = limit
        self._started = time.monotonic()

    def wait_ready(self, timeout: float = _STARTUP_SLACK) -> None:
        if not self._p.wait_until(lambda p: "READY" in p._lines, timeout):
            self._p.kill()
            raise CuratorPeerError("the Curator bench consumer did not become ready", stderr=self._p.stderr_tail())

    def go(self) -> None:
        stdin = self._p.proc.stdin
        assert stdin is not None
        stdin.write(b"GO\n")
        stdin.flush()

    def has_result(self) -> bool:
        return any(line.startswith("RESULT ") for line in self._p.lines())

    def stop(self) -> None:
        self._p.close_stdin()

    def result(self, timeout: float | None = None) -> dict[str, object]:
        if timeout is None:
            timeout = self._limit - (time.monotonic() - self._started)
        code = self._p.finish(timeout)
        if code != 0:
            raise CuratorPeerError("the Curator bench consumer failed", returncode=code, stderr=self._p.stderr_tail())
        return _parse_result(self._p.lines(), "bench-consume", self._p.stderr_tail())

    def stderr_tail(self) -> str:
        return self._p.stderr_tail()

    def kill(self) -> None:
        self._p.kill()


def bench_run(peer: CuratorPeer, command: str, path: str, options: Sequence[str], timeout: float
              ) -> dict[str, object]:
    """Run a one-shot benchmark command (``bench-put``, ``bench-put-multi``, ``bench-latency``,
    ``bench-raw-create``) and return the parsed RESULT dict."""
    if command not in ("bench-put", "bench-put-multi", "bench-latency", "bench-raw-create"):
        raise ConfigurationError(f"not a one-shot benchmark command: {command!r}")
    return _parse_result(peer.run(command, path, options, (), timeout), command)


def start_bench_consumer(peer: CuratorPeer, path: str, *, lock_path: str | None = None, count: int | None = None,
                         max_seconds: float = 600.0) -> BenchConsumer:
    """Start a ``bench-consume`` peer (returns at once; call ``wait_ready`` then ``go``)."""
    options = ["--max-seconds", str(max_seconds)]
    if lock_path is not None:
        options += ["--lock-path", lock_path]
    if count is not None:
        options += ["--count", str(count)]
    proc = _Proc(peer.argv("bench-consume", path, *options), None)
    return BenchConsumer(proc, limit=max_seconds + _STARTUP_SLACK)
