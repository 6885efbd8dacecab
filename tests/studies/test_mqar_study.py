"""The MQAR state-size study: its grid and resume logic, state sizes, the lr chosen on
validation, medians over seeds, the report script and its figure, on a small synthetic study
folder (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers.mqar import PRESET, fake_run
from helpers.paths import REPO_ROOT, load_script
from helpers.training import compose_config
from omegaconf import OmegaConf
from PIL import Image

from linarena.analysis.statistics import wilson_interval
from linarena.studies.preset import load_grid, preset_protocol
from linarena.studies.runs import (
    DECODER_SIZES,
    load_archive,
    load_study,
    state_size,
    study_runs,
    train_overrides,
)
from linarena.studies.state_size import (
    choose_lr,
    lr_points,
    plan_study,
    seed_tasks,
    split_points,
    study_names,
    trains_at,
)
from linarena.studies.state_size_plot import state_size_figure
from linarena.studies.state_size_report import summarize, unfinished
from linarena.studies.study import Progress, StudyPoint, missing, run_point
from linarena.system import machine
from linarena.training.build import build_model


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("study")
    fake_run(root, "elu", 16, 3, 1e-3, val=0.50, test=0.48)
    fake_run(root, "elu", 16, 3, 3e-3, val=0.90, test=0.85)  # best on validation
    fake_run(root, "elu", 16, 3, 1e-2, val=0.70, test=0.95)  # best on test: not chosen
    fake_run(root, "elu", 16, 3, 3e-3, val=0.95, test=0.93, seed=2)
    fake_run(root, "elu", 16, 3, 3e-3, val=0.20, test=0.12, seed=3)
    fake_run(root, "softmax", 16, 0, 3e-3, val=0.99, test=0.98)
    fake_run(root, "taylor", 32, 3, 3e-3, val=0.60, test=0.61)
    fake_run(root, "taylor", 32, 3, 1e-2, val=0.60, test=0.99)  # a tie: the lower lr is chosen
    return root


def config_of(attention: str, d_model: int, short_conv: int = 3) -> dict:
    cfg = compose_config([f"experiment={PRESET}", f"attention={attention}",
                          f"model.d_model={d_model}", f"model.short_conv={short_conv}"])
    return OmegaConf.to_container(cfg, resolve=False)


def test_state_size_counts_the_recurrent_state_or_the_kv_cache() -> None:
    layers, length = 2, 64
    # elu+1: phi has head_dim features; S (16 x 16) and z (16) per layer.
    assert state_size(config_of("elu", 16)) == (16 * 17 * layers, "recurrent")
    # Taylor with feature_dim 16: 1 + 16 + 16^2 = 273 features, whatever the width.
    assert state_size(config_of("taylor", 32)) == (273 * 33 * layers, "recurrent")
    assert state_size(config_of("softmax", 16)) == (2 * length * 16 * layers, "kv_cache")


def test_a_window_as_long_as_the_sequence_is_a_kv_cache_not_a_fixed_state() -> None:
    # At the study's length (64) the default windows (64) see the whole sequence: the sliding
    # window is causal softmax, the Based layer causal softmax plus its linear part.
    for name in ("swa", "based_layer"):
        assert state_size(config_of(name, 16, short_conv=0))[1] == "kv_cache"
        narrow = OmegaConf.merge(config_of(name, 16, short_conv=0), {"attention": {"window": 16}})
        assert state_size(OmegaConf.to_container(narrow))[1] == "recurrent"


def sees_whole_sequence(model: torch.nn.Module, length: int) -> bool:
    """Any part of `model` with a window or a kernel at least `length` long."""
    for part in model.modules():
        kernel = getattr(part, "kernel_size", 0)
        kernel = kernel[0] if isinstance(kernel, tuple) else kernel
        reach = getattr(part, "window", None) or kernel
        if isinstance(reach, int) and reach >= length:
            return True
    return False


@pytest.mark.parametrize("d_model", load_grid(PRESET)["widths"])
def test_no_study_entry_that_sees_the_whole_sequence_is_filed_as_a_fixed_state(
    d_model: int,
) -> None:
    grid = load_grid(PRESET)
    for name in study_names(grid):
        entry = grid["entries"].get(name, [])
        attention = [] if "+" in name else [f"attention={name}"]
        conv = 3 if trains_at(name, 3) else 0
        cfg = compose_config([f"experiment={PRESET}", *attention, f"model.d_model={d_model}",
                              f"model.short_conv={conv}", *entry])
        config = OmegaConf.to_container(cfg, resolve=False)
        cfg.model.max_length, cfg.model.causal = cfg.data.max_length, True
        model = build_model(cfg, DECODER_SIZES)
        if sees_whole_sequence(model, cfg.data.max_length):
            assert state_size(config)[1] == "kv_cache", name


# The fixture's study chose its lr on seed 1 alone.
ONE_LR_SEED = ["study.lr_seeds=[1]"]


def test_grid_has_five_seeds_two_lr_seeds_more_where_split_and_the_based_lrs() -> None:
    grid = load_grid(PRESET)
    assert grid["seeds"] == [1, 2, 3, 4, 5] and grid["lr_seeds"] == [1, 2]
    assert grid["more_seeds"] == [6, 7, 8, 9, 10]  # a split point ends with 10 seeds (#26)
    assert grid["lrs"] == pytest.approx([1e-3, 10 ** -2.5, 1e-2, 10 ** -1.5], rel=2e-3)
    assert load_grid("mqar_study_gpu")["lrs"] == grid["lrs"]  # every variant, every preset
    assert load_grid(PRESET, ["study.short_conv=[3]"])["short_conv"] == [3]
    with pytest.raises(ValueError, match=r"study\.lr_seeds=\[7\] must be some of"):
        load_grid(PRESET, ["study.lr_seeds=[7]"])
    with pytest.raises(ValueError, match=r"study\.more_seeds=\[5, 6\] repeats seeds"):
        load_grid(PRESET, ["study.more_seeds=[5,6]"])
    with pytest.raises(ValueError, match=r"study\.entries\.elu2 is neither"):
        load_grid(PRESET, ["+study.entries.elu2=[]"])


def test_the_study_trains_every_variant_and_its_hybrid_entries_layers_with_own_conv_at_0() -> None:
    grid = load_grid(PRESET)
    names = study_names(grid)
    assert names[-2:] == ["gated_deltanet+softmax", "gated_deltanet+swa"]
    assert study_names(grid, ["elu"]) == ["elu", *names[-2:]]
    assert trains_at("deltanet_layer", 0) and not trains_at("deltanet_layer", 3)
    assert trains_at("gla_layer", 3)  # fla's GLA layer has no conv by default
    assert trains_at("gated_deltanet+swa", 3)  # a hybrid of cores takes model.short_conv


@pytest.mark.parametrize("preset", ["mqar", "mqar_cpu", "mqar_study_cpu", "mqar_study_gpu"])
def test_mqar_presets_never_redraw_performer_features(preset: str) -> None:
    assert compose_config([f"experiment={preset}",
                           "attention=performer"]).attention.redraw_interval == 0
    default = compose_config(["attention=performer"]).attention.redraw_interval
    assert default == 1000  # redraws stay available outside MQAR


@pytest.mark.parametrize("preset", ["mqar_study_cpu", "mqar_study_gpu"])
def test_study_runs_stop_at_val_acc_099(preset: str) -> None:
    callbacks = compose_config([f"experiment={preset}"]).callbacks
    assert all("_target_" in node for node in callbacks.values())  # nothing else slipped in
    callback = callbacks.early_stopping
    assert ((callback.monitor, callback.mode, callback.stopping_threshold)
            == ("val/acc", "max", 0.99))
    assert callback.patience >= compose_config([f"experiment={preset}"]).trainer.max_steps


def test_points_try_every_lr_at_the_lr_seeds_middle_first_and_name_every_override(
    tmp_path: Path,
) -> None:
    grid = load_grid(PRESET)
    points = lr_points(grid, 32, 3)
    assert len(points) == len(grid["lrs"]) * len(grid["lr_seeds"])
    assert {(p.d_model, p.short_conv) for p in points} == {(32, 3)}
    lrs = grid["lrs"]
    assert {point.lr for point in points[:2]} == {lrs[1], lrs[2]}  # the two middle ones of four
    assert [point.seed for point in points] == [1] * 4 + [2] * 4
    commands = StudyPoint(32, 3, 3e-3, 2).commands(PRESET, ["elu", "softmax"], tmp_path)
    assert len(commands) == 1  # plain variants share one multirun
    assert {"-m", f"experiment={PRESET}", "attention=elu,softmax", "model.d_model=32",
            "model.short_conv=3", "optim.lr=0.003", "seed=2"} <= set(commands[0])


def test_entries_run_in_their_own_calls_into_their_own_folders(tmp_path: Path) -> None:
    entries = load_grid(PRESET)["entries"]
    commands = StudyPoint(16, 0, 1e-2, 1).commands(
        PRESET, ["elu", "swa", "gated_deltanet+swa"], tmp_path, entries)
    plain, window, hybrid = commands
    assert "attention=elu" in plain
    assert {"attention=swa", "attention.window=16", "hydra.sweep.subdir='swa'"} <= set(window)
    assert not any(arg.startswith("attention=") for arg in hybrid)  # blocks from the pattern
    assert {"model.pattern=[gated_deltanet,{swa:{window:16}}]",
            "hydra.sweep.subdir='gated_deltanet+swa'"} <= set(hybrid)


def test_finished_runs_are_skipped_and_killed_ones_redone(study: Path) -> None:
    point = StudyPoint(16, 3, 3e-3, 1)
    assert missing(point, study, ["elu", "softmax"]) == ["softmax"]
    # Every attention finished: nothing is launched.
    assert run_point(point, PRESET, study, ["elu"], threads=1) == "done"


def test_each_run_row_names_its_machine_and_the_command_that_trained_it(study: Path) -> None:
    """Issue #26: provenance of the training, not only of the report."""
    row = load_study([study]).set_index("run").loc["d16_conv3_lr3.00e-03_seed2/elu"]
    assert (row["cpu"], row["cpu_kernels"], row["commit"]) == ("Test CPU", "AVX2", "c0ffee")
    assert row["command"] == ("python train.py experiment=mqar_study_cpu attention=elu seed=2 "
                              "model.d_model=16 model.short_conv=3 optim.lr=0.003")


