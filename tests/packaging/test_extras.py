"""The extras in setup.cfg and the one way optional packages are imported (zkqueue._extras.require)."""

from __future__ import annotations

import ast
import configparser
import pickle
from pathlib import Path

import pytest

from tests.parsing import parse_apart
from zkqueue._extras import EXTRA_OF, require
from zkqueue.errors import EnvironmentProblem, MissingExtraError

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "zkqueue"
USER_EXTRAS = ("cli", "dashboard", "metrics", "spark", "celery", "otel", "server")


def _extras() -> dict[str, set[str]]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    section = cfg["options.extras_require"]
    return {name: {line.strip() for line in section[name].splitlines() if line.strip()} for name in section}


def test_all_is_the_union_of_the_user_extras() -> None:
    extras = _extras()
    assert extras["all"] == set().union(*(extras[name] for name in USER_EXTRAS))


def test_each_optional_package_belongs_to_its_extra() -> None:
    extras = _extras()
    for module, extra in EXTRA_OF.items():
        if module == "werkzeug":
            continue  # flask's own dependency
        wanted = {"prometheus_client": "prometheus_client", "opentelemetry": "opentelemetry-api"}.get(module, module)
        assert any(req.lower().startswith(wanted) for req in extras[extra]), (module, extra)


def _optional_imports(tree: ast.AST) -> set[str]:
    """Top-level names of optional packages imported in ``tree``, leaving out ``if TYPE_CHECKING:`` blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.Import):
            found.update(a.name.partition(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found & set(EXTRA_OF)


def _guarded_extras(path: Path) -> set[str]:
    """The extras whose packages ``path`` or a package above it (its ``__init__``) requires."""
    texts = [path.read_text()]
    folder = path.parent
    while folder != PACKAGE.parent:
        init = folder / "__init__.py"
        if init.is_file():
            texts.append(init.read_text())
        folder = folder.parent
    return {extra for module, extra in EXTRA_OF.items() for text in texts if f'require("{module}' in text}


def test_every_optional_import_is_guarded_by_require() -> None:
    """A module that imports an optional package does so after ``require`` (its own or its package's), so a
    missing one is a MissingExtraError that names the extra, never a bare ModuleNotFoundError."""
    unguarded = []
    paths = [path for path in sorted(PACKAGE.rglob("*.py")) if path.name != "pytest_plugin.py"]  # (pytest loads it)
    trees = parse_apart([path.read_text() for path in paths])
    for path, tree in zip(paths, trees, strict=True):
        assert isinstance(tree, ast.Module), (path, tree)
        needed = {EXTRA_OF[name] for name in _optional_imports(tree)}
        missing = needed - _guarded_extras(path)
        if missing:
            unguarded.append(f"{path.relative_to(ROOT)}: {sorted(missing)}")
    assert unguarded == []


def test_a_missing_package_is_a_typed_error_naming_the_extra() -> None:
    with pytest.raises(MissingExtraError) as caught:
        require("zkqueue_no_such_package", extra="dashboard", what="the dashboard", hint="or look elsewhere")
    exc = caught.value
    assert isinstance(exc, ImportError) and isinstance(exc, EnvironmentProblem)
    assert (exc.package, exc.extra) == ("zkqueue_no_such_package", "dashboard")
    assert str(exc) == ("the dashboard needs zkqueue_no_such_package, which is not installed: "
                        "pip install 'zkqueue[dashboard]' (or look elsewhere)")
    assert str(pickle.loads(pickle.dumps(exc))) == str(exc)  # crosses process pools


def test_require_returns_the_module_and_refuses_a_package_that_is_no_extra() -> None:
    import flask

    assert require("flask") is flask
    with pytest.raises(ValueError, match="not an optional dependency"):
        require("zkqueue_no_such_package")
