"""The MQAR step-budget check: the study's points rerun with more steps at the lr the study
chose, every seed, compared per point; on synthetic run folders (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from helpers.mqar import LR_ON_SEED_1, fake_run
from helpers.paths import load_script

from linarena.analysis.statistics import wilson_interval
from linarena.studies import step_budget_study
from linarena.studies.runs import load_study
from linarena.studies.step_budget import chosen_points, compare, plan, plan_tail
from linarena.studies.study import StudyPoint

LONGER = ["trainer.max_steps=4000"]



@pytest.fixture(scope="module")
def study_root(tmp_path_factory) -> Path:
    """elu at d16 with conv: lr 1e-2 wins seed 1's validation (3e-3 has the better test
    accuracy, which must not count); seeds 2 and 3 at 1e-2. softmax at d16 and d32."""
    root = tmp_path_factory.mktemp("study")
    fake_run(root, "elu", 16, 3, 1e-2, val=0.80, test=0.70)
    fake_run(root, "elu", 16, 3, 3e-3, val=0.60, test=0.95)
    fake_run(root, "elu", 16, 3, 1e-2, val=0.50, test=0.40, seed=2)
    fake_run(root, "elu", 16, 3, 1e-2, val=0.90, test=0.92, seed=3)
    fake_run(root, "softmax", 16, 3, 3e-3, val=0.99, test=0.99)
    fake_run(root, "softmax", 32, 3, 3e-3, val=0.99, test=0.99)
    return root


@pytest.fixture(scope="module")
def study(study_root) -> pd.DataFrame:
    return load_study([study_root])


def test_the_points_carry_the_lr_the_study_chose_on_validation(study):
    points = chosen_points(study, LR_ON_SEED_1, [16], [3], ["elu", "softmax"])
    assert dict(zip(points["attention"], points["lr"], strict=True)) == {"elu": 1e-2,
                                                                         "softmax": 3e-3}
    assert chosen_points(study, LR_ON_SEED_1, [16], [0], ["elu"]).empty
    assert list(chosen_points(study, LR_ON_SEED_1, [16, 32], [3],
                              ["softmax"])["d_model"]) == [16, 32]


def test_every_seed_the_study_ran_at_a_point_is_planned_and_attentions_share_a_task(study):
    points = chosen_points(study, LR_ON_SEED_1, [16], [3], ["elu", "softmax"])
    tasks = dict(plan(points, study))
    assert tasks[StudyPoint(16, 3, 1e-2, 2)] == ["elu"]
    assert tasks[StudyPoint(16, 3, 3e-3, 1)] == ["softmax"]
    assert StudyPoint(16, 3, 3e-3, 3) not in tasks  # the study ran softmax's seed 1 only
    assert len(tasks) == 4
    shared = points.assign(lr=3e-3)
    assert dict(plan(shared, study))[StudyPoint(16, 3, 3e-3, 1)] == ["elu", "softmax"]


def longer_runs(root: Path, seeds=(1, 2, 3)) -> pd.DataFrame:
    tests = {1: 0.95, 2: 0.45, 3: 0.99}
    for seed in seeds:
        fake_run(root, "elu", 16, 3, 1e-2, val=tests[seed], test=tests[seed], seed=seed,
                 overrides=LONGER)
    # another lr than the chosen one: not part of the comparison
    fake_run(root, "elu", 16, 3, 3e-3, val=0.99, test=0.99, overrides=LONGER)
    return load_study([root])


def test_the_comparison_pairs_seeds_and_counts_recall_at_both_budgets(study, tmp_path):
    points = chosen_points(study, LR_ON_SEED_1, [16], [3], ["elu"])
    row = compare(study, longer_runs(tmp_path), points).iloc[0]
    assert row["seeds"] == 3 and row["max_steps_study"] == 2000 and row["max_steps_longer"] == 4000
    assert row["test_acc_median_study"] == pytest.approx(0.70)
    assert row["test_acc_median_longer"] == pytest.approx(0.95)
    assert (row["recalled_study"], row["recalled_longer"]) == (1, 2)
    # per-seed gains 0.25, 0.05, 0.07: their median, not the difference of the medians
    assert row["gain_median"] == pytest.approx(0.07)
    # Each budget's statistics (issue #26), over the paired seeds.
    assert (row["n_seeds_study"], row["successes_study"]) == (3, 1)
    assert (row["n_seeds_longer"], row["successes_longer"]) == (3, 2)
    assert (row["success_ci_low_longer"], row["success_ci_high_longer"]) == wilson_interval(2, 3)
    assert (row["min_acc_longer"], row["max_acc_longer"]) == pytest.approx((0.45, 0.99))


def test_the_script_reports_both_budgets_with_provenance_and_says_when_runs_are_missing(
        study, tmp_path):
    csv = tmp_path / "study_runs.csv"
    study.to_csv(csv, index=False)
    root = tmp_path / "longer"
    longer_runs(root, seeds=(1, 2))
    out = tmp_path / "out"
    script = load_script("scripts/mqar_step_budget.py")
    args = ["--study", str(csv), "--widths", "16", "--short-conv", "3", "--attention", "elu",
            "--max-steps", "4000", "--root", str(root), "--out", str(out), "--report-only"]
    assert script.main(args) == 0
    table = (out / "mqar_step_budget.md").read_text()
    assert table.startswith("PARTIAL: 2 of 3 runs finished")
    assert "| elu+1 | 3 | 16 | 0.01 | 55.0 (0/2) | 70.0 (1/2) | +15.0 | 202 → 202 |" in table
    records = json.loads((out / "provenance.json").read_text())
    assert set(records) == {f"mqar_step_budget{s}" for s in ("_runs.csv", ".csv", ".md")}
    fake_run(root, "elu", 16, 3, 1e-2, val=0.99, test=0.99, seed=3, overrides=LONGER)
    assert script.main(args) == 0
    assert not (out / "mqar_step_budget.md").read_text().startswith("PARTIAL")


def test_a_point_the_study_does_not_have_is_a_clear_error(study, tmp_path, capsys):
    csv = tmp_path / "study_runs.csv"
    study.to_csv(csv, index=False)
    code = load_script("scripts/mqar_step_budget.py").main(
        ["--study", str(csv), "--widths", "64", "--max-steps", "4000",
         "--root", str(tmp_path / "longer"), "--report-only"])
    assert code == 2
    assert "has no run at d_model [64]" in capsys.readouterr().err


def test_a_tail_continues_each_study_run_from_its_own_checkpoint(study, tmp_path):
    """Issue #26 item 6: the study's run continued at a constant lr, not a new schedule."""
    points = chosen_points(study, LR_ON_SEED_1, [16], [3], ["elu", "softmax"])
    tasks = plan_tail(points, study, tmp_path / "study", steps=500, lr_fraction=0.1)
    point, names = next((p, n) for p, n in tasks if p.point == StudyPoint(16, 3, 1e-2, 2))
    assert names == ["elu"] and point.folder_name == "d16_conv3_lr1.00e-02_seed2"
    command, = point.commands("mqar_study_cpu", names, tmp_path / "tails")
    start = tmp_path / "study" / "d16_conv3_lr1.00e-02_seed2" / "elu" / "checkpoints" / "last.ckpt"
    assert {f"init_weights={start}", "optim.schedule=constant", "optim.warmup_steps=0",
            "trainer.max_steps=500", "seed=2", "attention=elu"} <= set(command)
    assert f"optim.lr={1e-2 * 0.1}" in command