def test_a_runs_command_sets_the_environment_its_numbers_depend_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the study runner sets for each train.py it starts, as summary.json records it.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("MKL_CBWR", raising=False)
    recorded = machine("cpu")
    assert recorded["env"] == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    folder = fake_run(tmp_path, "elu", 16, 3, 3e-3, val=0.9, test=0.9)
    summary = json.loads((folder / "summary.json").read_text())
    summary["machine"] |= {"env": recorded["env"]}
    (folder / "summary.json").write_text(json.dumps(summary))
    command = load_study([tmp_path])["command"].iloc[0]
    assert command.startswith("OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python train.py ")
    assert train_overrides(command)[0] == "experiment=mqar_study_cpu"


def test_lr_is_chosen_on_validation_only_with_ties_to_the_lower_lr(study: Path) -> None:
    runs = load_study([study])
    assert len(runs) == 8
    chosen = choose_lr(runs[runs["seed"] == 1])
    assert chosen[("elu", 3, 16)] == 3e-3  # best validation, although 1e-2 tests higher
    assert chosen[("taylor", 3, 32)] == 3e-3  # equal validation: the lower lr


def test_summary_gives_the_median_over_seeds_and_the_seeds_that_recalled(study: Path) -> None:
    grid = load_grid(PRESET, ONE_LR_SEED)
    summary = summarize(load_study([study]), grid).set_index(["attention", "short_conv",
                                                              "d_model"])
    elu = summary.loc[("elu", 3, 16)]
    assert (elu["chosen_lr"], elu["seeds"], elu["recalled"]) == (3e-3, 3, 1)
    assert elu["test_acc_median"] == 0.85 and elu["lrs_tried"] == 3
    assert elu["best_step_median"] == 202 and elu["lr_chosen_on"] == "seed 1"
    # elu split (1 of 3) with fewer than seeds + more_seeds: unfinished; softmax lacks lrs.
    assert unfinished(summary.reset_index(), grid).all()
    assert summary.loc[("softmax", 0, 16), "state_kind"] == "kv_cache"
    # The statistics of every study's points (issue #26): k of n with its Wilson interval.
    assert (elu["n_seeds"], elu["successes"], elu["success_rate"]) == (3, 1, pytest.approx(1 / 3))
    assert (elu["success_ci_low"], elu["success_ci_high"]) == wilson_interval(1, 3)
    assert (elu["median_acc"], elu["min_acc"], elu["max_acc"]) == (0.85, 0.12, 0.93)


