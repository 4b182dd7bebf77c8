"""Import paths from before the package was split into layers (``zkqueue.queue``, ``zkqueue.protocol``, ...).

Each old path is an alias of the module that now holds the code: ``import zkqueue.queue`` gives the very module
object ``zkqueue.engine.queue``, so ``isinstance`` checks, pickling and monkeypatching behave as before. The
aliases are resolved by a meta path finder installed by ``zkqueue/__init__.py``; no shim files clutter the
package. New code should import from the layered paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

#: old module path -> the module that holds its code now
MOVED: dict[str, str] = {
    "zkqueue.framing": "zkqueue.formats.framing",
    "zkqueue.naming": "zkqueue.formats.naming",
    "zkqueue.serializers": "zkqueue.formats.serializers",
    "zkqueue.protocol": "zkqueue.transport.protocol",
    "zkqueue.handler": "zkqueue.transport.handler",
    "zkqueue.security": "zkqueue.transport.security",
    "zkqueue.children": "zkqueue.engine.children",
    "zkqueue.queue": "zkqueue.engine.queue",
    "zkqueue.priority": "zkqueue.recipes.priority",
    "zkqueue.delay": "zkqueue.recipes.delay",
    "zkqueue.ids": "zkqueue.recipes.ids",
    "zkqueue.simple": "zkqueue.recipes.simple",
    "zkqueue.sharder": "zkqueue.recipes.sharder",
    "zkqueue.blocking": "zkqueue.recipes.blocking",
    "zkqueue.embedded": "zkqueue.server.embedded",
    "zkqueue.jars": "zkqueue.server.jars",
    "zkqueue.check_java": "zkqueue.server.check_java",
    "zkqueue.testing": "zkqueue.server.testing",
    "zkqueue.testing_proxy": "zkqueue.server.testing_proxy",
    "zkqueue.pytest_plugin": "zkqueue.server.pytest_plugin",
    "zkqueue.cli": "zkqueue.ops.cli",
    "zkqueue.inspect": "zkqueue.ops.inspect",
    "zkqueue.demo": "zkqueue.ops.demo",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old module path to the module object at its new path."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=new)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__  # importlib overwrites __spec__ next; exec_module puts it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        alias_spec = module.__spec__
        if alias_spec is not None and alias_spec.loader_state is not None:
            module.__spec__ = alias_spec.loader_state


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
