"""The one study command line (linarena.studies.main, scripts/study.py): every declared study is
run by it, each study's own script takes the same arguments, a bad --jobs, --threads, --seeds or
--preset is refused at once, before any run starts or folder is made, and a new study is its
declaration and its preset alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers.paths import REPO_ROOT, load_script

from linarena.studies import cli, main, study
from linarena.studies.declaration import Report, Study
from linarena.studies.main import STUDIES, declared_studies, study_parser
from linarena.studies.preset import load_grid

BAD = [("--jobs", "0"), ("--threads", "0"), ("--preset", "nope")]
BAD_SEEDS = [("--seeds", "-1"), ("--more-seeds", "-1")]


def takes(name: str, option: str) -> bool:
    """Whether study `name` has `option` (its usage line names it)."""
    return option in study_parser(name, "study.py").format_usage().replace("[", " ").split()


CASES = [(name, bad) for name in STUDIES for bad in BAD] + [
    (name, bad) for name in STUDIES for bad in BAD_SEEDS if takes(name, bad[0])]


@pytest.fixture
def nothing_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder where starting a train.py run fails the test."""
    def no_run(*_: object, **__: object) -> int:
        raise AssertionError("a run was started")

    monkeypatch.setattr(study.Children, "call", no_run)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_registry_holds_every_shipped_study_and_the_seeds_cases_are_found() -> None:
    assert {"state_size", "mixture", "step_budget", "seed_sweep", "cross_kernel"} <= set(STUDIES)
    assert ("seed_sweep", BAD_SEEDS[1]) in CASES and ("cross_kernel", BAD_SEEDS[0]) in CASES


@pytest.mark.parametrize(("name", "bad"), CASES)
def test_a_bad_argument_is_refused_before_anything_runs(
        name: str, bad: tuple[str, str], nothing_runs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    script = STUDIES[name].script
    calls = [(load_script("scripts/study.py").main, [name])]
    calls += [(load_script(script).main, [])] if script else []
    for run, before in calls:
        with pytest.raises(SystemExit) as stopped:
            run([*before, "--root", "root", *bad])
        assert stopped.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"argument {bad[0]}" in error and bad[1] in error, error
        assert list(nothing_runs.iterdir()) == []


def test_help_lists_every_study_with_its_description(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # a description unwrapped
    with pytest.raises(SystemExit):
        load_script("scripts/study.py").main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for name, declared in STUDIES.items():
        assert f" {name} {declared.description}" in shown, shown


@pytest.mark.parametrize("name", [name for name in STUDIES if STUDIES[name].script])
def test_a_study_script_runs_its_declared_study(
        name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The scripts published provenance records name stay, as the study's entry points."""
    declared = STUDIES[name]
    assert (REPO_ROOT / declared.script).is_file()
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        load_script(declared.script).main(["--help"])
    shown = capsys.readouterr().out
    assert shown.startswith(f"usage: {Path(declared.script).name} ")
    assert declared.description in shown


def write_tiny_preset(conf: Path) -> None:
    """conf/, copied, with experiment/tiny_study.yaml: a study: block of three seeds."""
    shutil.copytree(REPO_ROOT / "conf", conf)
    (conf / "experiment" / "tiny_study.yaml").write_text(
        "# @package _global_\n"
        "study:\n  widths: [8]\n  short_conv: [0]\n  lrs: [0.01]\n  seeds: [1, 2, 3]\n")


def tiny_study(conf: Path, trained: list[int]) -> Study:
    """A study of one fake run per seed of its preset (a result.json, accuracy seed / 10):
    what a new study declares, training nothing."""
    def load(args):
        return load_grid(args.preset, [o for o in args.overrides if o.startswith("study.")],
                         conf_dir=conf)

    def left(args, grid) -> list[int]:
        return [seed for seed in grid["seeds"]
                if not (args.root / f"seed{seed}" / "result.json").is_file()]

    def plan(args, grid) -> None:
        print(f"{len(left(args, grid))} runs left")

    def run(args, grid) -> dict[str, int]:
        for seed in left(args, grid):
            trained.append(seed)
            (args.root / f"seed{seed}").mkdir(parents=True)
            (args.root / f"seed{seed}" / "result.json").write_text(
                json.dumps({"seed": seed, "acc": seed / 10}))
        return {"ok": len(grid["seeds"])}

    def collect(args, grid) -> pd.DataFrame:
        found = sorted(args.root.glob("seed*/result.json"))
        if not found:
            raise FileNotFoundError(f"no run under {args.root}")
        return pd.DataFrame([json.loads(path.read_text()) for path in found])

    def report(args, grid, runs) -> Report:
        return Report({".csv": runs, ".md": f"{len(runs)} seeds, best {runs['acc'].max()}\n"},
                      lambda paths: f"{len(runs)} runs -> {paths[0]}")

    return Study(name="tiny", description="A tiny study: one fake run per seed",
                 load=load, run=run, plan=plan, collect=collect, report=report,
                 preset="tiny_study", output="tiny")


def test_a_new_study_is_its_declaration_and_preset_run_by_the_one_command_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    conf, root, out = tmp_path / "conf", tmp_path / "root", tmp_path / "out"
    write_tiny_preset(conf)
    monkeypatch.setattr(cli, "CONF_DIR", conf)  # where --preset looks
    trained: list[int] = []
    monkeypatch.setitem(main.STUDIES, "tiny", tiny_study(conf, trained))
    command = load_script("scripts/study.py").main
    given = ["tiny", "--preset", "tiny_study", "--root", str(root)]

    assert command([*given, "--plan"]) == 0
    assert capsys.readouterr().out == "3 runs left\n" and not root.exists()
    assert command([*given, "--report-only"]) == 2  # nothing trained yet: one line
    assert capsys.readouterr().err == f"study.py tiny: error: no run under {root}\n"

    assert command([*given, "--out", str(out), "study.seeds=[1,2]"]) == 0
    assert trained == [1, 2]
    said = capsys.readouterr().out
    assert "outcomes: {'ok': 2}" in said and f"2 runs -> {out / 'tiny.csv'}" in said
    assert list(pd.read_csv(out / "tiny.csv")["acc"]) == [0.1, 0.2]
    assert (out / "tiny.md").read_text() == "2 seeds, best 0.2\n"
    records = json.loads((out / "provenance.json").read_text())
    assert set(records) == {"tiny.csv", "tiny.md"}
    assert records["tiny.csv"]["command"] == (
        f"python scripts/study.py tiny --preset tiny_study --root {root} --out {out} "
        "'study.seeds=[1,2]'")

    assert command([*given, "--report-only", "--runs-command", "python train.py"]) == 0
    assert trained == [1, 2]  # --report-only trains nothing
    records = json.loads((root / "provenance.json").read_text())  # no --out: into --root
    assert records["tiny.md"]["command"].startswith("python train.py")
    assert records["tiny.md"]["command"].endswith("--report-only --runs-command 'python train.py'")


def test_a_study_is_registered_by_declaring_it_in_a_module(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """STUDIES collects every module-level declaration: no list to edit."""
    package = tmp_path / "more_studies"
    package.mkdir()
    (package / "__init__.py").touch()
    (package / "tiny.py").write_text(
        "from linarena.studies.declaration import Study\n"
        "TINY = Study(name='tiny', description='one line', load=print, run=print)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = declared_studies("more_studies")
    assert list(found) == ["tiny"] and found["tiny"].description == "one line"
    assert set(declared_studies()) == set(STUDIES)
