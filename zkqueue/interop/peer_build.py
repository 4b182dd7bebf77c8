"""Build the Java Curator peer: find ``java``/``javac``, compile ``CuratorPeer.java`` into a cached jar, dump its
class-data-sharing archive.

The jar lives in a cache folder (``$ZKQUEUE_CACHE_DIR``, else ``$XDG_CACHE_HOME/zkqueue``, else
``~/.cache/zkqueue``) named after a hash of the source, the classpath and the compiler, built under a file lock so
parallel test processes do not race. The archive is dumped next to it once per JVM option set
(``ZKQUEUE_PEER_CDS=0`` turns it off). Running the peer is :mod:`zkqueue.interop.peer_process`; the Python API is
:mod:`zkqueue.interop.curator_peer`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from zkqueue.errors import EnvironmentProblem
from zkqueue.server.jars import curator_classpath

log = logging.getLogger("zkqueue.interop.peer_build")

#: The Java source of the peer; shipped as package data.
PEER_SOURCE = Path(__file__).with_name("CuratorPeer.java")
MAIN_CLASS = "CuratorPeer"
PEER_JAR = "curator-peer.jar"

#: JVM unified logging writes warnings to stdout by default; the peer's stdout is its protocol.
_QUIET_JVM_LOGS: tuple[str, ...] = ("-Xlog:disable", "-Xlog:all=warning:stderr")


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
