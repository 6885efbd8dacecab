"""The MQAR mixture as a study (linarena.studies.mixture_study): its grid (positions none and
rope, seeds, more seeds where they split), one folder per (positions, seed) and attention,
layers with their own convolutions run without the preset's, resumable like every study."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from helpers.paths import load_script
from omegaconf import OmegaConf

from linarena.studies import mixture_study
from linarena.studies.mixture import split_rows
from linarena.studies.mixture_study import (
    MixturePoint,
    load_archive,
    load_mixture_grid,
    mixture_runs,
    own_conv_entries,
    report_config,
    run_mixture,
    study_overrides,
)
from linarena.studies.study import missing

PRESET = "mqar_mixture_cpu"


def test_the_grid_is_positions_none_and_rope_five_seeds_ten_where_split() -> None:
    grid = load_mixture_grid(PRESET)
    assert grid == {"positions": ["none", "rope"], "seeds": [1, 2, 3, 4, 5],
                    "more_seeds": [6, 7, 8, 9, 10]}
    with pytest.raises(ValueError, match="no `study:` block with positions and seeds"):
        load_mixture_grid("mqar_cpu")
    with pytest.raises(ValueError, match=r"more_seeds=\[5\] repeats"):
        load_mixture_grid(PRESET, ["study.more_seeds=[5]"])


def test_a_point_trains_its_attentions_with_its_positions_into_their_folders(tmp_path: Path
                                                                            ) -> None:
    point = MixturePoint("rope", 3)
    names = ["elu", "deltanet_layer"]
    plain, layer = point.commands(PRESET, names, tmp_path, own_conv_entries(names))
    assert {f"experiment={PRESET}", "attention=elu", "model.positions=rope", "seed=3",
            f"hydra.sweep.dir={tmp_path / 'rope_seed3'}"} <= set(plain)
    # The layer owns its convolutions: the preset's short conv 3 would be a second one.
    assert {"attention=deltanet_layer", "model.short_conv=0"} <= set(layer)
    assert "model.short_conv=0" not in plain
    (tmp_path / "rope_seed3" / "elu").mkdir(parents=True)
    (tmp_path / "rope_seed3" / "elu" / "summary.json").write_text("{}")
    assert missing(point, tmp_path, names) == ["deltanet_layer"]  # resumable


def test_only_an_attention_and_positions_whose_seeds_split_gets_more_seeds() -> None:
    rows = [{"attention": "elu", "positions": "none", "length": 256, "pairs": 64, "seed": s,
             "acc": acc} for s, acc in zip(range(1, 6), (0.95, 0.2, 0.2, 0.2, 0.2), strict=True)]
    rows += [{"attention": "elu", "positions": "rope", "length": 256, "pairs": 64, "seed": s,
              "acc": 0.2} for s in range(1, 6)]
    rows += [{"attention": "elu", "positions": "rope", "length": 256, "pairs": 64, "seed": 6,
              "acc": 0.99}]  # a later seed does not make the first five split
    assert split_rows(pd.DataFrame(rows), [1, 2, 3, 4, 5]) == {("elu", "none")}


def mixture_run(root: Path, positions: str, seed: int, attention: str, long: float,
                extra: tuple[str, ...] = ()) -> None:
    """A finished run folder as the study writes it: summary.json with the preset's settings
    and per-setting accuracies (`long` beyond the training lengths), and the Hydra overrides."""
    folder = root / MixturePoint(positions, seed).folder_name / attention
    (folder / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(study_overrides(PRESET, attention, positions, seed, extra)),
                   folder / ".hydra" / "overrides.yaml")
    config = report_config(PRESET)
    config["model"] |= {"positions": positions, "short_conv": 3}
    metrics = {f"test/acc_L{length}_P{pairs}": 0.99 if length <= 64 else long
               for length, pairs in ((32, 4), (64, 8), (64, 16), (128, 32), (256, 64))}
    (folder / "summary.json").write_text(json.dumps(
        {"schema_version": 2, "task": "mqar_mixture", "attention": attention, "seed": seed,
         "metrics": metrics, "config": config, "commit": "c0ffee"}))


def write_report(runs_root: Path, out: Path, *more: str) -> list[str]:
    """scripts/mqar_mixture.py --report-only on `runs_root`; the files it wrote, as text."""
    script = load_script("scripts/mqar_mixture.py")
    assert script.main(["--report-only", "--root", str(runs_root), "--out", str(out), *more]) == 0
    return [(out / name).read_text() for name in
            ("mqar_mixture_runs.csv", "mqar_mixture.csv", "mqar_mixture.md")]


def test_the_report_is_written_again_from_the_committed_runs_csv_alone(tmp_path: Path) -> None:
    """A study whose run folders are gone (another machine, a new checkout) resumes from its
    runs CSV: the same report, to the byte."""
    root = tmp_path / "runs"
    for seed, long in ((1, 0.95), (2, 0.30)):
        mixture_run(root, "none", seed, "elu", long)
        mixture_run(root, "rope", seed, "deltanet_layer", 0.10)
    first = write_report(root, tmp_path / "first")
    archive = tmp_path / "first" / "mqar_mixture_runs.csv"
    assert write_report(tmp_path / "gone", tmp_path / "again",
                        "--resume-from", str(archive)) == first
    # A folder found again wins over its archived row; the others are kept.
    mixture_run(tmp_path / "new", "none", 3, "elu", 0.97)
    runs, _ = mixture_runs(tmp_path / "new", PRESET, load_archive(archive, PRESET))
    assert sorted(set(zip(runs["positions"], runs["seed"], strict=True))) == [
        ("none", 1), ("none", 2), ("none", 3), ("rope", 1), ("rope", 2)]


def test_an_archived_run_trained_another_way_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    mixture_run(root, "none", 1, "elu", 0.95)
    mixture_run(root, "none", 2, "elu", 0.95, extra=("optim.lr=0.01",))
    write_report(root, tmp_path / "out")
    with pytest.raises(ValueError, match=r"run none_seed2/elu was trained by .*optim\.lr=0\.01.*"
                                         r"belongs to another preset or settings"):
        load_archive(tmp_path / "out" / "mqar_mixture_runs.csv", PRESET)
    # Resumed with that override, the other run is the odd one.
    with pytest.raises(ValueError, match=r"run none_seed1/elu was trained by "):
        load_archive(tmp_path / "out" / "mqar_mixture_runs.csv", PRESET, ["optim.lr=0.01"])


def test_archived_runs_are_not_trained_again(tmp_path: Path, monkeypatch) -> None:
    trained: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(mixture_study, "run_tasks", lambda todo, *args, **kwargs: trained.extend(
        (point.folder_name, names) for point, names in todo))
    root = tmp_path / "runs"
    mixture_run(root, "none", 1, "elu", 0.95)
    mixture_run(root, "none", 2, "elu", 0.30)  # seeds 1 and 2 split: seed 3 is wanted
    write_report(root, tmp_path / "out")
    archived = load_archive(tmp_path / "out" / "mqar_mixture_runs.csv", PRESET)
    run_mixture(PRESET, tmp_path / "elsewhere", ["elu"], extra=["study.seeds=[1,2]",
                                                                "study.more_seeds=[3]"],
                archived=archived)
    assert trained == [("rope_seed1", ["elu"]), ("rope_seed2", ["elu"]),
                       ("none_seed3", ["elu"])]


def test_the_caption_says_what_is_new_beyond_the_training_lengths(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    mixture_run(root, "none", 1, "elu", 0.95)
    mixture_run(root, "rope", 1, "elu", 0.10)
    text = write_report(root, tmp_path / "out")[2]
    assert ("†: the length is beyond the longest training length (64): with positions none, the "
            "model meets sequences longer than any it trained on; with rope, positions it never "
            "trained on too." in text)
