"""scripts/compare.py says what it compares: one label per attention in the table and the plot,
the training steps of every row, a warning when runs of one task trained for different numbers
of steps, and counts in good English (issue #29)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from linarena.analysis import plots
from linarena.analysis.compare import main
from linarena.analysis.order import attention_label


def write_run(root: Path, folder: str, attention: str, seed: int, max_steps: int | None,
              acc: float = 0.5, sweep: str | None = None) -> None:
    """A finished run's summary.json; max_steps None: a summary that does not say."""
    run = root / folder
    run.mkdir(parents=True)
    hparams = {"d_model": 64} | ({} if max_steps is None else {"max_steps": max_steps})
    summary = {"task": "listops", "attention": attention, "seed": seed, "hparams": hparams,
               "metrics": {"test/acc": acc, "perf/tokens_per_sec": 100.0 * seed,
                           "perf/peak_memory_mb": 10.0, "model/params": 1000},
               "global_step": max_steps, "duration_s": 12.0}
    if sweep:
        summary["sweep"] = sweep
    (run / "summary.json").write_text(json.dumps(summary))


def test_table_and_plot_use_one_label_per_attention(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in (1, 2):
        write_run(tmp_path / "runs", f"elu_{seed}", "elu", seed, 300)
        write_run(tmp_path / "runs", f"softmax_{seed}", "softmax", seed, 300)
    names: list[str] = []
    real = plots.Axes.set_yticks

    def recording(self, ticks, labels=None, **kwargs):  # the memory panel's row names
        names.extend(str(label).split(" (n=")[0] for label in labels or ())
        return real(self, ticks, labels, **kwargs)

    monkeypatch.setattr(plots.Axes, "set_yticks", recording)
    out = tmp_path / "out"
    assert main(["--runs", str(tmp_path / "runs"), "--out", str(out)]) == 0
    markdown = (out / "results.md").read_text()
    label = attention_label("elu")
    assert label != "elu" and label in names
    assert f"| listops | {label} | 2 |" in markdown and "| elu |" not in markdown
    assert pd.read_csv(out / "results.csv")["attention"].tolist() == ["softmax", "elu"]


def test_runs_of_one_task_with_different_step_budgets_are_flagged(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "runs"
    write_run(root, "a", "softmax", 1, 600, sweep="runs: trainer.max_steps=600")
    write_run(root, "b", "softmax", 1, 60, sweep="runs: trainer.max_steps=60")
    write_run(root, "c", "elu", 1, None)  # a summary that does not say
    out = tmp_path / "out"
    assert main(["--runs", str(root), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "warning: runs of listops trained for different numbers of steps: 60 " in printed
    assert "600 (runs: trainer.max_steps=600)" in printed
    table = pd.read_csv(out / "results.csv")
    assert sorted(table["max_steps"].dropna().astype(int)) == [60, 600]
    header = (out / "results.md").read_text().splitlines()[0]
    assert "steps" in header
    assert "(1 run)" in printed and "(1 runs)" not in printed


def test_one_budget_is_no_warning(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "runs"
    for seed in (1, 2):
        write_run(root, f"s{seed}", "softmax", seed, 300)
    assert main(["--runs", str(root), "--out", str(tmp_path / "out")]) == 0
    assert "different numbers of steps" not in capsys.readouterr().out
    table = pd.read_csv(tmp_path / "out" / "results.csv")
    assert table["max_steps"].tolist() == [300] and table["duration_s_median"].tolist() == [12.0]
