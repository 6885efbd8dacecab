"""The Quick start's timing is a published result (docs/results/default_run.csv), not a number
typed into the README: scripts/maintainer/default_run.py runs train.py from nothing and
records what it measured, and the README's table is made from that file."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from helpers.paths import load_script

from linarena.analysis.provenance import load
from linarena.reports.results_tables import render


def test_the_default_run_is_timed_from_nothing_and_published_with_its_provenance(
        tmp_path: Path) -> None:
    out = tmp_path / "results"
    script = load_script("scripts/maintainer/default_run.py")
    assert script.main(["--out", str(out), "debug=smoke"]) == 0
    row = pd.read_csv(out / "default_run.csv").iloc[0]
    assert row["command"] == "python train.py debug=smoke"
    assert (row["task"], row["attention"], row["steps"]) == ("listops_small", "softmax", 4)
    # The whole process: its imports alone take seconds and hundreds of MB.
    assert row["wall_s"] > 1 and row["peak_rss_mb"] > 100 and row["tokens_per_sec"] > 0
    assert 0 <= row["test_acc_pct"] <= 100 and row["load_avg_1min_before"] >= 0
    record = load(out)["default_run.csv"]
    assert record["command"].endswith("default_run.py --out " + str(out) + " debug=smoke")
    table = render("default_run", out)
    assert "| `python train.py debug=smoke` |" in table
    assert f"| {row['peak_rss_mb']:.0f} |" in table


def test_a_failed_run_publishes_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "results"
    script = load_script("scripts/maintainer/default_run.py")
    assert script.main(["--out", str(out), "attention=no_such_attention"]) == 1
    assert "python train.py attention=no_such_attention failed" in capsys.readouterr().err
    assert not out.exists()
