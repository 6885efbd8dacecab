"""The MQAR mixture report (linarena.studies.mixture and mixture_report, scripts/mqar_mixture.py):
accuracy per test setting over seeds, † beyond the training lengths, registry order, no pooling of
different mixtures, the files written and the README table made from them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from helpers.paths import load_script
from helpers.training import compose_config
from omegaconf import OmegaConf

from linarena.analysis.provenance import load
from linarena.analysis.statistics import wilson_interval
from linarena.attention.variants import label, variant_names
from linarena.reports.results_tables import STAGES, TABLES, render
from linarena.studies.mixture import load_runs, summarize
from linarena.studies.mixture_report import accuracy_table, caption, short_conv_text
from linarena.training.run import train

PRESET = "mqar_mixture_cpu"


@pytest.fixture(scope="module")
def preset_config() -> dict:
    """The parts of the preset's resolved config the report reads (the real mixture)."""
    cfg = compose_config([f"experiment={PRESET}"])
    return {"data": {"train": OmegaConf.to_container(cfg.data.train),
                     "test": OmegaConf.to_container(cfg.data.test),
                     "vocab_size": cfg.data.vocab_size},
            "model": {"d_model": cfg.model.d_model, "num_layers": cfg.model.num_layers,
                      "positions": cfg.model.positions, "short_conv": cfg.model.short_conv},
            "optim": {"lr": cfg.optim.lr}, "trainer": {"max_steps": cfg.trainer.max_steps},
            "callbacks": {"early_stopping": OmegaConf.to_container(
                cfg.callbacks.early_stopping)}}


def fake_run(root: Path, job: str, attention: str, seed: int, accuracies: dict[str, float | None],
             config: dict, debug: bool = False) -> Path:
    """A run folder with a summary.json as train.py writes it for the mixture preset."""
    folder = root / job
    folder.mkdir(parents=True)
    metrics = {"test/acc": 0.5, **{f"test/acc_{name}": acc for name, acc in accuracies.items()}}
    (folder / "summary.json").write_text(json.dumps(
        {"schema_version": 2, "task": "mqar_mixture", "attention": attention, "seed": seed,
         "debug": debug, "metrics": metrics, "config": config, "commit": f"{seed:040d}"}))
    return folder


def accuracies(short: float, long: float | None) -> dict[str, float | None]:
    """Every test setting of the CPU preset: `short` within the training lengths, `long` at
    lengths 128 and 256 (None: the run diverged there)."""
    return {"L32_P4": short, "L64_P8": short, "L64_P16": short, "L128_P32": long,
            "L256_P64": long}


@pytest.fixture()
def runs_root(tmp_path: Path, preset_config: dict) -> Path:
    root = tmp_path / "mqar_mixture"
    # Folder order is not registry order: the report must sort.
    fake_run(root, "0_taylor_s1", "taylor", 1, accuracies(0.95, 0.30), preset_config)
    fake_run(root, "1_elu_s1", "elu", 1, accuracies(0.99, 0.95), preset_config)
    fake_run(root, "2_elu_s2", "elu", 2, accuracies(0.97, 0.40), preset_config)
    fake_run(root, "3_elu_s3", "elu", 3, accuracies(0.98, 0.92), preset_config)
    fake_run(root, "4_softmax_s1", "softmax", 1, accuracies(1.0, 0.10), preset_config)
    fake_run(root, "5_softmax_s2", "softmax", 2, accuracies(1.0, None), preset_config)  # diverged
    fake_run(root, "6_elu_s9", "elu", 9, accuracies(0.0, 0.0), preset_config, debug=True)
    return root


def test_median_range_and_seeds_that_recall_per_setting(runs_root: Path) -> None:
    runs, _ = load_runs([runs_root])
    assert len(runs) == 6 * 5  # the debug run is left out; a row per run and test setting
    assert runs.loc[runs["seed"] == 2, "commit"].eq(f"{2:040d}").all()
    summary = summarize(runs).set_index(["attention", "length", "pairs"])
    elu_long = summary.loc[("elu", 256, 64)]
    assert elu_long["seeds"] == 3 and elu_long["recalled"] == 2  # 0.95, 0.40, 0.92
    assert elu_long["test_acc_median"] == pytest.approx(0.92)
    assert (elu_long["test_acc_min"], elu_long["test_acc_max"]) == pytest.approx((0.40, 0.95))
    assert summary.loc[("elu", 64, 8), "recalled"] == 3
    # A diverged seed counts among the seeds, never as recalling, and not in the median.
    softmax_long = summary.loc[("softmax", 256, 64)]
    assert (softmax_long["seeds"], softmax_long["failed"], softmax_long["recalled"]) == (2, 1, 0)
    assert softmax_long["test_acc_median"] == pytest.approx(0.10)
    table = accuracy_table(summarize(runs))
    assert (f"| {label('elu')} | sinusoidal | 98.0 (3/3) | 98.0 (3/3) | 98.0 (3/3) | "
            "92.0 (2/3) | 92.0 (2/3) |") in table
    assert (f"| {label('softmax')} | sinusoidal | 100.0 (2/2) | 100.0 (2/2) | 100.0 (2/2) | "
            "10.0 (0/2) |") in table


