"""Two versions of the attention code in one process: does a refactor change the numbers or the
speed? (scripts/maintainer/code_versions_benchmark.py runs it.)

An older revision's package is copied out of a git worktree under another top-level name
(`linarena` -> e.g. `linarena_before`, every absolute import and dotted name rewritten, its conf/
inside the copy with its `_target_`s rewritten too) and imported beside this checkout's
`linarena`. Each variant of conf/attention/ is built from both versions with the same seed, and
the weights are copied across (state_dict) when their names and shapes match. Both get the same
inputs and the same output gradient: their outputs and gradients (inputs' and parameters') are
compared, then their forward+backward calls are timed alternately, before, after, after, before,
..., so that both see the same drift of a shared machine; medians of each, and the ratio
after / before (> 1: the after code is slower).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import io
import math
import re
import shutil
import statistics
import subprocess
import sys
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from linarena.analysis.timing import elapsed

PACKAGE = "linarena"

COLUMNS = [
    "variant", "kind", "length", "before_commit", "after_commit", "before_ms", "after_ms",
    "ratio", "pair_ratio_q25", "pair_ratio_q75", "verdict", "repeats", "identical",
    "max_abs_diff_out", "max_abs_diff_grad", "weights", "batch", "heads", "head_dim", "causal",
    "dtype", "device", "threads", "omp_wait_policy", "cpu",
]


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


# -- one variant, built by both --------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Shape:
    """The attention benchmark's shapes: q, k, v (batch, heads, length, head_dim); a whole
    layer's x (batch, length, heads * head_dim)."""

    batch: int
    heads: int
    head_dim: int
    causal: bool

    @property
    def d_model(self) -> int:
        return self.heads * self.head_dim


def variant_names(version: Version) -> list[str]:
    return version.module("attention.variants").variant_names(version.conf_dir)


def is_layer(version: Version, module: nn.Module) -> bool:
    return isinstance(module, version.module("attention.layers").AttentionLayer)


def build(version: Version, name: str, shape: Shape, max_length: int, seed: int) -> nn.Module:
    """`attention=<name>` of `version` as a model builds it (cores get head_dim; a layer sizes
    itself), its weights drawn after torch.manual_seed(seed)."""
    variants = version.module("attention.variants")
    model = {"max_length": max_length, "d_model": shape.d_model, "num_heads": shape.heads}
    factory = variants.load_variant(name, model, version.conf_dir)
    torch.manual_seed(seed)
    build_attention = version.module("attention.layers").build_attention
    return build_attention(factory, shape.head_dim, causal=shape.causal).train()


def share_weights(source: nn.Module, target: nn.Module) -> str:
    """Give `target` the weights of `source` (load_state_dict) when both have the same entries
    of the same shapes; says what was done: "none" (no weights), "same from the seed" (already
    equal), "copied", or why they could not be ("seed only: ...")."""
    a, b = source.state_dict(), target.state_dict()
    if a.keys() != b.keys():
        only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
        return f"seed only: names differ (after only {only_a}; before only {only_b})"
    shapes = [key for key in a if isinstance(a[key], torch.Tensor)
              and (not isinstance(b[key], torch.Tensor) or a[key].shape != b[key].shape)]
    if shapes:
        return f"seed only: shapes differ ({shapes})"
    if not a:
        return "none"
    same = all(torch.equal(a[key], b[key]) if isinstance(a[key], torch.Tensor)
               else a[key] == b[key] for key in a)
    target.load_state_dict(a)
    return "same from the seed" if same else "copied"


@dataclasses.dataclass
class Case:
    """One version's module at one length: its inputs (leaves whose gradients are compared),
    the keyword inputs it reads without gradient (a gated core's token), the output gradient."""

    module: nn.Module
    inputs: dict[str, torch.Tensor]
    keywords: dict[str, torch.Tensor]
    grad_out: torch.Tensor | None = None

    def forward_backward(self) -> torch.Tensor:
        """One forward+backward (the inputs' gradients set to None first, as zero_grad does;
        the parameters' accumulate, as in the attention benchmark); returns the output."""
        for tensor in self.inputs.values():
            tensor.grad = None
        out = self.module(*self.inputs.values(), **self.keywords)
        if self.grad_out is None:  # the first call: the output's shape is known now
            generator = torch.Generator().manual_seed(1)
            self.grad_out = torch.randn(out.shape, generator=generator, dtype=out.dtype)
        out.backward(self.grad_out)
        return out

    def gradients(self) -> dict[str, torch.Tensor]:
        grads = {f"input {key}": tensor.grad for key, tensor in self.inputs.items()}
        grads |= {f"weight {key}": param.grad for key, param in self.module.named_parameters()}
        return {key: grad for key, grad in grads.items() if grad is not None}


