"""How ``zkqueue bench`` finds the benchmark harness: the root of a source checkout (benchmarks/ is not in the wheel;
tests/packaging/test_wheel.py runs the installed command outside a checkout)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from zkqueue.ops.cli import find_checkout

ROOT = Path(__file__).resolve().parents[2]


def _checkout(at: Path) -> Path:
    (at / "benchmarks").mkdir(parents=True)
    (at / "benchmarks" / "runner.py").write_text("")
    (at / "zkqueue").mkdir()
    (at / "zkqueue" / "__init__.py").write_text("")
    return at


def test_the_checkout_is_found_at_or_above_each_start_in_order(tmp_path: Path) -> None:
    first = _checkout(tmp_path / "one")
    second = _checkout(tmp_path / "two")
    (first / "zkqueue" / "ops").mkdir()
    assert find_checkout(first / "zkqueue" / "ops", second) == first
    assert find_checkout(tmp_path / "elsewhere", second / "benchmarks") == second


def test_a_folder_with_benchmarks_but_no_zkqueue_package_is_no_checkout(tmp_path: Path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "runner.py").write_text("")
    assert find_checkout(tmp_path) is None


def test_this_repository_is_found_from_the_package() -> None:
    import zkqueue.ops.cli as cli

    assert find_checkout(Path(cli.__file__).resolve().parents[2]) == ROOT


def test_bench_help_is_the_harness_help_from_any_folder(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "zkqueue.ops.cli", "bench", "--help"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage: python -m benchmarks" in out.stdout and "--quick" in out.stdout