def test_each_setting_carries_the_success_rate_with_its_wilson_interval(runs_root: Path) -> None:
    summary = summarize(load_runs([runs_root])[0]).set_index(["attention", "length", "pairs"])
    elu_long = summary.loc[("elu", 256, 64)]
    assert (elu_long["n_seeds"], elu_long["successes"]) == (3, 2)
    assert elu_long["success_rate"] == pytest.approx(2 / 3)
    assert (elu_long["success_ci_low"], elu_long["success_ci_high"]) == wilson_interval(2, 3)
    assert (elu_long["median_acc"], elu_long["min_acc"], elu_long["max_acc"]) == pytest.approx(
        (0.92, 0.40, 0.95))
    softmax_long = summary.loc[("softmax", 256, 64)]  # one of its two seeds diverged
    assert (softmax_long["n_seeds"], softmax_long["successes"]) == (2, 0)
    assert softmax_long["success_ci_high"] == pytest.approx(wilson_interval(0, 2)[1])


def test_lengths_beyond_training_are_marked_and_columns_sorted(runs_root: Path) -> None:
    runs, _ = load_runs([runs_root])
    # The preset trains on lengths 32 and 64: 128 and 256 are beyond.
    assert set(runs[runs["beyond_train"]]["length"]) == {128, 256}
    header = accuracy_table(summarize(runs)).splitlines()[0]
    assert header == ("| attention | positions | L32 P4 | L64 P8 | L64 P16 | L128 P32 † "
                      "| L256 P64 † |")


def test_rows_follow_the_registry_order(runs_root: Path) -> None:
    runs, _ = load_runs([runs_root])
    rows = [line.split(" | ")[0].removeprefix("| ")
            for line in accuracy_table(summarize(runs)).splitlines()[2:]]
    expected = [label(name) for name in variant_names() if name in {"elu", "softmax", "taylor"}]
    assert rows == expected
    assert list(dict.fromkeys(runs["attention"])) == [
        name for name in variant_names() if name in {"elu", "softmax", "taylor"}]


def test_each_kind_of_positions_is_its_own_row_never_pooled(tmp_path: Path,
                                                            preset_config: dict) -> None:
    """Issue #28: the mixture with positions none and rope, per attention."""
    for positions, long in (("none", 0.95), ("rope", 0.20)):
        config = {**preset_config, "model": {**preset_config["model"], "positions": positions}}
        for seed in (1, 2):
            fake_run(tmp_path, f"{positions}_{seed}", "elu", seed, accuracies(0.99, long), config)
    summary = summarize(load_runs([tmp_path])[0]).set_index(["positions", "length"])
    assert summary.loc[("none", 256), "recalled"] == 2 and summary.loc[("none", 256), "seeds"] == 2
    assert summary.loc[("rope", 256), "recalled"] == 0
    table = accuracy_table(summarize(load_runs([tmp_path])[0]))
    assert f"| {label('elu')} | none | 99.0 (2/2)" in table
    assert f"| {label('elu')} | rope | 99.0 (2/2)" in table


def test_runs_of_different_mixtures_are_not_pooled(runs_root: Path, preset_config: dict) -> None:
    other = json.loads(json.dumps(preset_config))
    other["data"]["train"][0]["examples"] = 10
    odd = fake_run(runs_root, "7_elu_s4", "elu", 4, accuracies(0.9, 0.9), other)
    with pytest.raises(ValueError, match=r"different mixtures cannot be pooled: data\.train .*"
                       + re.escape(str(odd))):
        load_runs([runs_root])


def test_no_mixture_run_and_a_repeated_seed_are_clear_errors(tmp_path: Path,
                                                              preset_config: dict) -> None:
    root = tmp_path / "runs"
    fake_run(root, "single", "elu", 1, {}, preset_config)  # a single-setting MQAR run
    fake_run(root, "debug", "elu", 1, accuracies(0.5, 0.5), preset_config, debug=True)
    with pytest.raises(ValueError, match=r"no run with per-setting accuracies .* under "
                       + re.escape(str(root))):
        load_runs([root])
    fake_run(root, "a", "elu", 1, accuracies(0.5, 0.5), preset_config)
    twice = fake_run(root, "b", "elu", 1, accuracies(0.6, 0.6), preset_config)
    with pytest.raises(ValueError, match=r"attention elu with positions sinusoidal, seed 1, "
                                         r"ran twice: .* and "
                       + re.escape(str(twice))):
        load_runs([root])