def make_cases(modules: tuple[nn.Module, nn.Module], layer: bool, shape: Shape, length: int,
               seed: int) -> tuple[Case, Case]:
    """The same random inputs (own copies) for both modules: q, k, v for a core (and the token
    x for one that reads it, without gradient, as the attention benchmark gives it), x for a
    whole layer."""
    generator = torch.Generator().manual_seed(seed + length)
    x = torch.randn(shape.batch, length, shape.d_model, generator=generator)
    if layer:
        named, token = {"x": x}, {}
    else:
        size = (shape.batch, shape.heads, length, shape.head_dim)
        named = {key: torch.randn(size, generator=generator) for key in "qkv"}
        token = {"x": x} if getattr(modules[1], "reads_token", False) else {}

    def case(module: nn.Module) -> Case:
        inputs = {key: tensor.clone().requires_grad_() for key, tensor in named.items()}
        return Case(module, inputs, {key: t.clone() for key, t in token.items()})

    return case(modules[0]), case(modules[1])


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest |a - b| (inf for another shape; NaN in one place only counts as inf)."""
    if a.shape != b.shape:
        return math.inf
    if a.numel() == 0:
        return 0.0
    a, b = a.detach().double(), b.detach().double()
    both_nan = a.isnan() & b.isnan()
    diff = (a - b).abs().masked_fill(both_nan, 0.0).nan_to_num(nan=math.inf)
    return diff.max().item()


def compare_calls(before: Case, after: Case) -> dict:
    """The first forward+backward of each (same weights, same inputs): identical (outputs and
    every gradient bit for bit), max_abs_diff_out, max_abs_diff_grad (over the inputs' and the
    weights' gradients; inf when one has a gradient the other has not). The weights'
    gradients are cleared first: they hold this call's alone."""
    for case in (before, after):
        case.module.zero_grad(set_to_none=True)
    out_b, out_a = before.forward_backward(), after.forward_backward()
    grads_b, grads_a = before.gradients(), after.gradients()
    diff_out = max_abs_diff(out_b, out_a)
    if grads_b.keys() != grads_a.keys():
        diff_grad = math.inf
    else:
        diff_grad = max((max_abs_diff(grads_b[key], grads_a[key]) for key in grads_a),
                        default=0.0)
    identical = (torch.equal(out_b, out_a) and grads_b.keys() == grads_a.keys()
                 and all(torch.equal(grads_b[key], grads_a[key]) for key in grads_a))
    return {"identical": identical, "max_abs_diff_out": diff_out, "max_abs_diff_grad": diff_grad}


# -- timing ------------------------------------------------------------------------------------

ORDER = "BAAB"  # before, after, after, before: a drift over a round favours neither


def alternate_times(before: Callable[[], object], after: Callable[[], object], repeats: int,
                    device: torch.device | str = "cpu") -> tuple[list[float], list[float]]:
    """Seconds of `repeats` calls of each, in the order before, after, after, before, before,
    after, ...: (before's, after's), in call order."""
    times: dict[str, list[float]] = {"B": [], "A": []}
    for index in range(2 * repeats):
        label = ORDER[index % len(ORDER)]
        times[label].append(elapsed(before if label == "B" else after, device))
    return times["B"], times["A"]


def pair_ratios(before_s: list[float], after_s: list[float]) -> list[float]:
    """after / before of the calls made next to each other (the i-th of each)."""
    return [a / b for b, a in zip(before_s, after_s, strict=True)]


def quantile(values: list[float], q: float) -> float:
    """The q-quantile, linear between order statistics (as numpy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def timing_fields(before_s: list[float], after_s: list[float], tolerance: float) -> dict:
    """before_ms, after_ms (medians), ratio (after / before of the medians), the quartiles of
    the pair ratios, and the verdict: "within noise" when |ratio - 1| <= tolerance or the pair
    ratios' interquartile range holds 1, else "slower" or "faster"."""
    before_ms = 1e3 * statistics.median(before_s)
    after_ms = 1e3 * statistics.median(after_s)
    ratio = after_ms / before_ms
    pairs = pair_ratios(before_s, after_s)
    q25, q75 = quantile(pairs, 0.25), quantile(pairs, 0.75)
    if abs(ratio - 1) <= tolerance or q25 <= 1 <= q75:
        verdict = "within noise"
    else:
        verdict = "slower" if ratio > 1 else "faster"
    return {"before_ms": before_ms, "after_ms": after_ms, "ratio": ratio,
            "pair_ratio_q25": q25, "pair_ratio_q75": q75, "verdict": verdict,
            "repeats": len(before_s)}


def repeats_for(call_s: float, repeats: int, min_seconds: float, max_repeats: int) -> int:
    """At least `repeats` timed calls per version, more (up to `max_repeats`) for a short call,
    so that the timed calls of both versions last at least `min_seconds`."""
    wanted = math.ceil(min_seconds / (2 * max(call_s, 1e-9)))
    return max(repeats, min(wanted, max_repeats))


# -- the table ---------------------------------------------------------------------------------

def ratio_table(rows: list[dict]) -> str:
    """One line per variant: after/before at each length (the verdict's mark: + slower,
    - faster, blank within noise; "skipped" for a length not measured), and whether outputs and
    gradients were identical (else the largest difference)."""
    lengths = sorted({row["length"] for row in rows})
    variants = list(dict.fromkeys(row["variant"] for row in rows))
    by = {(row["variant"], row["length"]): row for row in rows}
    marks = {"slower": "+", "faster": "-", "within noise": " "}
    width = max([len("variant"), *map(len, variants)])
    head = f"{'variant':<{width}} " + " ".join(f"{f'N={n}':>9}" for n in lengths)
    lines = [head + "  numerics (after vs before)"]
    for name in variants:
        cells, numerics = [], []
        for n in lengths:
            row = by.get((name, n))
            if row is None or str(row["verdict"]).startswith("skipped"):
                cells.append(f"{'' if row is None else 'skipped':>9}")
                continue
            cells.append(f"{row['ratio']:>8.3f}{marks.get(row['verdict'], '?')}")
            if not row["identical"]:
                numerics.append(f"N={n}: out {row['max_abs_diff_out']:.2g}, "
                                f"grad {row['max_abs_diff_grad']:.2g}")
        lines.append(f"{name:<{width}} " + " ".join(cells) + "  "
                     + ("; ".join(numerics) if numerics else "identical"))
    lines.append("ratio = median after / median before (fwd+bwd); + slower, - faster "
                 "beyond noise")
    return "\n".join(lines)


def median_ratios(rows: list[dict], length: int) -> dict[str, float]:
    """variant -> ratio at `length` (variants measured there only)."""
    return {row["variant"]: row["ratio"] for row in rows
            if row["length"] == length and not math.isnan(row["ratio"])}
