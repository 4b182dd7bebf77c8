"""The engine's boundary: the layers above import zkqueue.engine and zkqueue.transport only through
zkqueue.engine.api, as the import-linter contract in .importlinter says; the contract names every private module."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _contract() -> configparser.SectionProxy:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config["importlinter:contract:engine-api"]


def test_the_contract_forbids_every_private_engine_and_transport_module() -> None:
    forbidden = set(_contract()["forbidden_modules"].split())
    private = {f"zkqueue.{pkg}.{f.stem}" for pkg in ("engine", "transport")
               for f in (ROOT / "zkqueue" / pkg).glob("*.py") if f.name not in ("__init__.py", "api.py")}
    assert forbidden == private, (sorted(private - forbidden), sorted(forbidden - private))


def test_the_layers_above_import_the_engine_only_through_its_api() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint is not None, "import-linter is not installed: pip install -e '.[dev]' (make test does)"
    run = subprocess.run([lint, "--config", str(ROOT / ".importlinter"), "--no-cache"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "1 kept, 0 broken" in run.stdout
