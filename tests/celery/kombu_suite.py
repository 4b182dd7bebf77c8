"""kombu's own integration mixins (``t/integration/common.py`` of the installed kombu's sdist) against zkqueue://.

The sdist is fetched at test time with pip into a cache directory (never into the repository), common.py is
extracted into a temporary package, and a generated test module combines its mixins with fixtures pointing at
the suite's ZooKeeper (a fresh chroot per test). It runs in a pytest subprocess with its own ini file, because
kombu's tests use markers (``env``, ``flaky``) this repository's ``--strict-markers`` does not know.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import kombu

#: Where downloaded sdists are kept between runs (outside the repository).
CACHE = Path(os.environ.get("ZKQUEUE_SDIST_CACHE", Path.home() / ".cache" / "zkqueue" / "sdists"))

#: Mixins of common.py run here, with the reason of any that is skipped as a whole.
MIXINS: dict[str, str | None] = {
    "BasicFunctionality": None,
    "BaseExchangeTypes": None,
    "BaseTimeToLive": None,
    "BasePriority": None,
    "BaseMessage": None,
    "BaseFailover": None,
    "BaseEventLoop": None,
}

#: Class attributes of the generated classes (the knobs kombu's mixins offer to each transport).
CLASS_ATTRIBUTES = {
    # lower numbers first (Celery's order on Redis; kombu's Redis tests set the same)
    "BasePriority": {"PRIORITY_ORDER": "desc"},
}


def fetch_sdist(package: str = "kombu", version: str | None = None) -> Path:
    """The sdist of ``package`` (kombu, or celery for :mod:`.celery_suite`) at ``version`` (default: the installed
    one) in the cache, downloaded with pip when missing; RuntimeError if pip fails."""
    if version is None:
        version = importlib.metadata.version(package)
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / f"{package}-{version}.tar.gz"
    if tarball.exists():
        return tarball
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", f"{package}=={version}",
         "-d", str(CACHE), "--quiet"],
        capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 or not tarball.exists():
        raise RuntimeError(f"pip download of {package}=={version} failed: "
                           f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    return tarball


def extract_common(tarball: Path, target: Path, version: str = kombu.__version__) -> Path:
    """Extract ``t/integration/common.py`` as ``target/kombu_integration/common.py``; its path."""
    member = f"kombu-{version}/t/integration/common.py"
    package = target / "kombu_integration"
    package.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        source = tar.extractfile(member)
        if source is None:
            raise RuntimeError(f"{member} is not in {tarball.name}")
        (package / "common.py").write_bytes(source.read())
    (package / "__init__.py").write_text("")
    return package / "common.py"


def available_mixins(common: Path) -> list[str]:
    text = common.read_text()
    return [name for name in MIXINS if f"class {name}" in text]


def generate(target: Path, mixins: list[str]) -> Path:
    """Write the test module, its conftest (fixtures, markers) and pytest.ini into ``target``."""
    classes = []
    for name in mixins:
        reason = MIXINS[name]
        mark = f"@pytest.mark.skip(reason={reason!r})\n" if reason else ""
        attrs = "".join(f"    {k} = {v!r}\n" for k, v in CLASS_ATTRIBUTES.get(name, {}).items()) or "    pass\n"
        classes.append(f"{mark}class Test{name}(common.{name}):\n{attrs}")
    (target / "test_zkqueue_kombu.py").write_text(
        "import pytest\n\nfrom kombu_integration import common\n\n\n" + "\n\n".join(classes))
    (target / "conftest.py").write_text(textwrap.dedent('''
        import os
        import socket

        import kombu
        import pytest

        import zkqueue.celery  # noqa: F401  (registers zkqueue://)
        from zkqueue.server.testing import fresh_chroot

        HOSTS = os.environ["ZKQUEUE_KOMBU_SUITE_HOSTS"]


        def _dead_port():
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                return sock.getsockname()[1]


        @pytest.fixture
        def connection():
            conn = kombu.Connection("zkqueue://" + fresh_chroot(HOSTS), connect_timeout=10)
            yield conn
            conn.release()


        @pytest.fixture
        def invalid_connection():
            return kombu.Connection(f"zkqueue://127.0.0.1:{_dead_port()}/nowhere", connect_timeout=1)


        @pytest.fixture
        def failover_connection():
            # The live URL is single-host: kombu parses an alternate URL itself when it switches to it.
            # port= states the dead URL's port in kombu's own field: kombu does not parse the URLs of a transport
            # with can_parse_url (zkqueue:// parses its multi-host URLs itself), so conn.port would be None.
            dead = _dead_port()
            conn = kombu.Connection(
                f"zkqueue://127.0.0.1:{dead}/nowhere;zkqueue://" + fresh_chroot(HOSTS),
                port=dead, connect_timeout=2)
            yield conn
            conn.release()
        '''))
    (target / "pytest.ini").write_text(textwrap.dedent("""
        [pytest]
        markers =
            env(name): kombu's marker of the broker a test needs
            flaky(reruns, reruns_delay): kombu's marker for pytest-rerunfailures
        """))
    return target / "test_zkqueue_kombu.py"


def run(target: Path, hosts: str, junit: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ZKQUEUE_KOMBU_SUITE_HOSTS=hosts, PYTHONPATH=os.pathsep.join(
        [str(target), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(target / "pytest.ini"),
         "--rootdir", str(target), "-rs", f"--junitxml={junit}", str(target / "test_zkqueue_kombu.py")],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=target)
