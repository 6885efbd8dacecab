"""The cross-kernel reproduction check (issue #26 item 3) without training: its sample rule, its
consistency rule on hand-computed cases, the environment of each kernel path, the report from
fake rerun folders (and from a cross_kernel.csv written before), and a damaged runs CSV."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers.mqar import LR_ON_SEED_1, PRESET, fake_run
from helpers.paths import load_script

from linarena.analysis.statistics import wilson_interval
from linarena.studies import cross_kernel, study
from linarena.studies.cross_kernel import (
    KERNEL_PATHS,
    RERUN_COLUMNS,
    choose_sample,
    env_text,
    parse_kernel_paths,
    points_table,
)
from linarena.studies.preset import load_grid, preset_protocol
from linarena.studies.runs import RUN_COLUMNS
from linarena.studies.study import StudyPoint
from linarena.system import cpu_model

LR1, LR2 = 1e-3, 1e-2  # two of the preset's study.lrs


def published(attention: str, d_model: int, conv: int, lr: float, seed: int, test: float,
              val: float = 0.5) -> dict:
    """A runs CSV row (runs.RUN_COLUMNS) of the preset's protocol."""
    point = StudyPoint(d_model, conv, lr, seed)
    return {**preset_protocol(PRESET), "attention": attention, "label": attention,
            "short_conv": conv, "d_model": d_model, "num_heads": 1, "lr": lr, "seed": seed,
            "state_size": 1, "state_kind": "recurrent", "test_acc": test, "val_acc_best": val,
            "steps": 300, "best_step": 200, "run": f"{point.folder_name}/{attention}",
            "commit": "feed", "cpu_kernels": "AVX512"}


def point(attention: str, d_model: int, conv: int, lr: float, tests: list[float],
          val: float = 0.5) -> list[dict]:
    return [published(attention, d_model, conv, lr, seed, test, val)
            for seed, test in enumerate(tests, start=1)]


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    """Two split points, three whole ones (nearest the threshold: 0.05, 0.09, 0.30)."""
    rows = [published("elu", 16, 3, LR1, 1, test=0.95, val=0.4),  # not the chosen lr: left out
            *point("elu", 16, 3, LR2, [0.95, 0.12, 0.93], val=0.9),  # split 2/3
            *point("elu", 32, 3, LR2, [0.12, 0.95, 0.13]),           # split 1/3
            *point("softmax", 16, 0, LR1, [0.99, 0.98, 0.95]),       # 3/3, nearest 0.05
            *point("softmax", 32, 0, LR1, [0.12, 0.13, 0.60]),       # 0/3, nearest 0.30
            *point("retnet", 16, 3, LR2, [0.99, 0.99, 0.99])]        # 3/3, nearest 0.09
    return pd.DataFrame(rows, columns=[*RUN_COLUMNS, "cpu_kernels"])


def keys(sample: pd.DataFrame) -> list[tuple]:
    return list(dict.fromkeys(zip(sample["attention"], sample["d_model"], strict=True)))


def test_the_sample_has_every_split_point_then_the_nearest_whole_points(runs) -> None:
    only_splits = choose_sample(runs, LR_ON_SEED_1, min_runs=0)
    assert keys(only_splits) == [("elu", 16), ("elu", 32)]  # every split point, min-runs or not
    assert len(only_splits) == 6 and set(only_splits["lr"]) == {LR2}
    assert set(only_splits["reason"]) == {"split point"}
    assert keys(choose_sample(runs, LR_ON_SEED_1, min_runs=7)) == [("elu", 16), ("elu", 32),
                                                         ("softmax", 16)]
    sample = choose_sample(runs, LR_ON_SEED_1, min_runs=10)
    assert keys(sample) == [("elu", 16), ("elu", 32), ("softmax", 16), ("retnet", 16)]
    assert len(sample) == 12 and list(sample["seed"][:3]) == [1, 2, 3]  # whole points
    shuffled = runs.sample(frac=1, random_state=0)
    pd.testing.assert_frame_equal(choose_sample(shuffled, LR_ON_SEED_1, min_runs=10), sample)


