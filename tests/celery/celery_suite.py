"""Celery's own integration tests (``t/integration/test_tasks.py`` and ``test_canvas.py`` of the installed Celery's
sdist) against ``zkqueue://`` and, for comparison, against Redis.

The sdist is fetched at test time with pip into the cache the kombu suite uses (never into the repository); its
``t/`` package (``t/__init__.py``, ``t/canvas_helpers.py``, ``t/integration/``) is extracted into a temporary
directory with a generated root ``conftest.py`` (``import zkqueue.celery``, so the worker thread and its pool
processes know the scheme) and ``pytest.ini`` (Celery's markers), and pytest runs there in a subprocess with
``TEST_BROKER`` and ``TEST_BACKEND`` set. Celery's tests use Redis for their own bookkeeping (``redis-echo`` lists,
pub/sub channel counts; ``REDIS_HOST`` and ``REDIS_PORT``), so a private ``redis-server`` runs for both targets.

Celery's ``t/integration/tasks.py`` imports ``pydantic``, which the project does not depend on: when it is not
importable, pip installs it into the cache (``pip install --target``) and the generated conftest appends that
directory to ``sys.path`` (after site-packages, so nothing installed is shadowed).

``python -m tests.celery.celery_suite [zkqueue|redis|both] [pytest args...]`` runs it and prints the counts.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import celery

from tests.celery.kombu_suite import CACHE, fetch_sdist

__all__ = ["FILES", "SUBSET", "Outcome", "fetch_sdist", "prepare", "pydantic_path", "result_name", "run", "run_target",
           "skip_tally", "table"]

ROOT = Path(__file__).resolve().parents[2]
FILES = ("test_tasks.py", "test_canvas.py")

#: The subset ``make test`` runs (tests/celery/test_celery_suite.py): each test id under t/integration/.
SUBSET = (
    "test_tasks.py::test_class_based_tasks::test_class_based_task_retried",
    "test_tasks.py::test_tasks::test_simple_call",
    "test_tasks.py::test_tasks::test_basic_task",
    "test_tasks.py::test_tasks::test_ignore_result",
    "test_tasks.py::test_tasks::test_properties",
    "test_tasks.py::test_tasks::test_task_retried_once",
    "test_tasks.py::test_tasks::test_wrong_arguments",
    "test_tasks.py::test_tasks::test_pydantic_annotations",
    "test_tasks.py::test_tasks::test_reject_with_requeue_redelivers_and_succeeds",
    "test_canvas.py::test_link_error::test_link_error_eager",
    "test_canvas.py::test_chain::test_simple_chain",
    "test_canvas.py::test_chain::test_single_chain",
    "test_canvas.py::test_chain::test_complex_chain",
    "test_canvas.py::test_chain::test_group_results_in_chain",
    "test_canvas.py::test_chord::test_simple_chord_with_a_delay_in_group_save",
    "test_canvas.py::test_chord::test_chord_order",
    "test_canvas.py::test_chord::test_replaced_nested_chord",
    "test_canvas.py::test_chord::test_group_chain",
    "test_canvas.py::test_chord::test_nested_group_chain",
    "test_canvas.py::test_chord::test_single_task_header",
    "test_canvas.py::test_chord::test_empty_header_chord",
    "test_canvas.py::test_chord::test_nested_chord",
    "test_canvas.py::test_chord::test_chord_in_chords_with_chains",
    "test_canvas.py::test_chord::test_chain_chord_chain_chord",
    "test_canvas.py::test_chord::test_chord_in_chain_with_args",
    "test_canvas.py::test_chord::test_priority",
    "test_canvas.py::test_chord::test_chord_header_task_replaced_with_chain",
    "test_canvas.py::test_chord::test_chord_unlock_with_failed_task_in_nested_chain_member",
    "test_canvas.py::test_chord::test_parallel_chords",
    # a failed header part's own exception reaches get() (not the body's ChordError), as on Redis
    "test_canvas.py::test_chord::test_error_propagates_to_chord_from_simple",
    "test_canvas.py::test_chord::test_chord_error_propagation_with_different_body_types[body is a chain]",
)


@dataclass
class Outcome:
    """How one run ended: test ids by result (``failed`` holds errors too), and the tail of pytest's output."""

    target: str
    passed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # test id -> first line of its failure
    skip_reasons: dict[str, str] = field(default_factory=dict)  # test id -> the skip's (or xfail's) reason
    output: str = ""

    def counts(self) -> str:
        return f"{len(self.passed)} passed, {len(self.skipped)} skipped, {len(self.failed)} failed"


def prepare(target: Path, version: str = celery.__version__) -> Path:
    """Extract Celery's ``t/`` test package into ``target`` and generate the conftest and ini; the test dir."""
    tarball = fetch_sdist("celery", version)
    prefix = f"celery-{version}/"
    wanted = ("t/__init__.py", "t/canvas_helpers.py", "t/skip.py")
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            rel = member.name[len(prefix):] if member.name.startswith(prefix) else ""
            if member.isfile() and (rel in wanted or rel.startswith("t/integration/")):
                data = tar.extractfile(member)
                assert data is not None
                out = target / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(data.read())
    extra = pydantic_path()
    (target / "conftest.py").write_text(textwrap.dedent(f'''
        import sys

        EXTRA = {str(extra) if extra else None!r}
        if EXTRA and EXTRA not in sys.path:
            sys.path.append(EXTRA)  # pydantic for Celery's tasks.py (after site-packages: shadows nothing)

        import zkqueue.celery  # noqa: F401,E402  (registers zkqueue:// for the worker thread and its pool)
        '''))
    (target / "pytest.ini").write_text(textwrap.dedent("""
        [pytest]
        markers =
            flaky(reruns, reruns_delay, cause): Celery's marker for pytest-rerunfailures (not installed: no reruns)
            timeout: pytest-timeout
            amqp: Celery's marker
        python_classes = test_*
        timeout = 300
        asyncio_default_fixture_loop_scope = function
        """))
    return target / "t" / "integration"