def test_the_tail_report_pairs_each_tail_with_its_study_run(study, study_root, tmp_path, capsys):
    csv = tmp_path / "study_runs.csv"
    study.to_csv(csv, index=False)
    root = tmp_path / "tails"
    for seed, acc in ((1, 0.90), (2, 0.60), (3, 0.95)):  # at 0.1 x the study's lr 1e-2
        fake_run(root, "elu", 16, 3, 1e-3, val=acc, test=acc, seed=seed,
                 overrides=["optim.schedule=constant", "trainer.max_steps=500"])
    out = tmp_path / "out"
    script = load_script("scripts/mqar_step_budget.py")
    assert script.main(["--study", str(csv), "--widths", "16", "--short-conv", "3",
                        "--attention", "elu", "--tail", "500", "--root", str(root),
                        "--study-root", str(study_root), "--out", str(out),
                        "--report-only"]) == 0
    row = pd.read_csv(out / "mqar_step_budget.csv").iloc[0]
    assert (row["lr"], row["seeds"], row["max_steps_longer"]) == (1e-2, 3, 500)
    assert row["gain_median"] == pytest.approx(0.20)  # per seed: +0.20, +0.20, +0.03
    text = (out / "mqar_step_budget.md").read_text()
    assert "continued from their last checkpoint" in text and "0.1 x the lr" in text
    assert "| +500 steps (tail) |" in text and "best step (study → tail)" in text
    assert "trained again" not in text  # every tail continued its published run
    runs = pd.read_csv(out / "mqar_step_budget_runs.csv").sort_values("seed")
    assert list(runs["start_test_acc"]) == pytest.approx([0.70, 0.40, 0.92])


