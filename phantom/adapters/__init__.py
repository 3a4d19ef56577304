"""Framework adapters: one module per framework, applied only when that framework is imported.

Each adapter patches the few places where a framework's code cannot tell a simulated tensor
from a real one, with a comment naming the framework code it works around and why. The
import hook below runs an adapter's `apply()` right after the module it targets finishes
importing, so a script that never imports the framework pays nothing.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import Callable

# module name -> (adapter module, function applied to the imported module)
ADAPTERS: dict[str, str] = {
    "transformers.utils.import_utils": "phantom.adapters.transformers:patch_import_utils",
    "transformers.masking_utils": "phantom.adapters.transformers:patch_masking_utils",
}


def _resolve(target: str) -> Callable[[ModuleType], None]:
    module_name, func_name = target.split(":")
    return getattr(importlib.import_module(module_name), func_name)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, patch: str) -> None:
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _resolve(self._patch)(module)


class _AdapterFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        patch = ADAPTERS.get(fullname)
        if patch is None:
            return None
        sys.meta_path.remove(self)  # find the real spec without recursing into ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


def install() -> None:
    for name, patch in ADAPTERS.items():  # already imported (e.g. by a sitecustomize)
        if name in sys.modules:
            _resolve(patch)(sys.modules[name])
    sys.meta_path.insert(0, _AdapterFinder())
