"""The wheel and sdist of ``python -m build``, installed in a fresh venv with the core dependencies only.

One build and one venv for the module: the wheel is installed the way a user does it (``pip install zkqueue-*.whl``,
its dependencies resolved by pip), then used as a user would: ``import zkqueue``, ``zkqueue --help``, a task round
trip against ``zkqueue server`` with ``zkqueue worker``, and the optional parts, which must fail with one clear
message naming their extra. The embedded server gets its jars through ``ZOOKEEPER_CLASSPATH`` (the jars of the dev
venv's pyspark, what the ``[server]`` extra would install), so the venv stays light.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

import zkqueue
from zkqueue.server.jars import zookeeper_classpath

ROOT = Path(__file__).resolve().parents[2]

#: Packages the core must not pull in (each belongs to an extra).
OPTIONAL = ("flask", "rich", "prometheus_client", "pyspark", "pyarrow", "celery", "kombu", "opentelemetry")


def _run(args: list[str], *, timeout: float = 120, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)  # type: ignore[call-overload]


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing of the dev venv's, no jar locations unless given."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ZOOKEEPER_CLASSPATH", "ZOOKEEPER_HOME")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build``: the sdist, and the wheel built from it (no build isolation: the dev venv's setuptools)."""
    out = tmp_path_factory.mktemp("dist")
    built = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)], timeout=300)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no pip of its own: the dev venv's pip installs into it) holding the wheel and its core
    dependencies."""
    home = tmp_path_factory.mktemp("venv") / "v"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(home)])
    assert made.returncode == 0, made.stderr
    (wheel,) = dist.glob("zkqueue-*.whl")
    installed = _run([sys.executable, "-m", "pip", "--python", str(home / "bin" / "python"), "install", "--quiet",
                      str(wheel)], timeout=300, env=_clean_env())
    assert installed.returncode == 0, installed.stderr[-3000:]
    return home


def _py(venv: Path, code: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return _run([str(venv / "bin" / "python"), "-c", textwrap.dedent(code)], **kwargs)


def test_the_sdist_and_the_wheel_carry_the_package_and_its_data(dist: Path) -> None:
    (sdist,) = dist.glob("zkqueue-*.tar.gz")
    (wheel,) = dist.glob("zkqueue-*-py3-none-any.whl")
    assert sdist.name == f"zkqueue-{zkqueue.__version__}.tar.gz"
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    with zipfile.ZipFile(wheel) as whl:
        files = set(whl.namelist())
        metadata = whl.read(f"zkqueue-{zkqueue.__version__}.dist-info/METADATA").decode()
    for name in ("README.md", "setup.cfg", "pyproject.toml", "zkqueue/__init__.py", "zkqueue/_extras.py"):
        assert name in names, name
    for data in ("zkqueue/py.typed", "zkqueue/ops/grafana/zkqueue.json", "zkqueue/ops/dashboard/templates/base.html",
                 "zkqueue/ops/dashboard/static/style.css", "zkqueue/interop/CuratorPeer.java"):
        assert data in files and data in names, data
    assert not any(f.startswith(("tests/", "benchmarks/")) for f in files)
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    core = sorted(r.split()[1].split(">")[0].split(";")[0].lower() for r in requires if "extra ==" not in r)
    assert core == ["click", "croniter", "kazoo", "tenacity"]
    extras = {line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Provides-Extra:")}
    assert {"cli", "dashboard", "metrics", "spark", "celery", "otel", "server", "all"} <= extras


def test_the_core_install_imports_without_the_extras(venv: Path) -> None:
    out = _py(venv, f"""
        import importlib.util, importlib.metadata, zkqueue
        print(zkqueue.__version__, importlib.metadata.version("zkqueue"))
        print(",".join(m for m in {OPTIONAL!r} if importlib.util.find_spec(m) is not None))
        print(zkqueue.App.__name__, zkqueue.JobQueue.__name__, zkqueue.QueueBuilder.__name__)
        """, env=_clean_env())
    assert out.returncode == 0, out.stderr
    versions, present, names = out.stdout.splitlines()
    assert versions == f"{zkqueue.__version__} {zkqueue.__version__}"
    assert present == "", f"the core install pulled in optional packages: {present}"
    assert names == "App JobQueue QueueBuilder"


def test_every_module_imports_or_names_its_extra(venv: Path) -> None:
    """Each module of the wheel imports on the core, except the optional parts, which raise MissingExtraError
    naming their extra (and nothing else: no bare ModuleNotFoundError of some package)."""
    out = _py(venv, """
        import importlib, pkgutil, zkqueue
        from zkqueue.errors import MissingExtraError
        for m in pkgutil.walk_packages(zkqueue.__path__, "zkqueue.", onerror=lambda name: None):
            if m.name == "zkqueue.server.pytest_plugin":
                continue  # loaded by pytest only
            try:
                importlib.import_module(m.name)
            except MissingExtraError as exc:
                print(m.name, exc.extra, isinstance(exc, ImportError), f"zkqueue[{exc.extra}]" in str(exc))
            except Exception as exc:
                print(m.name, "BROKEN", repr(exc))
        """, env=_clean_env())
    assert out.returncode == 0, out.stderr
    found = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert not [name for name, how in found.items() if how.startswith("BROKEN")], found
    assert all(how.endswith(" True True") for how in found.values()), found  # ImportErrors naming the extra
    extras = {name: how.split()[0] for name, how in found.items()}
    for name, extra in {"zkqueue.celery": "celery", "zkqueue.metrics": "metrics", "zkqueue.otel": "otel",
                        "zkqueue.ops.dashboard": "dashboard", "zkqueue.spark": "spark", "zkqueue.ops.watch": "cli"}.items():
        assert extras.pop(name) == extra, name
    # Anything else that needs an extra is a rich view of the command line (the demo, say), never the core.
    assert all(name.startswith("zkqueue.ops.") and extra == "cli" for name, extra in extras.items()), extras


def test_the_cli_runs_and_a_missing_extra_is_one_clear_line(venv: Path, tmp_path: Path) -> None:
    zkq = str(venv / "bin" / "zkqueue")
    helped = _run([zkq, "--help"], env=_clean_env())
    assert helped.returncode == 0, helped.stderr
    for command in ("worker", "server", "jobs", "dashboard"):
        assert f"  {command} " in helped.stdout
    for args, extra in ((["dashboard", "--connect", "127.0.0.1:1"], "dashboard"),
                        (["metrics", "--connect", "127.0.0.1:1", "/q"], "metrics"),
                        (["watch", "--connect", "127.0.0.1:1", "/q"], "cli"),
                        (["server"], "server")):
        out = _run([zkq, *args], env=_clean_env(), cwd=tmp_path)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr, out.stderr
        assert f"pip install 'zkqueue[{extra}]'" in out.stderr, (args, out.stderr)
    bench = _run([zkq, "bench", "--list"], env=_clean_env(), cwd=tmp_path)
    assert bench.returncode == 1 and "source checkout" in bench.stderr, bench.stderr


def test_a_task_round_trip_against_zkqueue_server(venv: Path, tmp_path: Path) -> None:
    """``zkqueue server`` of the wheel (the dev venv's jars by ZOOKEEPER_CLASSPATH), a task enqueued, ``zkqueue
    worker --burst`` runs it, the handle gives its result."""
    env = _clean_env(ZOOKEEPER_CLASSPATH=zookeeper_classpath())
    (tmp_path / "smoke_app.py").write_text(textwrap.dedent("""
        import os
        import zkqueue

        app = zkqueue.App(os.environ["ZKQUEUE_CONNECT"])

        @app.task
        def add(a: int, b: int) -> int:
            return a + b
        """))
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen([str(venv / "bin" / "zkqueue"), "server"], stdout=subprocess.PIPE, stderr=log,
                              text=True, env=env, cwd=tmp_path)
    try:
        connect = server.stdout.readline().strip()  # type: ignore[union-attr]  # the connect string, once it serves
        assert connect, (tmp_path / "server.log").read_text()[-3000:]
        out = _py(venv, """
            import subprocess, sys
            from smoke_app import add, app
            handles = [add.enqueue(i, 10) for i in range(3)]
            worker = subprocess.run([sys.prefix + "/bin/zkqueue", "worker", "smoke_app:app", "--burst", "--quiet"],
                                    capture_output=True, text=True, timeout=120)
            print(worker.returncode, [h.result(timeout=60) for h in handles])
            if worker.returncode:
                print(worker.stderr[-2000:])
            app.close()
            """, env={**env, "ZKQUEUE_CONNECT": connect + "/smoke"}, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.splitlines()[0] == "0 [10, 11, 12]", out.stdout
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    assert server.returncode == 0, (tmp_path / "server.log").read_text()[-3000:]
