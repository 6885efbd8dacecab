"""A sweep that spans sessions: compare.py --resume-from counts the runs of the runs CSV it wrote
before (linarena.analysis.runs_archive), so a session that lost its run folders publishes the
same table as the one that had them all."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_compare import run_compare, summary

from linarena.analysis.runs import load_local_runs
from linarena.analysis.runs_archive import load_runs_csv

# (attention, seed) -> test accuracy; seed 3 of performer diverged (null, as summary.json has it).
ACCURACIES = {("softmax", 1): 0.91, ("softmax", 2): 0.95, ("softmax", 3): 0.12,
              ("performer", 1): 0.30, ("performer", 2): 0.35, ("performer", 3): None}


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """<sweeps>/mqar/seed<s>/<attention>/summary.json, as scripts/seed_sweep.py lays them out."""
    root = tmp_path / "sweeps"
    for (attention, seed), acc in ACCURACIES.items():
        folder = root / "mqar" / f"seed{seed}" / attention
        folder.mkdir(parents=True)
        run = summary("listops", attention, seed, acc or 0.0, 100.0 * seed, 10.0 + seed)
        run["metrics"]["test/acc"] = acc
        run.update(sweep="sweeps/mqar: trainer.max_steps=300", commit="abc", positions="rope",
                   machine={"cpu": "AMD EPYC", "cpu_kernels": "AVX512"},
                   hparams={"max_steps": 300, "positions": "none"})
        (folder / "summary.json").write_text(json.dumps(run))
    return root


def test_a_runs_csv_reads_back_as_the_runs_it_was_written_from(sweep: Path, tmp_path: Path) -> None:
    assert run_compare("--runs", sweep, "--out", tmp_path / "out") == 0
    archived = load_runs_csv(tmp_path / "out" / "results_runs.csv")
    # A diverged run's row has no metrics (runs_table leaves them blank): it is counted as failed.
    found = [dataclasses.replace(r, metrics=dict.fromkeys(r.metrics)) if r.failed else r
             for r in load_local_runs([sweep], {})]
    assert sorted(archived, key=lambda r: r.source) == sorted(found, key=lambda r: r.source)
    assert [(r.attention, r.seed) for r in archived if r.failed] == [("performer", 3)]


def test_a_sweep_resumed_from_its_runs_csv_publishes_the_same_table(
    sweep: Path, tmp_path: Path
) -> None:
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert run_compare("--runs", sweep, "--out", whole) == 0
    for seed in (1, 3):  # this session lost some run folders: their rows stand in for them
        shutil.rmtree(sweep / "mqar" / f"seed{seed}")
    assert run_compare("--runs", sweep, "--out", resumed,
                       "--resume-from", whole / "results_runs.csv") == 0
    pd.testing.assert_frame_equal(pd.read_csv(resumed / "results.csv"),
                                  pd.read_csv(whole / "results.csv"))
    shutil.rmtree(sweep)  # every run archived, none trained yet in this session
    sweep.mkdir()
    assert run_compare("--runs", sweep, "--out", tmp_path / "none_here",
                       "--resume-from", whole / "results_runs.csv") == 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "none_here" / "results.csv"),
                                  pd.read_csv(whole / "results.csv"))


def test_a_run_found_again_wins_over_its_archived_row(sweep: Path, tmp_path: Path) -> None:
    assert run_compare("--runs", sweep, "--out", tmp_path / "whole") == 0
    path = sweep / "mqar" / "seed2" / "softmax" / "summary.json"
    rerun = json.loads(path.read_text())
    rerun["metrics"]["test/acc"] = 0.99
    path.write_text(json.dumps(rerun))
    out = tmp_path / "resumed"
    assert run_compare("--runs", sweep, "--out", out,
                       "--resume-from", tmp_path / "whole" / "results_runs.csv") == 0
    runs = pd.read_csv(out / "results_runs.csv")
    softmax = runs[runs["attention"] == "softmax"].set_index("seed")
    assert len(runs) == len(ACCURACIES) and softmax.loc[2, "test_acc_pct"] == pytest.approx(99.0)


def test_resume_refuses_filters_and_names_a_damaged_line(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert run_compare("--runs", sweep, "--out", tmp_path / "whole") == 0
    csv = tmp_path / "whole" / "results_runs.csv"
    assert run_compare("--runs", sweep, "--out", tmp_path / "x", "--resume-from", csv,
                       "--filter", "task=listops") == 2
    assert "--filter reads summary.json keys" in capsys.readouterr().err
    lines = csv.read_text().splitlines()
    lines[3] = lines[3].replace("listops", "", 1)
    damaged = tmp_path / "damaged.csv"
    damaged.write_text("\n".join(lines) + "\n")
    assert run_compare("--runs", sweep, "--out", tmp_path / "x", "--resume-from", damaged) == 2
    assert f"{damaged}:4: damaged, no value in column 'task'" in capsys.readouterr().err
