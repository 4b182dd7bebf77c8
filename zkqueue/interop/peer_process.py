"""Talk to a running Curator peer JVM: its stdout protocol and stderr tail, its deadline, and its handles.

:class:`_Proc` starts one peer and reads its protocol lines (ITEM / FAIL payloads as hex, READY, PUT, DONE,
RESULT, ...) and a bounded tail of its stderr on daemon threads. :class:`ConsumerHandle` and
:class:`BenchConsumer` wrap a long-running consumer. Every live JVM is registered here and killed at interpreter
exit, so no JVM outlives the Python process that started it. Building the peer is
:mod:`zkqueue.interop.peer_build`; the Python API is :mod:`zkqueue.interop.curator_peer`.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Literal

from zkqueue.errors import CuratorPeerError, EnvironmentProblem
from zkqueue.interop.peer_build import MAIN_CLASS

log = logging.getLogger("zkqueue.interop.peer_process")

#: Extra seconds allowed on top of a command's own work for JVM start-up, connecting and closing.
_STARTUP_SLACK = 30.0


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
# Protocol: reading the peer's output


def _parse_hex(payload: str, line: str) -> bytes:
    try:
        return bytes.fromhex(payload)
    except ValueError as exc:
        raise CuratorPeerError(f"the peer printed a malformed item line: {line!r}") from exc


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
# Handles on running consumers


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


# ----------------------------------------------------------------------------------------------------------------
# The benchmark consumer (used by the ``benchmarks`` package)


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