def test_script_writes_the_three_files_with_provenance_and_the_readme_table(
        runs_root: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "results"
    script = load_script("scripts/mqar_mixture.py")
    assert script.main(["--report-only", "--runs", str(runs_root), "--out", str(out),
                        "--runs-command", "python train.py -m experiment=mqar_mixture_cpu"]) == 0
    names = ["mqar_mixture_runs.csv", "mqar_mixture.csv", "mqar_mixture.md"]
    assert all((out / name).is_file() for name in names)
    records = load(out)
    assert set(records) == set(names)
    assert records["mqar_mixture.md"]["command"] == (
        f"python train.py -m experiment=mqar_mixture_cpu; then python scripts/mqar_mixture.py "
        f"--report-only --runs {runs_root} --out {out} --runs-command "
        "'python train.py -m experiment=mqar_mixture_cpu'")
    text = (out / "mqar_mixture.md").read_text()
    assert "†: the length is beyond the longest training length (64)" in text
    assert ("at most 1,500 steps (early stop at val acc 0.99); seeds [1, 2, 3]; short conv 3 "
            "(model.short_conv)." in text)
    assert "1 run(s) have no accuracy for some setting" in text
    rendered = render("mqar_mixture", out)
    caption = next(line for line in rendered.splitlines() if line.startswith("<sub>"))
    assert "docs/results/mqar_mixture.csv, docs/results/mqar_mixture.md: " in caption
    assert "`python scripts/mqar_mixture.py" in caption and "--runs-command" not in caption
    assert f"commit {records['mqar_mixture.csv']['commit'][:10]}" in caption
    assert "One run: `python train.py experiment=mqar_mixture_cpu attention=" in rendered
    assert "| attention | positions | L32 P4 |" in rendered and "92.0 (2/3)" in rendered
    capsys.readouterr()
    assert script.main(["--report-only", "--runs", str(tmp_path / "nowhere")]) == 2
    assert "mqar_mixture.py: error: --runs" in capsys.readouterr().err


def test_a_table_not_run_yet_says_how_to_make_it(tmp_path: Path) -> None:
    assert set(STAGES) == set(TABLES)
    assert render("mqar_mixture", tmp_path).strip() == (
        "Not run yet (docs/results/mqar_mixture.csv, docs/results/mqar_mixture.md missing): "
        "`bash scripts/maintainer/reproduce_results.sh mixture`")


def test_a_real_run_is_reported(tmp_path: Path) -> None:
    settings = ("data.train=[{length:16,pairs:2,examples:8}]",
                "data.test=[{length:16,pairs:2,examples:2},{length:32,pairs:4,examples:2}]")
    cfg = compose_config([f"experiment={PRESET}", "attention=elu", "logger=none", *settings,
                          "data.max_length=32", "data.num_val=2", "data.batch_size=4",
                          "trainer.max_steps=1", "trainer.val_check_interval=1",
                          f"paths.data_dir={tmp_path / 'data'}"],
                         output_dir=tmp_path / "runs" / "0_elu_s1")
    train(cfg)
    runs, config = load_runs([tmp_path / "runs"])
    assert list(zip(runs["length"], runs["pairs"], runs["beyond_train"], strict=True)) == [
        (16, 2, False), (32, 4, True)]
    assert runs["acc"].between(0, 1).all() and set(runs["attention"]) == {"elu"}
    assert runs["commit"].notna().all()  # the commit that trained it, from summary.json
    assert config["data"]["train"] == [{"length": 16, "pairs": 2, "examples": 8}]


def test_the_caption_says_which_layers_ran_without_the_presets_short_conv() -> None:
    runs = pd.DataFrame({"run": ["a", "a", "b", "c"], "short_conv": [3, 3, 3, 0],
                         "label": ["elu+1", "elu+1", "GLA", "DeltaNet layer"]})
    assert short_conv_text(runs) == ("short conv 3 before each attention (model.short_conv), "
                                      "but none for DeltaNet layer (their own short "
                                      "convolutions instead)")


def test_a_study_short_of_its_seeds_is_marked_partial_and_says_how_n_was_decided(
        tmp_path: Path, preset_config: dict) -> None:
    """The runs' own `study:` block (scripts/mqar_mixture.py's preset) is the protocol: seeds
    1-2 everywhere, seed 3 where those split. A report before the study ends says so."""
    study = {"positions": ["none", "rope"], "seeds": [1, 2], "more_seeds": [3]}

    def config(positions: str) -> dict:
        return preset_config | {"study": study,
                                "model": preset_config["model"] | {"positions": positions}}

    root = tmp_path / "runs"
    fake_run(root, "none_seed1/elu", "elu", 1, accuracies(0.99, 0.95), config("none"))
    fake_run(root, "none_seed2/elu", "elu", 2, accuracies(0.99, 0.30), config("none"))  # split
    fake_run(root, "rope_seed1/elu", "elu", 1, accuracies(0.20, 0.10), config("rope"))
    runs, run_config = load_runs([root])
    text = caption(runs, run_config)
    assert text.startswith("PARTIAL: the study has not finished; rows short of seeds: "
                           "elu+1 none (seeds 3); elu+1 rope (seeds 2).")
    assert ("; seeds [1, 2] for every attention and positions, and [3] where those split at "
            "some test setting (some reached 90% and some did not);" in text)
    fake_run(root, "none_seed3/elu", "elu", 3, accuracies(0.99, 0.20), config("none"))
    fake_run(root, "rope_seed2/elu", "elu", 2, accuracies(0.20, 0.10), config("rope"))
    assert "PARTIAL" not in caption(*load_runs([root]))
