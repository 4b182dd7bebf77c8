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

This module is the Python API: :class:`CuratorPeer` (one JVM per call) and the benchmark commands. Building the
peer (javac, jar cache, class-data sharing) is :mod:`zkqueue.interop.peer_build`; running it and reading its
output (:class:`ConsumerHandle`, :class:`BenchConsumer`, the live-JVM registry) is
:mod:`zkqueue.interop.peer_process`. Their names are importable from here as before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal

from zkqueue.errors import ConfigurationError, CuratorPeerError
from zkqueue.interop.peer_build import (
    _QUIET_JVM_LOGS,
    MAIN_CLASS,
    PEER_JAR,  # noqa: F401 - public here as before the split
    PEER_SOURCE,  # noqa: F401 - public here as before the split
    _cds_archive,
    _java_tool,
    cache_dir,  # noqa: F401 - public here as before the split
    compiled_peer,
)
from zkqueue.interop.peer_process import (
    _LIVE,  # noqa: F401 - read through this module by the tests' no-JVM-left-behind checks
    _LIVE_LOCK,  # noqa: F401 - read through this module by the tests' no-JVM-left-behind checks
    _STARTUP_SLACK,
    BenchConsumer,
    ConsumerHandle,
    _kill_all_live,  # noqa: F401 - called through this module by the tests' no-JVM-left-behind checks
    _Proc,
    _parse_result,
)
from zkqueue.server.jars import curator_classpath

Kind = Literal["plain", "priority", "delay", "id"]
KINDS: tuple[str, ...] = ("plain", "priority", "delay", "id")
ErrorModeName = Literal["requeue", "delete"]

#: JVM options that make a short-lived peer start fast (C1 only, serial GC). Tests use these (the default).
FAST_START_JVM_ARGS: tuple[str, ...] = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")
#: JVM options for throughput runs (benchmarks): the JVM's own defaults, full JIT.
THROUGHPUT_JVM_ARGS: tuple[str, ...] = ()

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


# ----------------------------------------------------------------------------------------------------------------
# Protocol: the peer's stdin lines, checked before any JVM starts


def _hex_line(item: bytes, value: object | None = None) -> str:
    if not isinstance(item, (bytes, bytearray, memoryview)):
        raise ConfigurationError(f"items must be bytes, got {type(item).__name__}")
    text = bytes(item).hex()
    if value is None:
        return text
    return f"{text}\t{value}"


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


# ----------------------------------------------------------------------------------------------------------------
# Public API


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
