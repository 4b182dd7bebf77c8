"""The Python wrapper of the Curator peer: compilation cache, environment errors, argument checks, failures."""

from __future__ import annotations

import socket
import threading
import zipfile
from pathlib import Path

import pytest

import zkqueue.server.jars
from zkqueue.errors import ConfigurationError, EnvironmentProblem
from zkqueue.interop import CuratorPeer, CuratorPeerError, compiled_peer

pytestmark = pytest.mark.interop


def test_parallel_first_use_compiles_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZKQUEUE_CACHE_DIR", str(tmp_path))
    results: list[Path] = []
    errors: list[BaseException] = []

    def compile_it() -> None:
        try:
            results.append(compiled_peer())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=compile_it) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors
    assert len(results) == 3 and len(set(results)) == 1
    jar = results[0]
    with zipfile.ZipFile(jar) as zf:
        assert "CuratorPeer.class" in zf.namelist()
    folder = jar.parent
    # one compiled folder, its lock file, and no leftover temporary folders
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([folder.name, folder.name + ".lock"])

    # The first command line also dumps the class-data-sharing archive that speeds up every later JVM.
    argv = CuratorPeer("127.0.0.1:1").argv("put", "/q")
    archives = [a.split("=", 1)[1] for a in argv if a.startswith("-XX:SharedArchiveFile=")]
    assert len(archives) == 1 and Path(archives[0]).is_file()
    assert Path(archives[0]).parent == folder
    assert not [p for p in folder.iterdir() if p.suffix == ".tmp"]


def test_missing_java_is_an_environment_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZKQUEUE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(EnvironmentProblem, match="javac"):
        CuratorPeer("127.0.0.1:1").put("/q", [b"x"])


def test_missing_curator_jars_is_an_environment_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zkqueue.server.jars, "pyspark_jars_dir", lambda: tmp_path)
    with pytest.raises(EnvironmentProblem, match="curator"):
        CuratorPeer("127.0.0.1:1").consume("/q", count=1, timeout=1)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda p: p.put("/q", [b"x"], kind="fifo"), "unknown queue kind"),
        (lambda p: p.put("/q", [b"x"], values=[1]), "plain queue takes no values"),
        (lambda p: p.put("/q", [b"x"], kind="priority", values=[2**31]), "Java int"),
        (lambda p: p.put("/q", [b"x", b"y"], kind="priority", values=[1]), "2 items but 1 values"),
        (lambda p: p.put("/q", [b"x"], kind="delay"), "needs values"),
        (lambda p: p.put("/q", [b"x"], kind="id", values="a\nb"), "line breaks"),
        (lambda p: p.put("/q", ["text"]), "must be bytes"),
        (lambda p: p.put_multi("/q", [b"x"], kind="id"), "no putMulti"),
        (lambda p: p.put_multi("/q", [b"x"], kind="delay"), "needs value="),
        (lambda p: p.start_consumer("/q", error_mode="delete"), "lock_path"),
        (lambda p: p.start_consumer("/q", lock_path="/l", error_mode="keep"), "error_mode"),
    ],
)
def test_bad_arguments_raise_before_any_jvm(call, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        call(CuratorPeer("127.0.0.1:1"))


def test_curator_failure_raises_with_the_java_error(curator_peer: CuratorPeer) -> None:
    with pytest.raises(CuratorPeerError, match="delayUntilEpoch cannot be negative") as info:
        curator_peer.put("/q", [b"x"], kind="delay", values=[0])
    assert info.value.returncode == 1


def test_usage_error_exits_2(curator_peer: CuratorPeer) -> None:
    with pytest.raises(CuratorPeerError, match="unknown command") as info:
        curator_peer.run("no-such-command", "/q")
    assert info.value.returncode == 2


def test_unreachable_server_raises(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    peer = CuratorPeer(f"127.0.0.1:{port}", connect_timeout_ms=1000)
    with pytest.raises(CuratorPeerError, match="could not connect"):
        peer.put("/q", [b"x"], timeout=30)
