"""The self-pretraining studies (linarena.studies.spt, spt_runs, spt_plan, spt_statistics,
spt_report, spt_study): declared and listed by scripts/study.py; spt/listops_small fine-tunes as
the published sweep trained; the pairs are the sweep's tests, reproducing its published pairs; a
tiny study end to end (2 attentions x 1 seed, a few steps of tiny generated ListOps) writes its
runs CSV, tables, pairs, figure and provenance; called again, or from its runs CSV in an empty
folder, it trains nothing; a study short of runs says PARTIAL, and --plan counts what is left."""

from __future__ import annotations

import json
import os
from pathlib import Path

import hydra
import numpy as np
import pandas as pd
import pytest
import torch
from helpers.paths import REPO_ROOT, load_script
from helpers.training import train_env
from omegaconf import OmegaConf
from PIL import Image

from linarena.data.listops import VOCAB_SIZE, ListOpsDataModule
from linarena.studies.preset import compose_preset
from linarena.studies.spt import ARMS, SCRATCH, SCRATCH_TOTAL, SPT, arm_overrides, load_protocol
from linarena.studies.spt_baseline import token_counts
from linarena.studies.spt_plan import published_calibration, seconds_per_run
from linarena.studies.spt_predictions import NOT_READ
from linarena.studies.spt_report import spt_figure, study_report
from linarena.studies.spt_runs import (
    Loaded,
    load_archive,
    published_scratch,
    seed_tasks,
    split_attentions,
)
from linarena.studies.spt_statistics import pairs_table, summarize
from linarena.training.summary import SUMMARY_FILE

PUBLISHED = REPO_ROOT / "docs" / "results" / "results_runs.csv"
NAMES = ["elu", "softmax"]
TINY = ["debug=smoke", "trainer.max_steps=2", "pretrain.max_steps=2"]


def composed(preset: str | None, overrides: list[str]) -> dict:
    """The config train.py composes, without the study block (which train.py does not read)."""
    config = OmegaConf.to_container(compose_preset(preset, overrides), resolve=False)
    config.pop("study", None)
    return config