def pydantic_path() -> Path | None:
    """None when pydantic is importable here; else a cache directory pip installed it into."""
    if importlib.util.find_spec("pydantic") is not None:
        return None
    folder = CACHE / "pydantic-site"
    if not (folder / "pydantic").is_dir():
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(folder),
                               "pydantic>=2"], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"pip install --target of pydantic failed: {(proc.stderr or proc.stdout)[-500:]}")
    return folder


def run(target: Path, broker: str, backend: str, redis_host: str, redis_port: int, tests: list[str],
        junit: Path, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    """pytest on ``tests`` (paths or ids under ``t/integration``) in ``target`` with Celery's environment."""
    env = dict(os.environ, TEST_BROKER=broker, TEST_BACKEND=backend, REDIS_HOST=redis_host,
               REDIS_PORT=str(redis_port),
               PYTHONPATH=os.pathsep.join(p for p in (str(target), str(ROOT), os.environ.get("PYTHONPATH")) if p))
    args = [str(Path("t") / "integration" / t) for t in tests]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(target / "pytest.ini"),
         "--rootdir", str(target), "-p", "celery.contrib.pytest", "-rfEs", f"--junitxml={junit}", *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=target)


def result_name(test_id: str) -> str:
    """The name :func:`parse` gives the test ``test_id`` (``test_tasks.py::test_tasks::test_simple_call`` ->
    ``test_tasks.test_tasks.test_simple_call``)."""
    path, _sep, rest = test_id.partition("::")
    return f"{path.removesuffix('.py')}.{rest.replace('::', '.')}"


def parse(junit: Path, target: str, output: str = "") -> Outcome:
    outcome = Outcome(target, output=output)
    for case in ET.parse(junit).getroot().iter("testcase"):
        classname = (case.get("classname") or "").removeprefix("t.integration.")
        name = f"{classname}.{case.get('name')}"
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            outcome.failed[name] = (problem.get("message") or "").splitlines()[0][:300] if problem.get(
                "message") else ""
        elif (skipped := case.find("skipped")) is not None:
            outcome.skipped.append(name)
            outcome.skip_reasons[name] = _skip_reason(skipped)
        else:
            outcome.passed.append(name)
    return outcome


def _skip_reason(skipped: ET.Element) -> str:
    """A skip's reason as pytest's junit report gives it ("xfail" reasons are prefixed so by pytest)."""
    message = skipped.get("message") or (skipped.text or "")
    return message.splitlines()[0][:200] if message else "?"


def skip_tally(outcome: Outcome) -> list[tuple[int, str]]:
    """How many tests were skipped for each reason, most first."""
    counts: dict[str, int] = {}
    for reason in outcome.skip_reasons.values():
        counts[reason] = counts.get(reason, 0) + 1
    return sorted(((n, reason) for reason, n in counts.items()), key=lambda pair: (-pair[0], pair[1]))


def run_target(name: str, work: Path, zk_hosts: str | None, redis_url: tuple[str, int],
               tests: list[str]) -> Outcome:
    """Run ``tests`` on ``name`` ("zkqueue": broker and backend on a fresh chroot of ``zk_hosts``; "redis")."""
    from zkqueue.server.testing import fresh_chroot

    host, port = redis_url
    if name == "zkqueue":
        assert zk_hosts is not None
        url = "zkqueue://" + fresh_chroot(zk_hosts)
        broker = backend = url
    else:
        broker, backend = f"redis://{host}:{port}/1", f"redis://{host}:{port}/2"
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    prepare(folder)
    junit = folder / "junit.xml"
    proc = run(folder, broker, backend, host, port, tests, junit)
    if not junit.exists():
        raise RuntimeError(f"pytest wrote no report:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    return parse(junit, name, proc.stdout[-8000:] + proc.stderr[-2000:])


def table(outcomes: list[Outcome]) -> str:
    """The counts side by side, and every test that passed on one target and not on another."""
    lines = [f"{'target':10} {'passed':>7} {'skipped':>8} {'failed':>7}"]
    for o in outcomes:
        lines.append(f"{o.target:10} {len(o.passed):7d} {len(o.skipped):8d} {len(o.failed):7d}")
    for o in outcomes:
        for name, message in sorted(o.failed.items()):
            lines.append(f"  {o.target} FAILED {name}: {message}")
    for o in outcomes:
        for n, reason in skip_tally(o):
            lines.append(f"  {o.target} skipped {n:3d}: {reason}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import tempfile

    from benchmarks.jobs_peers import redis_server
    from zkqueue.server.testing import server_from_environment

    which = argv[0] if argv and argv[0] in ("zkqueue", "redis", "both") else "both"
    tests = [a for a in argv if a not in ("zkqueue", "redis", "both")] or list(FILES)
    targets = ["zkqueue", "redis"] if which == "both" else [which]
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="zkq-celery-suite-") as tmp, redis_server() as redis:
        zk = server_from_environment(size=1) if "zkqueue" in targets else None
        try:
            for name in targets:
                outcome = run_target(name, Path(tmp), zk.connect_string if zk else None,
                                     (redis.host, redis.port), tests)
                print(f"{name}: {outcome.counts()}", flush=True)
                outcomes.append(outcome)
        finally:
            if zk is not None:
                zk.close()
    print(table(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
