"""Fixtures of the fault suite: a 3-node ensemble of its own, the ``--soak`` option, the figures table."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from zkqueue.server.embedded import ZooKeeperEnsemble

RESULTS_DIR = Path(__file__).parent / "results"
_FIGURES: dict[str, dict] = {}

#: The default (CI) soak: short, but long enough for several random faults.
CI_SOAK_MINUTES = 0.3


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        action="store",
        type=float,
        default=None,
        metavar="MINUTES",
        help=f"run the fault soak for MINUTES with random faults (default {CI_SOAK_MINUTES} in the normal run)",
    )
    parser.addoption("--soak-seed", action="store", type=int, default=None, help="random seed of the soak")


@pytest.fixture(scope="session")
def soak_minutes(request: pytest.FixtureRequest) -> float:
    value = request.config.getoption("--soak", default=None)
    return CI_SOAK_MINUTES if value is None else value


@pytest.fixture(scope="session")
def soak_seed(request: pytest.FixtureRequest) -> int:
    value = request.config.getoption("--soak-seed", default=None)
    return value if value is not None else int(time.time())


@pytest.fixture(scope="session")
def fault_ensemble() -> Iterator[ZooKeeperEnsemble]:
    """Three nodes of the fault suite's own (nobody else's sessions see our kills); restored after each test."""
    if os.environ.get("ZKQUEUE_ZK_CONNECT") or os.environ.get("ZKQUEUE_ZK"):
        pytest.skip("fault tests need the embedded ensemble")
    ensemble = ZooKeeperEnsemble(size=3, start_timeout=180).start_all()
    yield ensemble
    ensemble.close()


@pytest.fixture
def ensemble(fault_ensemble: ZooKeeperEnsemble) -> Iterator[ZooKeeperEnsemble]:
    yield fault_ensemble
    restore(fault_ensemble)


def restore(ensemble: ZooKeeperEnsemble) -> None:
    """Every node running, resumed, and one leader."""
    for i in range(ensemble.size):
        with contextlib.suppress(Exception):
            ensemble.resume(i)
        if not ensemble.is_running(i):
            ensemble.start(i, wait=False)
    ensemble.wait_ready(180)


@pytest.fixture
def journal_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """Where the worker processes keep their journals and logs: a folder of our own (pytest's tmp_path may be
    pruned by other pytest runs on a shared machine). Removed when the test passes, kept (and named) when not."""
    folder = Path(tempfile.mkdtemp(prefix="zkqueue-faults-"))
    failed_before = request.session.testsfailed
    yield folder
    if request.session.testsfailed == failed_before:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        print(f"\nfault journals kept in {folder}")


@pytest.fixture
def record_figures() -> Iterator:
    """``record_figures(accounting)``: keep a run's figures for the summary and tests/faults/results/."""

    def record(acc) -> None:  # noqa: ANN001 - checker.Accounting
        _FIGURES[acc.scenario] = acc.figures()
        RESULTS_DIR.mkdir(exist_ok=True)
        path = RESULTS_DIR / "latest.json"
        previous = {}
        with contextlib.suppress(Exception):
            previous = json.loads(path.read_text())
        previous[acc.scenario] = acc.figures()
        path.write_text(json.dumps(previous, indent=2, sort_keys=True) + "\n")

    yield record


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    if not _FIGURES:
        return
    tr = terminalreporter
    tr.section("zkqueue fault figures")
    tr.write_line(f"{'scenario':<26}{'mode':<7}{'acked':>7}{'uncert':>7}{'lost':>6}{'dups':>6}"
                  f"{'unexpl':>7}{'recovery_s':>11}{'drain_s':>9}  faults")
    for name, f in _FIGURES.items():
        rec = "-" if f["recovery_s"] is None else f"{f['recovery_s']:.2f}"
        drain = "-" if f["drain_s"] is None else f"{f['drain_s']:.1f}"
        tr.write_line(
            f"{name:<26}{f['mode']:<7}{f['acked']:>7}{f['uncertain']:>7}{f['lost']:>6}{f['duplicates']:>6}"
            f"{f['unexplained_duplicates']:>7}{rec:>11}{drain:>9}  {', '.join(f['faults'])[:80]}"
        )
    tr.write_line(f"(also in {RESULTS_DIR / 'latest.json'})")