def test_the_studies_are_declared_and_listed(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        load_script("scripts/study.py").main(["--help"])
    listed = capsys.readouterr().out
    assert "spt_listops" in listed and "spt_pathfinder" in listed


def test_spt_listops_fine_tunes_as_the_published_sweep() -> None:
    """The scratch arm is the published sweep's run (the default config at 300 steps); SPT
    differs from it only by its pretraining, scratch_total only by its 600 steps."""
    protocol = load_protocol("spt/listops_small")
    assert (protocol.task, protocol.pretrain_steps, protocol.finetune_steps) == \
        ("listops_small", 300, 300)
    assert protocol.published == PUBLISHED and protocol.threshold is None
    assert len(protocol.seeds) == 10 and "hgrn2_layer" in protocol.attentions
    sweep = composed(None, ["trainer.max_steps=300"])
    preset = "spt/listops_small"
    assert composed(preset, list(arm_overrides(SCRATCH, protocol, []))) == sweep
    spt = composed(preset, list(arm_overrides(SPT, protocol, [])))
    assert spt["pretrain"]["objective"] == "mlm" and spt["pretrain"]["max_steps"] == 300
    assert {**spt, "pretrain": sweep["pretrain"]} == sweep
    total = composed(preset, list(arm_overrides(SCRATCH_TOTAL, protocol, [])))
    assert total["trainer"]["max_steps"] == 600
    assert {**total, "trainer": sweep["trainer"]} == sweep
    # The published rows are the scratch arm: 18 attentions x 10 seeds of one sweep; an
    # attention published later (HGRN2) has none, so the study trains its scratch runs.
    rows = published_scratch(protocol, protocol.attentions)
    assert len(rows) == 180 and set(rows["arm"]) == {SCRATCH}
    assert "hgrn2_layer" not in set(rows["attention"])
    assert rows["commit"].notna().all() and rows["source"].str.contains("results_runs").all()


def test_a_scratch_arm_drops_the_pretraining_overrides() -> None:
    protocol = load_protocol("spt/listops_small", TINY)
    assert (protocol.pretrain_steps, protocol.finetune_steps) == (2, 2)
    given = [*TINY, "study.seeds=[1]"]
    assert arm_overrides(SPT, protocol, given) == tuple(TINY)
    scratch = arm_overrides(SCRATCH, protocol, given)
    assert scratch[0] == "pretrain=none" and "pretrain.max_steps=2" not in scratch
    assert "~pretrain.max_steps" in scratch and "trainer.max_steps=2" in scratch
    total = arm_overrides(SCRATCH_TOTAL, protocol, given)
    assert total[-1] == "trainer.max_steps=4" and "trainer.max_steps=2" not in total


def test_the_pairs_reproduce_the_sweeps_published_pairs() -> None:
    """The study's pairs are the sweep's test (point_pairs.pair_test): on the published rows
    alone, the pairs of attentions within the scratch arm are docs/results/results_pairs.csv's."""
    protocol = load_protocol("spt/listops_small")
    names = [name for name in protocol.attentions if name != "hgrn2_layer"]
    ours = pairs_table(published_scratch(protocol, names), protocol, names)
    ours = ours[ours["comparison"] == f"attentions within {SCRATCH}"]
    published = pd.read_csv(REPO_ROOT / "docs" / "results" / "results_pairs.csv")
    published = published[published["task"] == "listops_small"]
    key = {frozenset(pair): (p, holm) for pair, p, holm in
           zip(zip(published["a"], published["b"], strict=True), published["p"],
               published["p_holm"], strict=True)}
    assert len(ours) == len(key) == 153
    for row in ours.itertuples():
        assert (row.p, row.p_holm) == pytest.approx(key[frozenset((row.attention_a,
                                                                   row.attention_b))])


def test_more_seeds_go_to_every_arm_of_an_attention_that_splits() -> None:
    protocol = load_protocol("spt/pathfinder_small")
    assert protocol.threshold == 0.6 and protocol.chance == 0.5
    assert (protocol.pretrain_steps, protocol.finetune_steps) == (200, 200)
    assert len(protocol.attentions) == 6 and protocol.more_seeds == (6, 7, 8, 9, 10)
    runs = pd.DataFrame([
        {"attention": name, "arm": arm, "seed": seed, "test_acc": acc}
        for name, arm, accuracies in [
            ("elu", SCRATCH, [0.5] * 5), ("elu", SPT, [0.7, 0.5, 0.5, 0.5, np.nan]),
            ("softmax", SCRATCH, [0.5] * 5), ("softmax", SPT, [0.65] * 5)]
        for seed, acc in zip(protocol.seeds, accuracies, strict=True)])
    assert split_attentions(runs, protocol, ["elu", "softmax"]) == ["elu"]
    loaded = Loaded(protocol, ["elu"], published_scratch(protocol, ["elu"]), None)
    tasks = seed_tasks(loaded, protocol.more_seeds, ["elu"], [])
    assert {(point.arm, point.seed) for point, _ in tasks} == \
        {(arm, seed) for arm in ARMS for seed in protocol.more_seeds}


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The tiny study run once: elu (its scratch run published, in a CSV written here) and
    softmax, seed 1, 2 pretraining and 2 fine-tuning steps."""
    tmp = tmp_path_factory.mktemp("spt_study")
    published = pd.read_csv(PUBLISHED)
    published = published[(published["task"] == "listops_small")
                           & (published["attention"] == "elu") & (published["seed"] == 1)]
    published.assign(max_steps=2).to_csv(tmp / "published.csv", index=False)
    overrides = [*TINY, "study.seeds=[1]", f"study.published={tmp / 'published.csv'}"]
    env = train_env(tmp, tmp_path_factory.mktemp("data"))
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        script = load_script("scripts/study.py")
        common = ["spt_listops", "--jobs", "1", "--threads", "1", "--attention", *NAMES, "--"]
        assert script.main([*common[:1], "--root", str(tmp / "root"), "--out", str(tmp / "out"),
                            *common[1:], *overrides]) == 0
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {"tmp": tmp, "overrides": overrides, "common": common, "env": env}


def call(study: dict, arguments: list[str], capsys: pytest.CaptureFixture) -> str:
    """scripts/study.py <common> with `arguments` before the overrides, in the test's
    environment; its console output."""
    capsys.readouterr()
    saved = dict(os.environ)
    os.environ.update(study["env"])
    try:
        common = study["common"]
        code = load_script("scripts/study.py").main(
            [common[0], *arguments, *common[1:-1], "--", *study["overrides"]])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert code == 0
    return capsys.readouterr().out


def test_a_tiny_study_writes_its_runs_tables_pairs_and_figure(tiny_study: dict) -> None:
    out = tiny_study["tmp"] / "out"
    runs = pd.read_csv(out / "spt_listops_runs.csv")
    assert sorted(zip(runs["arm"], runs["attention"], strict=True)) == \
        sorted((arm, name) for arm in ARMS for name in NAMES)
    published = runs[runs["origin"] == "published"]
    assert list(zip(published["arm"], published["attention"], strict=True)) == \
        [(SCRATCH, "elu")]
    trained = runs[runs["origin"] == "study"]
    assert trained["commit"].notna().all() and trained["cpu"].notna().all()
    assert trained["command"].str.contains("train.py experiment=spt/listops_small").all()
    spt = trained[trained["arm"] == SPT]
    assert (spt["pretrain_steps"] == 2).all() and spt["pretrain_test_acc"].notna().all()
    assert set(trained.loc[trained["arm"] == SCRATCH_TOTAL, "finetune_steps"]) == {4}
    summary = pd.read_csv(out / "spt_listops.csv")
    assert len(summary) == len(ARMS) * len(NAMES) and (summary["n"] == 1).all()
    pairs = pd.read_csv(out / "spt_listops_pairs.csv")
    assert {"spt vs scratch: equal fine-tuning steps", "spt vs scratch_total: equal total steps",
            "attentions within spt"} <= set(pairs["comparison"])
    assert set(pairs["test"]) == {"permutation"}
    caption = (out / "spt_listops.md").read_text()
    assert "Prediction, stated" in caption and "PARTIAL" not in caption
    verdicts = pd.read_csv(out / "spt_listops_verdicts.csv")
    assert list(verdicts["clause"]) == ["spread", "pairs", "raises", "matched"]
    assert NOT_READ not in set(verdicts["verdict"])
    assert "**The prediction, clause by clause** (spt_listops_verdicts.csv)" in caption
    with Image.open(out / "spt_listops.png") as image:
        assert image.width > 400
    provenance = json.loads((out / "provenance.json").read_text())
    for suffix in ("_runs.csv", ".csv", "_pairs.csv", "_spread.csv", "_verdicts.csv", ".md",
                   ".png"):
        assert "scripts/study.py spt_listops" in provenance[f"spt_listops{suffix}"]["command"]


def test_a_resumed_study_trains_nothing(tiny_study: dict, capsys: pytest.CaptureFixture) -> None:
    tmp = tiny_study["tmp"]
    summaries = sorted((tmp / "root").glob(f"*/seed*/*/{SUMMARY_FILE}"))
    assert len(summaries) == 5
    times = [path.stat().st_mtime_ns for path in summaries]
    output = call(tiny_study, ["--root", str(tmp / "root"), "--out", str(tmp / "again")],
                  capsys)
    assert "0 runs to go" in output
    assert [path.stat().st_mtime_ns for path in summaries] == times
    # Another session: an empty folder, the runs CSV committed.
    runs_csv = tmp / "out" / "spt_listops_runs.csv"
    output = call(tiny_study, ["--root", str(tmp / "elsewhere"), "--out", str(tmp / "resumed"),
                               "--resume-from", str(runs_csv)], capsys)
    assert "5 runs of this study count as finished" in output and "0 runs to go" in output
    assert not (tmp / "elsewhere").exists()
    resumed = pd.read_csv(tmp / "resumed" / "spt_listops_runs.csv")
    assert sorted(resumed["run"]) == sorted(pd.read_csv(runs_csv)["run"])


def test_a_study_short_of_runs_is_partial_and_planned(tiny_study: dict,
                                                      capsys: pytest.CaptureFixture) -> None:
    tmp = tiny_study["tmp"]
    tiny_study = {**tiny_study, "overrides": [o.replace("study.seeds=[1]", "study.seeds=[1,2]")
                                              for o in tiny_study["overrides"]]}
    output = call(tiny_study, ["--root", str(tmp / "root"), "--plan"], capsys)
    assert "left: 6 runs, about" in output and "CPU-hours" in output
    call(tiny_study, ["--root", str(tmp / "root"), "--out", str(tmp / "partial"),
                      "--report-only"], capsys)
    caption = (tmp / "partial" / "spt_listops.md").read_text()
    assert "PARTIAL: 6 of 12 runs finished" in caption


def test_an_archived_run_of_another_protocol_is_refused(tiny_study: dict, tmp_path: Path) -> None:
    runs = pd.read_csv(tiny_study["tmp"] / "out" / "spt_listops_runs.csv")
    runs.loc[runs["arm"] == SPT, "pretrain_steps"] = 300
    runs.to_csv(tmp_path / "other_runs.csv", index=False)
    protocol = load_protocol("spt/listops_small", TINY)
    with pytest.raises(ValueError, match=r"has task listops_small, 300 pretraining and 2 "
                                         r"fine-tuning steps, but this study's spt arm trains"):
        load_archive(tmp_path / "other_runs.csv", protocol)


def test_the_plan_times_a_run_from_comparable_runs() -> None:
    """A run's seconds: its attention's runs in this study, by steps; else the published runs'
    seconds per step, scaled by how much slower this study's runs are than the published."""
    protocol = load_protocol("spt/listops_small")
    runs = pd.DataFrame([
        {"arm": SCRATCH, "attention": "elu", "origin": "published", "total_steps": 300,
         "duration_s": 30.0},
        {"arm": SCRATCH, "attention": "softmax", "origin": "published", "total_steps": 300,
         "duration_s": 60.0},
        {"arm": SPT, "attention": "elu", "origin": "study", "total_steps": 600,
         "duration_s": 120.0}])
    assert published_calibration(runs) == 2.0
    assert seconds_per_run(runs, protocol, SPT, "elu", 2.0) == 120.0
    assert seconds_per_run(runs, protocol, SCRATCH_TOTAL, "elu", 2.0) == pytest.approx(120.0)
    assert seconds_per_run(runs, protocol, SPT, "softmax", 2.0) == pytest.approx(240.0)


def test_a_diverged_run_is_counted_and_said_where_it_diverged(tiny_study: dict,
                                                              tmp_path: Path) -> None:
    """A run without accuracy is no dot and no term of the mean: the cell, the caption and the
    figure say that it diverged, and in which stage."""
    runs = pd.read_csv(tiny_study["tmp"] / "out" / "spt_listops_runs.csv")
    diverged = (runs["arm"] == SPT) & (runs["attention"] == "softmax")
    runs.loc[diverged, ["test_acc", "failed", "total_steps"]] = [np.nan, True, 1]
    protocol = load_protocol("spt/listops_small", [*TINY, "study.seeds=[1]"])
    baseline = pd.read_csv(tiny_study["tmp"] / "out" / "spt_listops_masked_baseline.csv")
    report = study_report("spt_listops", protocol, NAMES, runs, baseline)
    caption = report.outputs[".md"]
    row = next(line for line in caption.splitlines() if line.startswith("| softmax |"))
    assert row.split(" | ")[2] == "– (1 diverged)"
    assert ("**1 runs diverged**" in caption
            and "softmax, SPT, 2 + 2 steps, seed 1 (pretraining, by step 1)" in caption)
    figure = spt_figure(summarize(runs, protocol, NAMES), runs, protocol, NAMES, "heading")
    assert [text.get_text() for text in figure.axes[0].texts] == ["×1"]


def test_the_masked_token_accuracy_is_read_against_the_commonest_token(tiny_study: dict) -> None:
    """The baseline counts the real tokens the datamodule's batches carry; counted here from the
    cached packed sequences instead (every value a real token), it is the same."""
    out = tiny_study["tmp"] / "out"
    row = pd.read_csv(out / "spt_listops_masked_baseline.csv").iloc[0]
    saved = dict(os.environ)
    os.environ.update(tiny_study["env"])
    try:
        cfg = compose_preset("spt/listops_small", TINY)
        tensors = hydra.utils.instantiate(cfg.data).load_tensors()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    train, test = (torch.bincount(tensors[f"{split}/values"].long(), minlength=VOCAB_SIZE)
                   for split in ("train", "test"))
    assert train[0] == 0 and test[0] == 0  # no padding id among the stored tokens
    token = int(train.argmax())
    assert (row["token_id"], row["token_class"]) == (token, token - 1)
    assert row["train_real_tokens"] == train.sum() and row["test_real_tokens"] == test.sum()
    assert row["train_share"] == pytest.approx(train[token].item() / train.sum().item(), abs=1e-12)
    assert row["test_share"] == pytest.approx(test[token].item() / test.sum().item(), abs=1e-12)
    caption = (out / "spt_listops.md").read_text()
    assert f"scores {100 * row['test_share']:.1f}% in expectation" in caption
    assert f"scores {100 * row['neighbours_test_acc']:.1f}% of the" in caption
    # The ceiling: per kind, the test count of the training's commonest token of that kind.
    hits = 0
    for kind in ListOpsDataModule.independent_token_kinds:
        commonest = kind[int(torch.stack([train[token] for token in kind]).argmax())]
        hits += int(test[commonest])
    assert row["kind_ceiling_test_acc"] == pytest.approx(hits / test.sum().item(), abs=1e-12)
    assert f"that kind: it scores {100 * row['kind_ceiling_test_acc']:.1f}%." in caption


def test_the_token_counts_skip_padding() -> None:
    tokens = torch.tensor([[3, 3, 2, 0, 0], [1, 3, 0, 0, 0]])
    loader = [{"tokens": tokens, "mask": tokens != 0}, {"tokens": tokens[:1, :2],
                                                        "mask": torch.tensor([[True, False]])}]
    assert token_counts(loader, 5).tolist() == [0, 1, 1, 4, 0]