def test_a_seed_subset_keeps_every_split_point_and_counts_only_its_runs(runs) -> None:
    """Split points are read from all their seeds; only the seeds asked for are rerun, and
    the minimum counts those reruns."""
    sample = choose_sample(runs, LR_ON_SEED_1, min_runs=6, seeds=[1, 2])
    assert keys(sample)[:2] == [("elu", 16), ("elu", 32)]
    assert set(sample["seed"]) == {1, 2} and len(sample) == 6  # 2 split points + 1 more, 2 each


@pytest.mark.parametrize("path, aten", [("default", "default"), ("avx2", "avx2"),
                                        ("avx512", "avx512")])
def test_each_cpu_kernel_path_sets_the_capability_and_mkl_reproducibility(
        path: str, aten: str) -> None:
    assert dict(KERNEL_PATHS[path].env) == {"ATEN_CPU_CAPABILITY": aten, "MKL_CBWR": "COMPATIBLE",
                                            "CUDA_VISIBLE_DEVICES": ""}
    assert env_text(path) == (f"ATEN_CPU_CAPABILITY={aten} MKL_CBWR=COMPATIBLE "
                              "CUDA_VISIBLE_DEVICES=")
    assert KERNEL_PATHS[path].overrides == ()  # the study's command, unchanged


def test_kernel_path_names_are_checked_and_native_and_cuda_say_what_they_do() -> None:
    assert parse_kernel_paths("default, avx2") == ["default", "avx2"]
    with pytest.raises(ValueError, match="choose from default, avx2"):
        parse_kernel_paths("default,sse")
    assert "ATEN_CPU_CAPABILITY" not in KERNEL_PATHS["native"].env
    assert "trainer.precision=32-true" in KERNEL_PATHS["cuda"].overrides


