"""mkdocs hook: adds the generated Benchmarks page (``docs/gen_benchmarks.py``) and its charts to the site, so the
page is always the committed result files' figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

_SCRIPT = Path(__file__).resolve().parents[1] / "gen_benchmarks.py"


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("zkqueue_docs_gen_benchmarks", _SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_files(files: Files, config: Any) -> Files:
    gen = _generator()
    files.append(File.generated(config, "benchmarks.md", content=gen.page()))
    for uri, data in gen.charts().items():
        files.append(File.generated(config, uri, content=data))
    return files
