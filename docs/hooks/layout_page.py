"""mkdocs hook: the Design section's "Package layout" page, made from the package itself (each module's docstring,
first sentence, read with ast without importing it), so it never misses a module."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

PACKAGE = Path(__file__).resolve().parents[2] / "zkqueue"


def _summary(path: Path) -> str:
    try:
        doc = ast.get_docstring(ast.parse(path.read_text()))
    except SyntaxError:
        return ""
    if not doc:
        return ""
    first = " ".join(doc.strip().split("\n\n")[0].split())
    cut = first.find(". ")
    return (first[:cut + 1] if cut != -1 else first).replace("|", "\\|")


def page(package: Path = PACKAGE) -> str:
    intro = ("Every module of the `zkqueue` package with the first sentence of its docstring, generated from the "
             "source each time the site is built. The layers above the engine import `zkqueue.engine` and "
             "`zkqueue.transport` only through `zkqueue.engine.api` (an import-linter contract, `.importlinter`). "
             "See [seams](seams.md).")
    lines = ["# Package layout", "", intro, ""]
    for folder in sorted([package, *[p for p in package.rglob("*") if p.is_dir() and (p / "__init__.py").exists()]]):
        if "__pycache__" in folder.parts:
            continue
        name = ".".join(folder.relative_to(package.parent).parts)
        lines += [f"## `{name}`", "", _summary(folder / "__init__.py"), "", "| module | what it does |", "|---|---|"]
        for module in sorted(folder.glob("*.py")):
            if module.name != "__init__.py":
                lines.append(f"| `{module.stem}` | {_summary(module)} |")
        lines.append("")
    return "\n".join(lines)


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "design/layout.md", content=page()))
    return files
