"""The package's import structure: no module imports one that imports it back (directly or
through others), and the layers import downwards only: the small shared modules (errors, files,
system, ...) nothing of the packages above them, the attention, data and model code nothing of
training, training nothing of the analysis, the analysis nothing of the studies, the studies
nothing of the report card or the reports. Every import counts, also one inside a function,
but a module's import of its own package (which Python initialises first)."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers.paths import REPO_ROOT

SOURCE = REPO_ROOT / "src"
# Rank of each part of the package: a module imports only parts of a rank not above its own.
LAYERS = {"attention": 1, "data": 1, "models": 2, "run_lock": 2, "run_folder_names": 2,
          "training": 3, "launch_check": 4, "analysis": 4, "studies": 5, "arena": 6,
          "reports": 6}
SHARED = 0  # the top-level modules not in LAYERS: errors, files, system, metrics, ...


def _modules() -> dict[str, Path]:
    found = {}
    for path in SOURCE.joinpath("linarena").rglob("*.py"):
        name = ".".join(path.relative_to(SOURCE).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's linarena imports, as the modules they name (a name inside a package that
    is not a module of its own stands for the package)."""
    def module_of(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets |= {f"{node.module}.{alias.name}" for alias in node.names}
        found = {module_of(target) for target in targets if target.split(".")[0] == "linarena"}
        # A module's own packages are not counted: Python runs a package's __init__ before
        # any of its modules, so a module reading its package (its __path__) closes no cycle.
        graph[name] = {module for module in found
                       if module != name and not name.startswith(f"{module}.")}
    return graph


def _rank(module: str) -> int:
    return LAYERS.get(module.split(".")[1], SHARED)


def test_no_module_imports_itself_through_others() -> None:
    graph = _imports(_modules())
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError(f"import cycle: {' -> '.join([*path[path.index(name):], name])}")
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_imports_go_down_the_layers() -> None:
    upwards = [f"{name} -> {target}" for name, targets in _imports(_modules()).items()
               for target in sorted(targets) if _rank(target) > _rank(name)]
    assert not upwards, f"imports from a lower layer to a higher one: {upwards}"