def test_a_diverged_run_is_a_tried_lr_that_is_never_chosen_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # train.py writes a diverged run's summary.json with null metrics and `diverged`.
    folder = fake_run(tmp_path, "performer", 64, 0, 3.16e-2, val=None, test=None)
    summary = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps(summary | {"diverged": "Training diverged"}))
    only_diverged = choose_lr(load_study([tmp_path]))
    assert only_diverged[("performer", 0, 64)] == 3.16e-2  # nothing else to choose
    fake_run(tmp_path, "performer", 64, 0, 1e-2, val=0.30, test=0.25)
    row = summarize(load_study([tmp_path]), load_grid(PRESET, ONE_LR_SEED)).iloc[0]
    assert (row["chosen_lr"], row["lrs_tried"], row["test_acc_median"]) == (1e-2, 2, 0.25)
    Progress(total_runs=2).report(StudyPoint(64, 0, 3.16e-2, 1), ["performer"], tmp_path, "ok")
    assert "performer: diverged at step 300 (no accuracy)" in capsys.readouterr().out


def test_later_seeds_run_only_at_the_lr_their_first_seed_chose(study: Path) -> None:
    grid = load_grid(PRESET, ONE_LR_SEED)
    tasks = dict(seed_tasks(grid, load_study([study]), study, ["elu", "softmax", "taylor"], [2, 3]))
    assert StudyPoint(16, 3, 3e-3, 2) not in tasks  # elu seeds 2 and 3 already ran
    assert tasks[StudyPoint(32, 3, 3e-3, 2)] == ["taylor"]
    assert tasks[StudyPoint(16, 0, 3e-3, 3)] == ["softmax"]
    assert all(point.lr == 3e-3 for point in tasks)


