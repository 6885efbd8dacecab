"""linarena.analysis.package_copy, linarena.analysis.versions_benchmark and
scripts/maintainer/code_versions_benchmark.py: an older revision's package copied under another
name and imported beside this one, both versions' attentions compared (numbers, then time,
alternately)."""

from __future__ import annotations

import importlib
import itertools
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers.paths import load_script
from torch import nn

from linarena.analysis.package_copy import (
    copy_renamed,
    foreign_imports,
    import_copy,
    leaked_references,
    rename_config,
    rename_imports,
)
from linarena.analysis.versions_benchmark import (
    COLUMNS,
    Case,
    alternate_times,
    compare_calls,
    median_ratios,
    quantile,
    ratio_table,
    repeats_for,
    share_weights,
    timing_fields,
)

_NAMES = itertools.count()


@pytest.fixture
def fresh_name() -> Iterator[str]:
    """A package name not imported yet, removed from sys.modules and sys.path afterwards."""
    name = f"fake_versions_pkg_{next(_NAMES)}"
    path = list(sys.path)
    yield name
    sys.path[:] = path
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


def fake_package(root: Path, name: str = "linarena") -> Path:
    """A package `name` (default: named as the real one) importing itself every way there is."""
    package = root / name
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""A fake linarena."""\n')
    (package / "values.py").write_text("VALUE = 3\n")
    (package / "sub" / "__init__.py").write_text("from ..values import VALUE as RELATIVE\n")
    (package / "user.py").write_text(
        "import importlib\n"
        f"import {name}\n"
        f"import {name}.values\n"
        f"from {name} import values as named\n"
        f"from {name}.values import VALUE\n"
        f"from {name}.sub import RELATIVE\n"
        f"target = '{name}.values.VALUE'\n"
        f"loaded = importlib.import_module('{name}.values')\n"
        f"total = VALUE + named.VALUE + {name}.values.VALUE + RELATIVE + loaded.VALUE\n"
        f"file = {name}.__file__\n"
        f"others = ('{name}_thing', 'x.{name}.y', '{name}s')\n")
    conf = root / "conf" / "attention"
    conf.mkdir(parents=True)
    (conf / "v.yaml").write_text(f"attention:\n  _target_: {name}.values.VALUE\n")
    return package


def test_renaming_rewrites_every_import_and_dotted_name_and_nothing_else() -> None:
    text = ("import linarena\nimport linarena.a.b as c\nfrom linarena import a\n"
            "def f():\n    from linarena.a import b\n    return linarena, linarena.__file__\n"
            "t = ('linarena.attention.X', f'{t}: linarena.a')  # see linarena.attention\n"
            '"""Docs of linarena.models.\n\nand linarena.a"""\n'
            "keep = ('linarena_before', 'my.linarena.x', 'linarena', 'linarenas.x', x.linarena)\n")
    assert rename_imports(text, "linarena", "linarena_old") == (
        "import linarena_old\nimport linarena_old.a.b as c\nfrom linarena_old import a\n"
        "def f():\n    from linarena_old.a import b\n"
        "    return linarena_old, linarena_old.__file__\n"
        "t = ('linarena_old.attention.X', f'{t}: linarena_old.a')  # see linarena.attention\n"
        '"""Docs of linarena_old.models.\n\nand linarena_old.a"""\n'
        "keep = ('linarena_before', 'my.linarena.x', 'linarena', 'linarenas.x', x.linarena)\n")
    assert rename_config("_target_: linarena.a.B  # linarena\n", "linarena", "new") == \
        "_target_: new.a.B  # linarena\n"


def test_a_package_is_copied_renamed_and_imported_beside_the_real_one(
        tmp_path: Path, fresh_name: str) -> None:
    source = fake_package(tmp_path / "source")
    assert len(foreign_imports(source, "linarena")) >= 6  # the original reaches linarena
    copy = copy_renamed(source, tmp_path / "packages", fresh_name, tmp_path / "source" / "conf")
    assert foreign_imports(copy, "linarena") == []
    assert (copy / "conf" / "attention" / "v.yaml").read_text() == \
        f"attention:\n  _target_: {fresh_name}.values.VALUE\n"
    package = import_copy(tmp_path / "packages", fresh_name)
    user = importlib.import_module(f"{fresh_name}.user")
    assert (user.total, user.target) == (15, f"{fresh_name}.values.VALUE")
    assert Path(user.file).parent == copy and Path(package.__file__).parent == copy
    assert user.others == ("linarena_thing", "x.linarena.y", "linarenas")
    assert leaked_references(fresh_name) == []
    import linarena  # the real one is untouched
    assert Path(linarena.__file__).parent != copy


def test_a_copy_that_uses_the_current_package_is_found(tmp_path: Path, fresh_name: str) -> None:
    package = tmp_path / fresh_name
    package.mkdir()
    (package / "__init__.py").write_text(
        "from linarena.analysis.timing import elapsed\nimport linarena.analysis\n")
    assert len(foreign_imports(package, "linarena")) == 2
    import_copy(tmp_path, fresh_name)
    leaks = leaked_references(fresh_name)
    assert f"{fresh_name}.elapsed is from linarena.analysis.timing" in leaks
    assert f"{fresh_name}.linarena is from linarena" in leaks
    with pytest.raises(RuntimeError, match="already imported"):
        import_copy(tmp_path, fresh_name)


def test_a_copy_that_would_still_import_the_original_is_refused(tmp_path: Path) -> None:
    source = fake_package(tmp_path / "source")
    # A module named by a string without a dot is not renamed (it may be a label).
    (source / "odd.py").write_text("import importlib\nimportlib.import_module('linarena')\n")
    with pytest.raises(ValueError, match=r"odd\.py:2 import_module\('linarena'\)"):
        copy_renamed(source, tmp_path / "packages", "never_imported")


def test_calls_alternate_before_after_after_before() -> None:
    calls = []
    before_s, after_s = alternate_times(lambda: calls.append("B"), lambda: calls.append("A"), 3)
    assert "".join(calls) == "BAABBA" and len(before_s) == len(after_s) == 3


def test_ratio_fields_and_verdicts() -> None:
    fields = timing_fields([1.0, 1.2, 1.0, 1.1], [1.5, 1.5, 1.6, 1.4], tolerance=0.05)
    assert fields["before_ms"] == pytest.approx(1050) and fields["after_ms"] == pytest.approx(1500)
    assert fields["ratio"] == pytest.approx(1500 / 1050) and fields["verdict"] == "slower"
    assert fields["repeats"] == 4
    pairs = [1.5, 1.5 / 1.2, 1.6, 1.4 / 1.1]
    assert fields["pair_ratio_q25"] == pytest.approx(quantile(pairs, 0.25))
    assert quantile([4.0, 1.0, 2.0, 3.0], 0.25) == pytest.approx(1.75)
    noisy = timing_fields([1.0, 1.0, 1.0, 1.0], [0.8, 1.2, 0.9, 1.3], tolerance=0.01)
    assert noisy["verdict"] == "within noise"  # the pair ratios straddle 1
    assert timing_fields([1.0] * 3, [0.7] * 3, tolerance=0.05)["verdict"] == "faster"
    assert timing_fields([1.0] * 3, [1.04] * 3, tolerance=0.05)["verdict"] == "within noise"
    assert repeats_for(0.01, 5, 10.0, 50) == 50 and repeats_for(2.0, 5, 10.0, 50) == 5
    assert repeats_for(0.5, 5, 10.0, 50) == 10


def test_the_ratio_table_has_a_line_per_variant_and_a_column_per_length() -> None:
    def row(variant: str, length: int, ratio: float, verdict: str, identical: bool = True):
        return {"variant": variant, "length": length, "ratio": ratio, "verdict": verdict,
                "identical": identical, "max_abs_diff_out": 0.0 if identical else 2e-7,
                "max_abs_diff_grad": 0.0 if identical else 3e-6}

    rows = [row("gla", 1024, 1.01, "within noise"), row("gla", 16384, 1.2, "slower"),
            row("softmax_layer", 16384, 0.8, "faster", identical=False),
            row("softmax", 1024, 1.0, "within noise"),
            {"variant": "softmax", "length": 16384, "ratio": math.nan,
             "verdict": "skipped: predicted 48 s a call > --max-seconds 30"}]
    lines = ratio_table(rows).splitlines()
    assert "N=1024" in lines[0] and "N=16384" in lines[0]
    assert lines[1].split() == ["gla", "1.010", "1.200+", "identical"]
    assert lines[2].split()[:2] == ["softmax_layer", "0.800-"]
    assert "out 2e-07, grad 3e-06" in lines[2]
    assert lines[3].split() == ["softmax", "1.000", "skipped", "identical"]
    assert median_ratios(rows, 16384) == {"gla": 1.2, "softmax_layer": 0.8}


def test_weights_are_shared_when_the_names_match_and_numbers_compared() -> None:
    torch.manual_seed(0)
    source, target = nn.Linear(4, 4), nn.Linear(4, 4)
    assert share_weights(source, target) == "copied"
    assert torch.equal(source.weight, target.weight)
    assert share_weights(source, target) == "same from the seed"
    assert share_weights(source, nn.Sequential(nn.Linear(4, 4))).startswith("seed only: names")
    assert share_weights(nn.ReLU(), nn.ReLU()) == "none"

    def case(module: nn.Module) -> Case:
        return Case(module, {"x": torch.ones(2, 4, requires_grad=True)}, {})

    assert compare_calls(case(source), case(target)) == {
        "identical": True, "max_abs_diff_out": 0.0, "max_abs_diff_grad": 0.0}
    with torch.no_grad():
        target.bias[0] += 1e-3
    numbers = compare_calls(case(source), case(target))
    assert not numbers["identical"]
    assert numbers["max_abs_diff_out"] == pytest.approx(1e-3, rel=1e-3)


@pytest.mark.slow
def test_the_checkout_against_its_own_head_is_identical(tmp_path: Path) -> None:
    script = load_script("scripts/maintainer/code_versions_benchmark.py")
    assert script.main(["--before", "HEAD", "--attentions", "elu,gla_layer", "--lengths", "64",
                        "--repeats", "1", "--min-seconds", "0.01", "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "code_versions_benchmark.csv")
    assert list(table.columns) == COLUMNS
    assert table["identical"].all() and list(table["variant"]) == ["elu", "gla_layer"]


def test_a_shape_is_given_on_the_command_line_or_refused_in_one_line() -> None:
    script = load_script("scripts/maintainer/code_versions_benchmark.py")
    args = script.parse_args(["--shape", "32,4,32,bidirectional"])
    assert (args.shape.batch, args.shape.heads, args.shape.head_dim, args.shape.causal) == \
        (32, 4, 32, False)
    assert script.parse_args(["--shape", "1,8,64,causal"]).shape.causal
    for bad in ("32,4,32", "32,4,0,causal", "32,4,32,yes"):
        with pytest.raises(SystemExit):
            script.parse_args(["--shape", bad])