def test_the_tails_cover_the_preset_hybrid_entries_too(study, study_root, tmp_path):
    """Without --attention the check takes every point the study trained, its hybrid stacks
    (the preset's entries) included, not only the variants of conf/attention/."""
    hybrid = study[study["attention"] == "elu"].assign(
        attention="gated_deltanet+softmax",
        run=lambda runs: runs["run"].str.replace("/elu", "/gated_deltanet+softmax"))
    csv = tmp_path / "study_runs.csv"
    pd.concat([study, hybrid]).to_csv(csv, index=False)
    root = tmp_path / "tails"
    for seed in (1, 2, 3):
        fake_run(root, "elu", 16, 3, 1e-3, val=0.9, test=0.9, seed=seed,
                 overrides=["optim.schedule=constant", "trainer.max_steps=500"])
    out = tmp_path / "out"
    script = load_script("scripts/mqar_step_budget.py")
    assert script.main(["--study", str(csv), "--widths", "16", "--short-conv", "3", "--tail",
                        "500", "--root", str(root), "--study-root", str(study_root),
                        "--out", str(out), "--report-only"]) == 0
    # elu's 3 seeds, softmax's 1 and the hybrid's 3 are planned; elu's 3 have run
    assert "PARTIAL: 3 of 7 runs finished" in (out / "mqar_step_budget.md").read_text()


def test_a_tail_without_the_run_it_continued_is_a_clear_error(study, tmp_path, capsys):
    """A tail is read against the run it continued: without that run's folder (nor the tails'
    runs CSV, which names it) there is nothing to compare it with."""
    csv = tmp_path / "study_runs.csv"
    study.to_csv(csv, index=False)
    root = tmp_path / "tails"
    fake_run(root, "elu", 16, 3, 1e-3, val=0.9, test=0.9, seed=1,
             overrides=["optim.schedule=constant", "trainer.max_steps=500"])
    script = load_script("scripts/mqar_step_budget.py")
    assert script.main(["--study", str(csv), "--widths", "16", "--short-conv", "3",
                        "--attention", "elu", "--tail", "500", "--root", str(root),
                        "--study-root", str(tmp_path / "gone"), "--out", str(tmp_path / "out"),
                        "--report-only"]) == 2
    error = capsys.readouterr().err
    assert "the study run it continued has no finished run folder" in error
    assert str(tmp_path / "gone") in error and "--resume-from" in error


def fake_training(study_root: Path, root: Path, published: pd.Series, trained: list,
                  nudged_seed: int | None = None):
    """A stand-in for the study's run_tasks that records each run in `trained`: a study run
    trained again (from scratch: its folder is gone) gets its published test accuracy (+0.01
    at `nudged_seed`, as on other CPU kernels) and a last.ckpt; a tail gets 0.9."""
    def run_tasks(tasks, preset, where, *args, **kwargs) -> None:
        for point, names in tasks:
            for name in names:
                trained.append((where, point.folder_name, name))
                if where == study_root:
                    assert not (where / point.folder_name / name).exists()
                    test = published[f"{point.folder_name}/{name}"]
                    test += 0.01 if point.seed == nudged_seed else 0.0
                    folder = fake_run(study_root, name, point.d_model, point.short_conv,
                                      point.lr, val=test, test=test, seed=point.seed)
                    (folder / "checkpoints" / "last.ckpt").touch()
                else:
                    fake_run(root, name, 16, 3, point.point.lr * 0.1, val=0.9, test=0.9,
                             seed=point.point.seed, overrides=["optim.schedule=constant",
                                                               "trainer.max_steps=500"])
    return run_tasks


def tail_args(csv: Path, root: Path, study_root: Path, out: Path) -> list[str]:
    """mqar_step_budget.py's arguments for elu's 500-step tails at d_model 16 with the conv."""
    return ["--study", str(csv), "--widths", "16", "--short-conv", "3", "--attention", "elu",
            "--tail", "500", "--root", str(root), "--study-root", str(study_root),
            "--out", str(out)]