def test_the_lr_is_chosen_on_two_seeds_median_not_on_one(tmp_path: Path) -> None:
    fake_run(tmp_path, "elu", 16, 3, 1e-3, val=0.80, test=0.80, seed=1)
    fake_run(tmp_path, "elu", 16, 3, 1e-3, val=0.20, test=0.20, seed=2)
    fake_run(tmp_path, "elu", 16, 3, 1e-2, val=0.70, test=0.70, seed=1)
    fake_run(tmp_path, "elu", 16, 3, 1e-2, val=0.60, test=0.60, seed=2)
    fake_run(tmp_path, "elu", 16, 3, 1e-2, val=0.99, test=0.99, seed=3)  # not an lr seed
    runs = load_study([tmp_path])
    grid = load_grid(PRESET)
    summary = summarize(runs, grid).iloc[0]
    assert summary["chosen_lr"] == 1e-2  # seed 1 alone would choose 1e-3
    assert summary["lr_chosen_on"] == "seeds 1, 2" and summary["seeds"] == 3


def test_points_whose_seeds_split_get_more_seeds_the_others_do_not(tmp_path: Path) -> None:
    grid = load_grid(PRESET, ["study.lrs=[1e-2]"])
    for seed, test in zip(range(1, 6), (0.99, 0.95, 0.20, 0.99, 0.99), strict=True):
        fake_run(tmp_path, "elu", 16, 3, 1e-2, val=test, test=test, seed=seed)  # 4 of 5
        fake_run(tmp_path, "taylor", 16, 3, 1e-2, val=0.99, test=0.99, seed=seed)  # 5 of 5
    fake_run(tmp_path, "softmax", 16, 3, 1e-2, val=0.99, test=0.99, seed=1)  # 1 of 1 so far
    assert split_points(load_study([tmp_path]), grid) == {("elu", 3, 16)}
    runs = load_study([tmp_path])
    tasks = seed_tasks(grid, runs, tmp_path, ["elu", "taylor", "softmax"], grid["more_seeds"],
                       only=split_points(runs, grid))
    assert sorted(point.seed for point, _ in tasks) == grid["more_seeds"]
    assert all(names == ["elu"] for _, names in tasks)


def test_progress_prints_one_line_per_run_with_its_result_and_an_eta(
    study: Path, capsys: pytest.CaptureFixture
) -> None:
    progress = Progress(total_runs=4)
    progress.report(StudyPoint(16, 3, 3e-3, 1), ["elu", "softmax"], study, "ok")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[1/4] d16_conv3_lr3.00e-03_seed1/elu: test 85.0%, val 90.0%")
    assert "ETA" in lines[0] and "console.log" in lines[1]  # softmax has no run there



