"""Every ```python block of the documentation and of README.md runs, as written, against a real ZooKeeper (one
embedded server shared by all examples, a fresh chroot per page), unless a marker says it is a fragment: see
``doc_examples.py`` for the markers and docs/contributing.md for writers.

An example that needs a worker runs one itself (``with jq.work(...)``, ``with TaskWorker(app)``), so whatever it
waits for really happens. An example must close what it starts: one that leaves a non-daemon thread running fails.
"""

from __future__ import annotations

import ast
import importlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from doc_examples import ROOT, Block, all_blocks, chain, files_of, runnable

from tests.parsing import parse_apart
from zkqueue.server.testing import fresh_chroot

BLOCKS = all_blocks()
RUNNABLE = runnable(BLOCKS)

#: page -> (chroot connect string, scratch folder); namespaces of the last block run per page.
_PAGES: dict[str, tuple[str, Path]] = {}
_LAST: dict[str, tuple[Block, dict[str, Any]]] = {}


def _page(source: str, connect_string: str, tmp_root: Path) -> tuple[str, Path]:
    if source not in _PAGES:
        folder = tmp_root / source.replace("/", "__")
        folder.mkdir(parents=True)
        for name, code in files_of(BLOCKS, source).items():
            (folder / name).write_text(code)
        _PAGES[source] = (fresh_chroot(connect_string), folder)
    return _PAGES[source]


def _execute(block: Block, namespace: dict[str, Any]) -> None:
    # padded to the block's place in its page, so a traceback names the page's own line
    code = compile("\n" * block.line + block.code, str(ROOT / block.source), "exec")
    exec(code, namespace)  # noqa: S102 - running the documentation's examples is the point


def _forget_modules(folder: Path) -> None:
    """Drop the page's own modules (tasks.py...) so another page's module of the same name is imported afresh."""
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None) or ""
        if origin.startswith(str(folder)):
            del sys.modules[name]


@pytest.fixture(scope="module")
def examples_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("doc-examples")


def test_every_python_block_is_collected_or_marked() -> None:
    """The collector sees the documentation's blocks at all (a broken fence or marker parse would hide them)."""
    pages = {b.source for b in BLOCKS}
    assert "docs/getting-started/first-task.md" in pages, sorted(pages)
    assert len(RUNNABLE) >= 20, len(RUNNABLE)
    for block in BLOCKS:
        if block.kind == "file":
            assert block.arg.endswith(".py") and "/" not in block.arg, f"{block.id}: bad file name {block.arg!r}"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_example_runs(block: Block, zk_server: Any, examples_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts, folder = _page(block.source, zk_server.connect_string, examples_root)
    monkeypatch.setenv("ZKQUEUE_CONNECT", hosts)
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    before = set(threading.enumerate())
    steps = chain(BLOCKS, block)
    last = _LAST.get(block.source)
    if block.kind == "continue" and last is not None and len(steps) > 1 and last[0] == steps[-2]:
        namespace, todo = last[1], [block]
    else:  # a chain's first block, or run alone (-k): run what it continues first
        namespace, todo = {"__name__": "__main__"}, steps
    try:
        for step in todo:
            _execute(step, namespace)
            _LAST[block.source] = (step, namespace)
    finally:
        _forget_modules(folder)
    page = [b for b in RUNNABLE if b.source == block.source]
    following = page[page.index(block) + 1] if block is not page[-1] else None
    if following is not None and following.kind == "continue":
        return  # the next block goes on with what this one opened
    deadline = time.monotonic() + 10
    left = [t for t in set(threading.enumerate()) - before if not t.daemon and t.is_alive()]
    for t in left:
        t.join(max(0.0, deadline - time.monotonic()))
    left = [t.name for t in left if t.is_alive()]
    assert not left, f"{block.id} leaves threads running ({left}): close what the example starts"
    assert os.environ["ZKQUEUE_CONNECT"] == hosts  # the example did not repoint the others


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _resolves(dotted: str) -> bool:
    """``zkqueue.a.b.C``: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_every_zkqueue_name_an_example_shows_exists() -> None:
    """Fragments included: every ``from zkqueue... import name``, ``import zkqueue...`` and ``zkqueue.x.y`` in a
    python block of the docs or the README names something that exists."""
    missing: list[str] = []
    for block, tree in zip(BLOCKS, parse_apart([block.code for block in BLOCKS]), strict=True):
        if isinstance(tree, SyntaxError):
            missing.append(f"{block.id}: not Python ({tree.msg})")
            continue
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "zkqueue":
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names if alias.name.split(".")[0] == "zkqueue"]
            elif isinstance(node, ast.Attribute) and not isinstance(getattr(node, "ctx", None), ast.Store):
                dotted = _dotted(node)
                if dotted and dotted.split(".")[0] == "zkqueue":
                    names = [dotted]
            missing += [f"{block.id}: {name}" for name in names if not _resolves(name)]
    assert not missing, "\n".join(missing)
