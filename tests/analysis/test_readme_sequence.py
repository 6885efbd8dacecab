"""The README's sequence of commands, shrunk to tiny runs, ends in a working comparison:
scripts/compare.py --runs outputs/ after a single run, a second attention, a sweep, an Optuna
search and the debug presets (which it leaves out)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers.training import REPO, run_train

# The README's commands keep their own overrides; these only shrink each run to seconds.
TINY = ["model.d_model=32", "model.num_heads=2", "model.num_layers=1", "model.mlp_dim=64",
        "data.num_train=64", "data.num_val=16", "data.num_test=16", "data.generator_workers=1",
        "data.batch_size=4", "trainer.max_steps=4", "trainer.val_check_interval=2",
        "trainer.limit_val_batches=2", "trainer.limit_test_batches=2", "logger=none",
        "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]
README_COMMANDS = [
    [],                                                    # python train.py
    ["attention=performer"],
    ["-m", "attention=softmax,elu", "seed=1,2"],           # a sweep
    ["hparams_search=optuna", "attention=performer", "hydra.sweeper.n_trials=2",
     "hydra.sweeper.sampler.n_startup_trials=2"],
    ["debug=smoke"],
    ["debug=fdr"],
]


@pytest.mark.slow
def test_compare_works_on_the_folder_the_readme_sequence_leaves(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    for command in README_COMMANDS:
        result = run_train([*command, *TINY], tmp_path, data_dir)
        assert result.returncode == 0, (command, result.stderr[-3000:])
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "outputs").rglob("summary.json")]
    assert sum(s["debug"] for s in summaries) == 2 and len(summaries) == 1 + 1 + 4 + 2 + 2

    out = tmp_path / "compare"
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "compare.py"), "--runs",
         str(tmp_path / "outputs"), "--out", str(out)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(out / "results.csv")
    assert set(table["task"]) == {"listops_small"}
    assert table["n"].sum() == 8  # every run but the two debug ones
    sweep = next(s for s in table["sweep"] if s.startswith("multiruns/"))
    seeds = table[table["sweep"] == sweep].set_index("attention")["n"]
    assert seeds.to_dict() == {"softmax": 2, "elu": 2}  # the sweep's seeds, together
    single = table[table["sweep"].str.startswith("runs")]
    assert set(single["attention"]) == {"softmax", "performer"}  # side by side
    assert "Sweeps (pick some with --sweep LABEL" in result.stdout

    picked = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "compare.py"), "--runs",
         str(tmp_path / "outputs"), "--out", str(out), "--sweep", sweep],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert picked.returncode == 0, picked.stderr
    assert set(pd.read_csv(out / "results.csv")["sweep"]) == {sweep}
