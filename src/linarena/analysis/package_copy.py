"""Copying one revision of the linarena package under another name, so that two versions of
the code can be imported side by side in one process.

A revision's src/linarena is checked out into a temporary git worktree and copied under a new
top-level name (`linarena` -> e.g. `linarena_before`): every import of the package and every
dotted name `linarena.x` in its strings is rewritten, and its conf/ goes inside the copy with the
`_target_`s rewritten too. The copy is checked for anything that would still reach the original
package: its source parsed before it is imported, its loaded modules afterwards. A Version is one
imported package (the copy or this checkout's own), its conf/ and its commit.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import io
import re
import shutil
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

PACKAGE = "linarena"


# -- copying a package under another name --------------------------------------------------

def dotted_pattern(old: str) -> re.Pattern:
    """`old.x` as a dotted name: not part of a longer name (`my_old.x`, `a.old.x`)."""
    return re.compile(rf"(?<![\w.]){re.escape(old)}(?=\.[A-Za-z_])")


def rename_config(text: str, old: str, new: str) -> str:
    """A config's `_target_: old.x` (any dotted name `old.x`) renamed `new.x`."""
    return dotted_pattern(old).sub(new, text)


def rename_imports(text: str, old: str, new: str) -> str:
    """A module's source with package `old` renamed `new`: every identifier `old` (so every
    import of it, `import old.x` binding `new`, and every use of the name) and every dotted name
    `old.x` inside a string (import_module's and hydra's `_target_`s, docstrings). An attribute
    `.old`, a string that is `old` alone, a longer name (`old_thing`) and comments are left."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    strings = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) in characters
    previous = None
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        start = offsets[token.start[0] - 1] + token.start[1]
        end = offsets[token.end[0] - 1] + token.end[1]
        if (token.type == tokenize.NAME and token.string == old
                and not (previous is not None and previous.string == ".")):
            edits.append((start, end, new))
        elif token.type in strings:
            source = text[start:end]
            renamed = dotted_pattern(old).sub(new, source)
            if renamed != source:
                edits.append((start, end, renamed))
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def foreign_imports(package_dir: Path, old: str) -> list[str]:
    """'<file>:<line> <what>' for everything in the package at `package_dir` that would still
    reach package `old`: an import of it (statement, or import_module / __import__ of a literal
    name), a string naming one of its modules (`old.x`: what import_module and hydra's
    `_target_` read) and a bare name `old`; in its .yaml files, a dotted `old.x`. Parsed, not
    imported."""
    found = []

    def names_old(name: object) -> bool:
        return isinstance(name, str) and (name == old or name.startswith(f"{old}."))

    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            what = None
            if isinstance(node, ast.Import):
                hits = [alias.name for alias in node.names if names_old(alias.name)]
                what = f"import {', '.join(hits)}" if hits else None
            elif isinstance(node, ast.ImportFrom) and not node.level and names_old(node.module):
                what = f"from {node.module} import ..."
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and re.fullmatch(rf"{re.escape(old)}(\.\w+)+", node.value)):
                what = f"the string {node.value!r}"
            elif isinstance(node, ast.Name) and node.id == old:
                what = f"the name {old}"
            elif (isinstance(node, ast.Call) and node.args
                  and isinstance(node.args[0], ast.Constant) and names_old(node.args[0].value)
                  and getattr(node.func, "attr", getattr(node.func, "id", None))
                  in ("import_module", "__import__")):
                what = f"import_module({node.args[0].value!r})"
            if what:
                found.append(f"{path.relative_to(package_dir.parent)}:{node.lineno} {what}")
    for path in sorted([*package_dir.rglob("*.yaml"), *package_dir.rglob("*.yml")]):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if dotted_pattern(old).search(line):
                found.append(f"{path.relative_to(package_dir.parent)}:{number} {line.strip()}")
    return found


def copy_renamed(package_dir: Path, dest_root: Path, new: str, conf_dir: Path | None = None,
                 old: str = PACKAGE) -> Path:
    """Copy the package at `package_dir` (named `old`) to `dest_root`/`new`, renamed
    (rename_imports in every .py, rename_config in every .yaml); `conf_dir`, if given, goes to
    `new`/conf, where the package looks for its configs first (attention.variants.
    find_conf_dir). Returns the copy; a ValueError lists what of it would still import `old`
    (foreign_imports)."""
    dest = dest_root / new
    if dest.exists():
        raise FileExistsError(f"{dest} exists: copy into an empty folder")
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "conf")
    shutil.copytree(package_dir, dest, ignore=skip)
    if conf_dir is not None:
        shutil.copytree(conf_dir, dest / "conf", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [*dest.rglob("*.py"), *dest.rglob("*.yaml"), *dest.rglob("*.yml")]:
        text = path.read_text(encoding="utf-8")
        rename = rename_imports if path.suffix == ".py" else rename_config
        renamed = rename(text, old, new)
        if renamed != text:
            path.write_text(renamed, encoding="utf-8")
    left = foreign_imports(dest, old)
    if left:
        raise ValueError(f"the copy {dest} still reaches {old}:\n" + "\n".join(left))
    return dest


def import_copy(dest_root: Path, new: str) -> ModuleType:
    """Import the package `new` from `dest_root` (put first on sys.path)."""
    if new in sys.modules:
        raise RuntimeError(f"a package {new} is already imported (from "
                           f"{getattr(sys.modules[new], '__file__', '?')}); choose another name")
    sys.path.insert(0, str(dest_root))
    importlib.invalidate_caches()
    package = importlib.import_module(new)
    where = Path(package.__file__).resolve().parent
    if where != (dest_root / new).resolve():
        raise RuntimeError(f"{new} was imported from {where}, not from the copy in {dest_root}")
    return package


def leaked_references(new: str, old: str = PACKAGE) -> list[str]:
    """What the imported modules of package `new` hold of package `old`: a module of `new`
    loaded from outside its folder, or a global that is a module, class or function of `old`.
    Run after building what is compared, since modules are imported as they are needed."""
    root = sys.modules[new]
    folder = Path(root.__file__).resolve().parent
    found = []
    for name, module in sorted(sys.modules.items()):
        if not (name == new or name.startswith(f"{new}.")) or module is None:
            continue
        file = getattr(module, "__file__", None)
        if file is not None and not Path(file).resolve().is_relative_to(folder):
            found.append(f"{name} was loaded from {file}")
        for attribute, value in list(vars(module).items()):
            try:
                owner = value.__name__ if isinstance(value, ModuleType) else \
                    getattr(value, "__module__", None)
            except Exception:  # an object whose attributes cannot be read: not ours
                continue
            if isinstance(owner, str) and (owner == old or owner.startswith(f"{old}.")):
                found.append(f"{name}.{attribute} is from {owner}")
    return found


# -- the two versions -----------------------------------------------------------------------

def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


@dataclasses.dataclass(frozen=True)
class Version:
    """One version of the code, imported: its package (`linarena` or a renamed copy), where its
    conf/ is, and the commit it is (short hash, `-dirty` for a checkout with changes)."""

    package: ModuleType
    conf_dir: Path
    commit: str

    def module(self, name: str) -> ModuleType:
        """The package's submodule `name` ("attention.variants"), imported."""
        return importlib.import_module(f"{self.package.__name__}.{name}")