@pytest.mark.parametrize("reproduced", [True, False])
def test_a_tail_whose_checkpoint_is_gone_retrains_the_study_run_and_checks_it(
        study, tmp_path, monkeypatch, capsys, reproduced):
    """A study resumed from its runs CSV has no checkpoints: --retrain-study trains its runs
    again for them. On other CPU kernels than the published runs' a retrain differs from its
    row; its tail continues the retrain and is compared with it, the caption counts such tails,
    and the tails' runs CSV keeps each start, so the report is remade from that CSV alone."""
    csv = tmp_path / "study_runs.csv"
    study.to_csv(csv, index=False)
    published = study.set_index("run")["test_acc"]
    study_root, root = tmp_path / "study", tmp_path / "tails"
    trained = []
    script = load_script("scripts/mqar_step_budget.py")
    monkeypatch.setattr(step_budget_study, "run_tasks", fake_training(
        study_root, root, published, trained, nudged_seed=None if reproduced else 2))
    args = tail_args(csv, root, study_root, tmp_path / "out")
    assert script.main(args) == 2  # without --retrain-study: what is missing, and the fix
    assert "last.ckpt (and 2 more) not found" in capsys.readouterr().err
    code = script.main([*args, "--retrain-study"])
    retrained = sorted(folder for where, folder, _ in trained if where == study_root)
    assert retrained == [f"d16_conv3_lr1.00e-02_seed{seed}" for seed in (1, 2, 3)]
    assert code == 0 and len(trained) == 6  # then the three tails
    out = tmp_path / "out"
    runs = pd.read_csv(out / "mqar_step_budget_runs.csv").sort_values("seed")
    starts = [0.70, 0.40 if reproduced else 0.41, 0.92]
    assert list(runs["start_test_acc"]) == pytest.approx(starts)
    row = pd.read_csv(out / "mqar_step_budget.csv").iloc[0]
    assert row["gain_median"] == pytest.approx(0.20)  # per seed 0.9 minus each start
    text = (out / "mqar_step_budget.md").read_text()
    said = capsys.readouterr().out
    if reproduced:
        assert "trained again" not in text and "differ" not in said
        return
    assert "1 of the 3 tails continued a study run whose test accuracy or best step differs" \
        in text
    assert "1 of 3 study runs trained again differ" in said
    again = tmp_path / "again"  # from the tails' runs CSV alone: no run folder of either
    assert script.main([*args[:-2], "--root", str(tmp_path / "none"), "--study-root",
                        str(tmp_path / "none"), "--resume-from",
                        str(out / "mqar_step_budget_runs.csv"), "--report-only", "--out",
                        str(again)]) == 0
    for name in ("mqar_step_budget.csv", "mqar_step_budget.md"):
        assert (again / name).read_text() == (out / name).read_text()


def test_a_study_run_stopped_before_it_finished_is_trained_again_not_continued(
        study, tmp_path, monkeypatch, capsys):
    """A study run killed mid-training (a sitting's end) leaves a last.ckpt from its middle
    and no summary.json. A tail must not start from it: without --retrain-study that is an
    error naming the run; with it the run is trained again from scratch, and only it, and a
    tail that continued the stopped run is thrown away and trained again."""
    csv = tmp_path / "study_runs.csv"
    study.to_csv(csv, index=False)
    published = study.set_index("run")["test_acc"]
    study_root, root = tmp_path / "study", tmp_path / "tails"
    for seed in (1, 3):  # finished: summary.json and last.ckpt
        folder = fake_run(study_root, "elu", 16, 3, 1e-2, val=0.5, test=published[
            f"d16_conv3_lr1.00e-02_seed{seed}/elu"], seed=seed)
        (folder / "checkpoints" / "last.ckpt").touch()
    stopped = study_root / "d16_conv3_lr1.00e-02_seed2" / "elu"
    (stopped / "checkpoints").mkdir(parents=True)
    (stopped / "checkpoints" / "last.ckpt").touch()  # and no summary.json
    # a tail that continued the stopped run, in the folder the tail of seed 2 trains into
    fake_run(root, "elu", 16, 3, 1e-2, val=0.3, test=0.3, seed=2,
             overrides=["optim.schedule=constant", "trainer.max_steps=500"])
    trained = []
    script = load_script("scripts/mqar_step_budget.py")
    monkeypatch.setattr(step_budget_study, "run_tasks",
                        fake_training(study_root, root, published, trained))
    args = tail_args(csv, root, study_root, tmp_path / "out")
    assert script.main(args) == 2
    error = capsys.readouterr().err
    assert str(stopped / "checkpoints" / "last.ckpt") in error and "not finished" in error
    assert not trained
    assert script.main([*args, "--retrain-study"]) == 0
    assert [(folder, name) for where, folder, name in trained if where == study_root] == [
        ("d16_conv3_lr1.00e-02_seed2", "elu")]
    # all three tails, seed 2's again: the stale one continued the stopped run
    assert sorted(folder for where, folder, _ in trained if where == root) == [
        f"d16_conv3_lr1.00e-02_seed{seed}" for seed in (1, 2, 3)]