def test_report_writes_csvs_table_and_a_four_panel_figure(study: Path, tmp_path: Path) -> None:
    script = load_script("scripts/mqar_study.py")
    out = tmp_path / "out"
    assert script.main(["--preset", PRESET, "--root", str(study), "--report-only",
                        "--out", str(out), *ONE_LR_SEED]) == 0
    summary = pd.read_csv(out / "mqar_state_size.csv")
    assert len(summary) == 3 and len(pd.read_csv(out / "mqar_state_size_runs.csv")) == 8
    table = (out / "mqar_state_size.md").read_text()
    assert "PARTIAL" in table  # softmax at d16 without conv has 1 of 4 lrs
    # What the grid still lacks: whole variants, then per variant the convs and widths left.
    assert "cosFormer;" in table and "elu+1 conv 3 at d=32, 64 and without conv;" in table
    assert "every lr at seed 1;" in table
    assert "| elu+1 | 3 | 85.0 (1/3) | – |" in table
    assert table.index("| softmax |") < table.index("| elu+1 |")  # registry order
    width, height = Image.open(out / "mqar_state_size.png").size
    # Two columns (short conv on, off) and two rows (accuracy; the success rate's interval).
    assert width > height > 800
    records = json.loads((out / "provenance.json").read_text())
    assert set(records) == {f"mqar_state_size{s}" for s in ("_runs.csv", ".csv", ".md", ".png")}
    assert "--report-only" in records["mqar_state_size.csv"]["command"]


def test_missing_study_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no summary\.json"):
        load_study([tmp_path])
    with pytest.raises(ValueError, match="no `study:` block"):
        load_grid("mqar_cpu")


def test_a_study_resumes_from_the_runs_csv_it_wrote(study: Path, tmp_path: Path) -> None:
    """A study spanning sessions: a fresh machine has only the committed runs CSV."""
    script = load_script("scripts/mqar_study.py")
    first = tmp_path / "first"
    assert script.main(["--preset", PRESET, "--root", str(study), "--report-only",
                        "--out", str(first), *ONE_LR_SEED]) == 0
    archive = first / "mqar_state_size_runs.csv"
    assert set(pd.read_csv(archive)["commit"]) == {"c0ffee"}  # each row names its code
    archived = load_archive(archive, preset_protocol(PRESET))
    empty = tmp_path / "fresh_root"
    done = frozenset(archived["run"])
    assert missing(StudyPoint(16, 3, 3e-3, 1), empty, ["elu", "softmax"], done) == ["softmax"]
    tasks = dict(seed_tasks(load_grid(PRESET, ONE_LR_SEED), study_runs(empty, archived), empty,
                            ["elu", "taylor"], [2, 3]))
    assert tasks[StudyPoint(32, 3, 3e-3, 2)] == ["taylor"]
    assert StudyPoint(16, 3, 3e-3, 2) not in tasks  # elu's seed 2 is in the archive
    assert len(study_runs(empty, archived)) == 8
    second = tmp_path / "second"
    assert script.main(["--preset", PRESET, "--root", str(empty), "--report-only",
                        "--out", str(second), "--resume-from", str(archive), *ONE_LR_SEED]) == 0
    for name in ("mqar_state_size.csv", "mqar_state_size.md"):
        assert (second / name).read_text() == (first / name).read_text()


def test_an_archive_of_another_study_is_refused(study: Path, tmp_path: Path) -> None:
    runs = load_study([study])
    protocol = preset_protocol(PRESET)
    runs.assign(max_steps=600).to_csv(tmp_path / "old.csv", index=False)
    with pytest.raises(ValueError, match=r"old\.csv: run .* has max_steps=600 but the preset"):
        load_archive(tmp_path / "old.csv", protocol)
    runs.drop(columns="commit").to_csv(tmp_path / "older.csv", index=False)
    with pytest.raises(ValueError, match=r"no column 'commit'.*without --resume-from"):
        load_archive(tmp_path / "older.csv", protocol)


def test_the_figure_legend_has_every_attention_once_in_registry_order() -> None:
    """An attention may be drawn in one column only (a layer with its own convolutions in the
    no-conv one; here Taylor in the conv one): the legend, beside the last column, names every
    attention once."""
    points = [("softmax", 3), ("softmax", 0), ("elu", 3), ("elu", 0), ("deltanet_layer", 0),
              ("taylor", 3)]
    summary = pd.DataFrame([
        {"attention": name, "short_conv": conv, "d_model": 16, "label": name,
         "state_size": 512, "state_kind": "recurrent", "chosen_lr": 1e-2,
         "test_acc_median": 0.5, "success_rate": 0.4, "success_ci_low": 0.1,
         "success_ci_high": 0.8} for name, conv in points])
    runs = summary.rename(columns={"chosen_lr": "lr", "test_acc_median": "test_acc"})
    figure = state_size_figure(summary.iloc[::-1], runs)
    legend = [text.get_text() for text in figure.axes[1].get_legend().get_texts()]
    assert legend == ["softmax", "deltanet_layer", "elu", "taylor"]  # conf/attention/'s order


