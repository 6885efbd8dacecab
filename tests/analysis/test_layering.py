"""One direction between the result packages: analysis is the lowest layer, studies builds on it,
reports builds on both. Every module of src/linarena/analysis/ is parsed (not imported) and
must not import linarena.studies or linarena.reports; no module of src/linarena/studies/ may
import linarena.reports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "linarena"
# package -> the packages above it, which it must not import
ABOVE = {"analysis": ("linarena.studies", "linarena.reports"),
         "studies": ("linarena.reports",)}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the module at `path`: import x.y, from
    x.y import z (as x.y and x.y.z), relative imports resolved against its package, and
    importlib.import_module("x.y") with a literal name."""
    package = ["linarena", *path.relative_to(PACKAGE).parent.parts]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def violations(package: str) -> list[str]:
    """'<file>:<line> imports <module>' for each import of a package above `package`."""
    banned = ABOVE[package]
    found = {}  # one line per import statement
    for path in sorted((PACKAGE / package).rglob("*.py")):
        for line, module in imported_modules(path):
            if any(module == name or module.startswith(f"{name}.") for name in banned):
                found.setdefault((path, line), module)
    return [f"{path.relative_to(PACKAGE.parent.parent)}:{line} imports {module}"
            for (path, line), module in found.items()]


@pytest.mark.parametrize("package", sorted(ABOVE))
def test_a_package_imports_nothing_above_it(package: str) -> None:
    assert (PACKAGE / package / "__init__.py").is_file()
    found = violations(package)
    assert not found, (f"{package} is below {', '.join(ABOVE[package])}: move what needs them "
                       "up (to studies/ or reports/), or what they share down to analysis/:\n"
                       + "\n".join(found))


def test_every_kind_of_import_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: absolute, from-, relative and importlib imports of studies are found."""
    fake = tmp_path / "src" / "linarena"
    (fake / "analysis" / "sub").mkdir(parents=True)
    (fake / "analysis" / "__init__.py").touch()
    (fake / "analysis" / "a.py").write_text("import linarena.studies.runs\n")
    (fake / "analysis" / "b.py").write_text("from linarena import studies\n")
    (fake / "analysis" / "c.py").write_text("from ..studies.preset import load_grid\n")
    (fake / "analysis" / "sub" / "d.py").write_text("from ... import reports\n")
    (fake / "analysis" / "e.py").write_text(
        "import importlib\nimportlib.import_module('linarena.studies.mixture')\n")
    (fake / "analysis" / "ok.py").write_text(
        "from linarena.analysis import runs\nfrom . import order\nimport statistics\n")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    found = violations("analysis")
    assert [line.split(":")[0].rsplit("/", 1)[-1] for line in found] == \
        ["a.py", "b.py", "c.py", "e.py", "d.py"]
