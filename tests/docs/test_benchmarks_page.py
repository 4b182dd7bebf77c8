"""The Benchmarks page is generated from the committed result files (docs/gen_benchmarks.py): every file gets its
section with the command, the date and the machine of its run, its figures are the files' own, and the README
quotes the page's headline verbatim (no figure typed twice by hand)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "gen_benchmarks.py"


def _gen() -> Any:
    spec = importlib.util.spec_from_file_location("gen_benchmarks_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_result_file_has_its_run_facts_on_the_page() -> None:
    gen = _gen()
    runs = gen.load_runs()
    files = sorted(p.name for p in (ROOT / "benchmarks" / "results").glob("*latest.json"))
    assert sorted(name for name, _ in runs) == files and files
    page = gen.page(runs)
    for name, run in runs:
        assert f"`benchmarks/results/{name}`" in page
        assert f"`{run['command'].strip()}`" in page
        assert str(run["started"])[:16].replace("T", " ") in page
        assert f"{run['machine']['cores']} cores" in page


def test_the_figures_are_the_files_own(tmp_path: Path) -> None:
    """A changed result file changes the page and the headline: copy the results, change one row's rates."""
    gen = _gen()
    results = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", results)
    live = json.loads((results / "jobs-live-latest.json").read_text())
    for run in live["jobs_live"]["runs"]["raw"]:
        run["rate"] = 12345.0
    (results / "jobs-live-latest.json").write_text(json.dumps(live))
    runs = gen.load_runs(results)
    assert "12,345" in gen.page(runs)
    assert "12,345 jobs/s" in gen.headline(runs)


def test_the_headline_command_prints_the_line_the_readme_quotes() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--headline"], check=False, capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert line == _gen().headline() and "\n" not in line
    assert line in (ROOT / "README.md").read_text(), f"README.md does not quote the benchmark headline: {line}"