def test_the_figure_says_once_which_width_each_point_is() -> None:
    """Each line's points are its widths in state-size order; the caption says so, instead of
    a label per point that piled up where a dozen attentions share a state size."""
    summary = pd.DataFrame([
        {"attention": name, "short_conv": 3, "d_model": width, "label": name,
         "state_size": 32 * width, "state_kind": "recurrent", "chosen_lr": 1e-2,
         "test_acc_median": 0.5, "success_rate": 0.4, "success_ci_low": 0.1,
         "success_ci_high": 0.8} for name in ("elu", "taylor") for width in (32, 16)])
    runs = summary.rename(columns={"chosen_lr": "lr", "test_acc_median": "test_acc"})
    figure = state_size_figure(summary, runs, title="MQAR")
    assert figure._suptitle.get_text() == (
        "MQAR\nd_model 16, 32: each attention's points, left to right")
    assert not [text for ax in figure.axes for text in ax.texts]  # no label per point


def test_the_plan_counts_what_is_left_exactly_where_it_is_known(tmp_path: Path) -> None:
    grid = load_grid(PRESET, ["study.widths=[16]", "study.short_conv=[3]", "study.lrs=[1e-2]",
                              "study.seeds=[1,2,3]", "study.lr_seeds=[1]",
                              "study.more_seeds=[4,5]"])
    names = ["elu", "taylor"]
    before = plan_study(grid, tmp_path, names)
    assert list(zip(before["runs"], before["exact"], strict=True)) == [
        (2, True), (4, False), (4, False)]  # the lr step known; the later ones at most
    assert before["seconds_per_run"].isna().all()  # nothing finished to time
    for name in names:
        fake_run(tmp_path, name, 16, 3, 1e-2, val=0.5, test=0.5, seed=1)
    after = plan_study(grid, tmp_path, names)
    assert list(zip(after["runs"], after["exact"], strict=True)) == [
        (0, True), (4, True), (4, False)]  # the lr is chosen: seeds 2 and 3 of both


def test_the_plan_times_a_column_by_the_mean_duration_of_its_finished_runs(
        tmp_path: Path) -> None:
    """The runs left take about their number times the mean duration: a median would follow
    the early-stopped runs and put a column of runs that train every step far too low."""
    grid = load_grid(PRESET, ["study.widths=[16,32,64]", "study.short_conv=[0,3]",
                              "study.lrs=[1e-2]", "study.seeds=[1,2,3]", "study.lr_seeds=[1]"])
    for seed, seconds in ((1, 10.0), (2, 20.0), (3, 150.0)):
        summary = fake_run(tmp_path, "elu", 16, 3, 1e-2, val=0.5, test=0.5,
                           seed=seed) / "summary.json"
        summary.write_text(json.dumps(json.loads(summary.read_text()) | {"duration_s": seconds}))
    summary = fake_run(tmp_path, "elu", 32, 0, 1e-2, val=0.5, test=0.5) / "summary.json"
    summary.write_text(json.dumps(json.loads(summary.read_text()) | {"duration_s": 400.0}))
    plan = plan_study(grid, tmp_path, ["elu"]).drop_duplicates(["d_model", "short_conv"])
    columns = zip(plan["d_model"], plan["short_conv"], strict=True)
    seconds = dict(zip(columns, plan["seconds_per_run"], strict=True))
    assert seconds[(16, 3)] == pytest.approx(60.0)  # the mean; the median is 20
    assert seconds[(16, 0)] == pytest.approx(60.0)  # no run in the column: its width's
    assert seconds[(32, 0)] == pytest.approx(400.0)
    assert seconds[(32, 3)] == pytest.approx(400.0)
    assert seconds[(64, 3)] == pytest.approx(145.0)  # no run at the width: all of them


def test_no_published_study_row_with_a_window_covering_its_sequence_is_a_fixed_state() -> None:
    runs = pd.read_csv(REPO_ROOT / "docs" / "results" / "mqar_state_size_runs.csv")
    windowed = runs[runs["attention"].isin(["swa", "based_layer"])]
    assert len(windowed) and (windowed["state_kind"] == "recurrent").all()
    for row in windowed.itertuples():
        window = [o for o in train_overrides(row.command) if o.startswith("attention.window=")]
        assert window and int(window[0].split("=")[1]) < row.seq_len, row.command