def test_a_rerun_is_the_studys_command_under_the_kernel_paths_env(
        runs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launched = []

    def fake_call(_: study.Children, command: list[str], label: str, env: dict,
                  **__: object) -> int:
        launched.append((command, env))
        return 1  # no run finishes: nothing is trained

    monkeypatch.setattr(study.Children, "call", fake_call)
    tasks = cross_kernel.sample_tasks(choose_sample(runs, LR_ON_SEED_1, min_runs=0),
                                      load_grid(PRESET)["lrs"])
    cross_kernel.run_check(tasks[:1], PRESET, tmp_path, ["avx2"], jobs=1, threads=1,
                           extra=[], archived=None)
    (command, env), = launched
    assert command == StudyPoint(16, 3, LR2, 1).commands(PRESET, ["elu"], tmp_path / "avx2")[0]
    assert (env["ATEN_CPU_CAPABILITY"], env["MKL_CBWR"], env["OMP_NUM_THREADS"]) == \
        ("avx2", "COMPATIBLE", "1")


def test_the_default_kernel_path_reaches_torch() -> None:
    assert cross_kernel.probe("default") == "DEFAULT"


def reruns_of(sample: pd.DataFrame, tests: list[float], path: str = "avx2") -> pd.DataFrame:
    """Rerun rows of the sample's first len(tests) runs, with these test accuracies."""
    rows = [{**{c: run[c] for c in ("attention", "short_conv", "d_model", "lr", "seed", "run")},
             "kernel_path": path, "published_test_acc": run["test_acc"], "rerun_test_acc": test}
            for (_, run), test in zip(sample.iterrows(), tests, strict=False)]
    table = pd.DataFrame(rows, columns=RERUN_COLUMNS)
    for side in ("published", "rerun"):
        table[f"{side}_success"] = table[f"{side}_test_acc"] >= 0.9
    return table


@pytest.mark.parametrize("published_tests, rerun_tests, p_value, flipped, reading", [
    # 3/3 against 0/3: two of the 20 tables with 3 successes in 6 are this extreme, p = 0.1;
    # no 3-seed point can be inconsistent, but the flips say what changed.
    ([0.99] * 3, [0.12] * 3, 2 / 20, 3, "consistent (0/3 rerun vs 3/3 published, Fisher p = 0.10)"
     ", but 3 seeds changed outcome: the outcome depends on the kernel path"),
    # 10/10 against 0/10: p = 2 / C(20, 10).
    ([0.99] * 10, [0.12] * 10, 2 / 184756, 10, "NOT consistent: 0/10 rerun vs 10/10 published"),
    ([0.95, 0.12, 0.93], [0.95, 0.12, 0.93], 1.0, 0, "reproduced: 2/3 rerun vs 2/3 published"),
    ([0.95, 0.12, 0.93], [0.12, 0.95, 0.93], 1.0, 2, "consistent (2/3 rerun vs 2/3 published"),
    ([0.95, 0.12, 0.93], [0.95, 0.12], 1.0, 0, "(partial: 2 of 3 seeds rerun)"),
])
def test_consistency_is_fishers_test_at_005_with_the_flipped_seeds(
        published_tests: list[float], rerun_tests: list[float], p_value: float, flipped: int,
        reading: str) -> None:
    sample = pd.DataFrame(point("elu", 16, 3, LR2, published_tests))
    table = points_table(sample, reruns_of(sample, rerun_tests), ["avx2", "default"])
    row, missing = table.iloc[0], table.iloc[1]
    assert row["fisher_p"] == pytest.approx(p_value)
    assert row["consistent"] == (p_value >= 0.05) and row["flipped"] == flipped
    assert reading in row["verdict"]
    k, n = sum(t >= 0.9 for t in published_tests), len(published_tests)
    assert (row["published_k"], row["published_n"]) == (k, n)
    assert (row["published_ci_low"], row["published_ci_high"]) == wilson_interval(k, n)
    k, n = sum(t >= 0.9 for t in rerun_tests), len(rerun_tests)
    assert (row["rerun_ci_low"], row["rerun_ci_high"]) == wilson_interval(k, n)
    assert (missing["kernel_path"], missing["verdict"]) == ("default", "not rerun yet")


def test_the_published_interval_of_three_of_three_by_hand() -> None:
    sample = pd.DataFrame(point("elu", 16, 3, LR2, [0.99] * 3))
    row = points_table(sample, reruns_of(sample, [0.99] * 3), ["avx2"]).iloc[0]
    # k = n: centre (n + z^2/2) / (n + z^2), half-width (z^2/2) / (n + z^2): low n / (n + z^2).
    assert row["published_ci_low"] == pytest.approx(3 / (3 + 1.96**2))
    assert row["published_ci_high"] == 1.0 and row["verdict"].startswith("reproduced: 3/3")



def test_the_report_reads_the_rerun_folders_then_resumes_from_its_csv(
        runs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    runs_csv = tmp_path / "runs.csv"
    runs.to_csv(runs_csv, index=False)
    root, out = tmp_path / "reruns", tmp_path / "out"
    for seed, test in enumerate([0.95, 0.12, 0.12], start=1):  # seed 3 flips
        fake_run(root / "avx2", "elu", 16, 3, LR2, val=0.9, test=test, seed=seed)
    fake_run(root / "default", "elu", 16, 3, LR2, val=0.9, test=0.95, seed=1)
    monkeypatch.setattr(cross_kernel, "probe", lambda name: name.upper())
    args = ["--report-only", "--runs", str(runs_csv), "--root", str(root), "--min-runs", "0",
            "--kernel-paths", "avx2,default"]
    assert load_script("scripts/maintainer/cross_kernel_check.py").main(
        [*args, "--out", str(out)]) == 0
    reruns = pd.read_csv(out / "cross_kernel.csv")
    assert list(reruns.columns) == list(RERUN_COLUMNS) and len(reruns) == 4
    flipped = reruns.iloc[2]
    assert (flipped["kernel_path"], flipped["seed"], flipped["rerun_success"]) == ("avx2", 3, False)
    assert (flipped["published_test_acc"], flipped["published_commit"],
            flipped["published_kernels"]) == (0.93, "feed", "AVX512")
    assert (flipped["rerun_commit"], flipped["cpu"], flipped["kernel"]) == \
        ("c0ffee", cpu_model(), "AVX2")
    assert flipped["kernel_env"] == env_text("avx2")
    points = pd.read_csv(out / "cross_kernel_points.csv").set_index(["d_model", "kernel_path"])
    assert points.loc[(16, "avx2"), ["rerun_k", "rerun_n", "flipped"]].tolist() == [1, 3, 1]
    assert points.loc[(16, "default"), "verdict"].endswith("(partial: 1 of 3 seeds rerun), no "
                                                           "seed changed outcome (Fisher p = 1.00)")
    assert points.loc[(32, "avx2"), "verdict"] == "not rerun yet"
    records = json.loads((out / "provenance.json").read_text())
    command = records["cross_kernel.csv"]["command"]
    assert records["cross_kernel.csv"]["rows"] == 4 and "cross_kernel_points.csv" in records
    assert "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE" in command
    assert "python train.py -m experiment=mqar_study_cpu attention=elu" in command
    assert "elu conv 3 d16 lr 0.01 [avx2]: consistent" in capsys.readouterr().out
    # The same report from its CSV alone: no run folder left.
    shutil.rmtree(root)
    again = tmp_path / "again"
    assert load_script("scripts/maintainer/cross_kernel_check.py").main([*args, "--out", str(again),
                               "--resume-from", str(out / "cross_kernel.csv")]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(again / "cross_kernel.csv"), reruns)


def test_a_damaged_runs_csv_is_a_one_line_error(
        runs, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs_csv = tmp_path / "runs.csv"
    runs_csv.write_text(runs.to_csv(index=False)[:-40])  # cut while being written
    assert load_script("scripts/maintainer/cross_kernel_check.py").main(
        ["--dry-run", "--runs", str(runs_csv)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{runs_csv}:" in error and "damaged" in error


def test_the_dry_run_states_the_sample_commands_and_cpu_time(
        runs, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs_csv = tmp_path / "runs.csv"
    runs.assign(duration_s=60.0).to_csv(runs_csv, index=False)
    assert load_script("scripts/maintainer/cross_kernel_check.py").main(
        ["--dry-run", "--runs", str(runs_csv), "--min-runs", "7", "--root", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "sample: 9 runs per kernel path, 2 kernel paths (default, avx2)" in printed
    assert "softmax conv 0 d16 lr 0.001: seeds [1, 2, 3] (nearest the threshold" in printed
    assert printed.count("python train.py -m") == 2 * 9  # one call per point and seed here
    assert "estimated CPU time: 0.3 CPU-hours (9 runs from the CSV's duration_s" in printed


def test_the_estimate_times_a_kernel_path_by_its_reruns_so_far() -> None:
    """The unvectorised path runs slower than the published runs: once a path has
    MIN_TIMED reruns, the estimate scales it by their median ratio; other paths stay at the
    published durations."""
    sample = pd.DataFrame({"run": [f"p/{i}" for i in range(6)], "duration_s": [100.0] * 6})
    assert cross_kernel.estimate_cpu_seconds(sample, ["default", "avx2"])[0] == 1200.0
    ratios = [1.5, 2.0, 2.0, 2.5, 3.0]  # median 2; 4 reruns would not be enough
    archived = pd.DataFrame({"kernel_path": "default", "run": [f"p/{i}" for i in range(5)],
                             "rerun_duration_s": [100.0 * r for r in ratios]})
    seconds, how = cross_kernel.estimate_cpu_seconds(sample, ["default", "avx2"], archived)
    assert seconds == 600.0 * 2 + 600.0
    assert "default x 2.00, the median over its 5 reruns so far" in how and "avx2 x" not in how
    fewer = archived.head(cross_kernel.MIN_TIMED - 1)
    assert cross_kernel.estimate_cpu_seconds(sample, ["default", "avx2"], fewer)[0] == 1200.0
