"""The package layering ARCHITECTURE.md draws, checked on the imports in phantom/'s sources.

A module may import from its own package and from packages on lower layers, never from a
package on its own layer or above. Every import counts: at module level, inside a function,
and under `if TYPE_CHECKING:` (a type-only import is still a dependency a reader follows).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PHANTOM = Path(__file__).resolve().parents[1] / "phantom"

# Top to bottom. Each entry is one layer: the packages (first part of the module path under
# phantom/) on it. "phantom" is the root package itself (its version string).
LAYERS: list[set[str]] = [
    {"commands"},
    {"sweep"},
    {"launcher"},
    {"report"},
    {"adapters"},
    {"interception"},
    {"distributed"},
    {"sim"},
    {"host"},
    {"engine"},
    {"cost", "memory", "network"},
    {"hardware", "native", "errors", "config", "phantom"},
]
# The command-line front ends sit on top wherever they live: each parses arguments and calls
# into the layers below (phantom profile launches a run, phantom db rebuilds ops).
COMMANDS = {"phantom.cli", "phantom.sweep.cli", "phantom.report.cli", "phantom.cost.dbcli", "phantom.cost.profile.cli"}


def package_of(module: str) -> str:
    """The layering unit of a module name under phantom (`phantom.sim.streams` -> `sim`)."""
    if module in COMMANDS:
        return "commands"
    parts = [p for p in module.split(".") if p != "__init__"]
    return parts[1] if len(parts) > 1 else "phantom"


def layer_of(package: str) -> int:
    for depth, layer in enumerate(LAYERS):
        if package in layer:
            return depth
    raise KeyError(f"package {package!r} is on no layer: add it to LAYERS in {__file__}")


def module_name(path: Path) -> str:
    """`phantom/sim/streams.py` -> `phantom.sim.streams`; a package's own file keeps its
    `__init__` (`phantom.sim.__init__`), so that relative imports resolve as Python does."""
    return ".".join(path.relative_to(PHANTOM.parent).with_suffix("").parts)


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, module) for every import of a phantom module in `source`; relative imports are
    resolved against `module`. `from phantom import x` is an import of phantom.x, and
    `from phantom.x.y import z` one of phantom.x.y (z is in the same package either way)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                anchor = parts[: len(parts) - node.level]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{alias.name}" if base == "phantom" else base for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if name == "phantom" or name.startswith("phantom.")]
    return found


def violations(sources: dict[str, str]) -> list[str]:
    """Each import in `sources` (module name -> source text) that points at a package on the
    importer's own layer or above it."""
    found = []
    for module, source in sorted(sources.items()):
        own = package_of(module)
        for line, target in imported_modules(source, module):
            other = package_of(target)
            if other == own:
                continue
            if layer_of(other) <= layer_of(own):
                found.append(f"{module}:{line} imports {target} ({own} -> {other}, "
                             f"which is not on a lower layer)")
    return found


def phantom_sources() -> dict[str, str]:
    return {module_name(path): path.read_text() for path in PHANTOM.rglob("*.py")
            if "te_standin" not in path.parts and "assets" not in path.parts}


def test_every_package_is_on_a_layer():
    packages = {package_of(m) for m in phantom_sources()}
    for package in packages:
        layer_of(package)  # raises with the package's name


def test_imports_only_go_down_the_layers():
    assert violations(phantom_sources()) == []


def test_the_simulated_transformer_engine_only_uses_adapters_and_below():
    """The stand-in package under adapters/te_standin is imported as `transformer_engine`; it
    belongs to the adapters layer."""
    te = PHANTOM / "adapters" / "te_standin"
    sources = {"phantom.adapters.te_standin." + ".".join(p.relative_to(te).with_suffix("").parts): p.read_text()
               for p in te.rglob("*.py")}
    assert violations(sources) == []


@pytest.mark.parametrize("module, line", [
    ("phantom.engine.timeline", "from phantom.launcher import launch"),      # a layer far up
    ("phantom.cost.roofline", "from phantom.memory import CachingAllocator"),  # a sibling
    ("phantom.sim.streams", "import phantom.interception.cuda_api"),          # one layer up
    ("phantom.host.account", "if TYPE_CHECKING:\n    from phantom.sim import Simulation"),
    ("phantom.sim.storage", "def f():\n    from ..interception import mode"),  # relative, in a function
])
def test_an_edge_back_up_is_caught(module, line):
    sources = phantom_sources()
    sources[module] = sources[module] + "\n" + line + "\n"
    found = violations(sources)
    assert len(found) == 1 and found[0].startswith(module + ":")