@contextlib.contextmanager
def worktree(repo: Path, revision: str, folder: Path) -> Iterator[Path]:
    """A detached git worktree of `revision` at `folder`, removed afterwards."""
    git(repo, "worktree", "add", "--detach", str(folder), revision)
    try:
        yield folder
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=repo,
                       capture_output=True)
        subprocess.run(["git", "worktree", "prune"], cwd=repo, capture_output=True)


def load_revision(repo: Path, revision: str, new: str, scratch: Path) -> Version:
    """`revision`'s src/linarena and conf/, copied out of a worktree as package `new` under
    `scratch` and imported (the worktree is removed once copied)."""
    commit = git(repo, "rev-parse", "--short=10", f"{revision}^{{commit}}")
    with worktree(repo, commit, scratch / f"worktree-{new}") as tree:
        copy_renamed(tree / "src" / PACKAGE, scratch / "packages", new, tree / "conf")
    package = import_copy(scratch / "packages", new)
    return Version(package, Path(package.__file__).parent / "conf", commit)


def load_checkout(repo: Path) -> Version:
    """This checkout's own `linarena` (refused if it is imported from elsewhere), its commit
    with `-dirty` when src/linarena or conf/ differ from it."""
    import linarena

    where = Path(linarena.__file__).resolve().parent
    if where != (repo / "src" / PACKAGE).resolve():
        raise RuntimeError(f"linarena is imported from {where}, not from the checkout {repo}: "
                           "run with PYTHONPATH=src")
    commit = git(repo, "rev-parse", "--short=10", "HEAD")
    dirty = git(repo, "status", "--porcelain", "--untracked-files=no", "--", f"src/{PACKAGE}",
                "conf")
    return Version(linarena, repo / "conf", commit + ("-dirty" if dirty else ""))
