"""scripts/compare.py on fake summary.json files with known numbers."""

from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from linarena.analysis.runs import record_from_wandb_run, wandb_filters

REPO_ROOT = Path(__file__).resolve().parents[1]

# (task, attention) -> per-seed (test/acc, tokens/s, peak MB); params fixed per attention.
RUNS = {
    ("listops", "softmax"): [(0.30, 100.0, 10.0), (0.35, 200.0, 20.0), (0.40, 300.0, 30.0)],
    ("listops", "performer"): [(0.20, 1000.0, 5.0), (0.22, 1100.0, 5.0), (0.24, 1200.0, 8.0)],
    ("text", "softmax"): [(0.60, 50.0, 100.0), (0.62, 70.0, 100.0), (0.64, 60.0, 130.0)],
    ("text", "performer"): [(0.65, 400.0, 40.0)],  # a single seed: no std
}
PARAMS = {"softmax": 1000, "performer": 1256}


def load_compare():
    spec = importlib.util.spec_from_file_location("compare", REPO_ROOT / "scripts" / "compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summary(task: str, attention: str, seed: int, acc: float, tps: float, mem: float) -> dict:
    return {
        "task": task, "attention": attention, "seed": seed,
        "hparams": {"d_model": 64, "num_heads": 2, "num_layers": 1},
        "metrics": {"test/acc": acc, "test/loss": 1.0, "val/acc_best": acc,
                    "perf/tokens_per_sec": tps, "perf/samples_per_sec": tps / 100,
                    "perf/peak_memory_mb": mem, "model/params": PARAMS[attention]},
        "wandb": {"id": None, "dir": None, "url": None, "mode": "disabled"},
        "output_dir": "x", "device": "cpu", "duration_s": 1.0,
    }


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    """multirun/<date>/<job>/summary.json, one sweep nested like Hydra's output folders (as
    written before summaries named their sweep: the folder says which)."""
    job = 0
    for (task, attention), seeds in RUNS.items():
        for seed, (acc, tps, mem) in enumerate(seeds, start=1):
            folder = tmp_path / "multirun" / "2025-01-01" / str(job)
            folder.mkdir(parents=True)
            (folder / "summary.json").write_text(
                json.dumps(summary(task, attention, seed, acc, tps, mem), indent=2))
            job += 1
    (tmp_path / "multirun" / "unrelated.json").write_text("{}")
    return tmp_path / "multirun"


def run_compare(*argv: str) -> int:
    return load_compare().main([str(a) for a in argv])


def test_table_has_seed_means_and_sample_std(runs_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_compare("--runs", runs_dir, "--out", out, "--runs-command", "python train.py -m") == 0
    table = pd.read_csv(out / "results.csv").set_index(["task", "attention"])
    assert len(table) == 4
    records = json.loads((out / "provenance.json").read_text())
    assert {"results.csv", "results.md"} <= set(records)
    assert records["results.csv"]["command"].startswith("python train.py -m; then python scripts/compare.py")
    row = table.loc[("listops", "softmax")]
    assert row["n"] == 3
    assert row["test_acc_pct_mean"] == pytest.approx(35.0)
    assert row["test_acc_pct_std"] == pytest.approx(5.0)  # sample std (ddof=1), in percent
    assert row["tokens_per_sec_mean"] == pytest.approx(200.0)
    assert row["tokens_per_sec_std"] == pytest.approx(100.0)
    assert row["peak_memory_mb_std"] == pytest.approx(10.0)
    assert row["params_mean"] == 1000 and row["params_std"] == 0
    performer = table.loc[("listops", "performer")]
    assert performer["peak_memory_mb_mean"] == pytest.approx(6.0)
    assert performer["peak_memory_mb_std"] == pytest.approx(math.sqrt(3.0))
    single = table.loc[("text", "performer")]
    assert single["n"] == 1 and single["test_acc_pct_mean"] == pytest.approx(65.0)
    assert math.isnan(single["test_acc_pct_std"]) and math.isnan(single["tokens_per_sec_std"])

    markdown = (out / "results.md").read_text()
    assert "| listops | softmax | 3 | 35.00 ± 5.00 | 200 ± 100 | 20.0 ± 10.0 |" in markdown
    assert "| text | performer | 1 | 65.00 | 400 | 40.0 | 1,256 |" in markdown
    assert "published" not in markdown
    umask = os.umask(0)
    os.umask(umask)
    for name in ("results.csv", "results.md", "scatter_text.png"):  # not tempfile's private 0600
        assert (out / name).stat().st_mode & 0o777 == 0o666 & ~umask
    assert not list(out.glob(".*.tmp"))
    for task in ("listops", "text"):
        with Image.open(out / f"scatter_{task}.png") as image:
            assert image.format == "PNG" and image.width > 100


def test_published_accuracies_are_separate_and_marked(runs_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_compare("--runs", runs_dir, "--out", out, "--published") == 0
    table = pd.read_csv(out / "results.csv").set_index(["task", "attention"])
    assert table.loc[("listops", "softmax"), "published_test_acc_pct"] == pytest.approx(36.37)
    assert table.loc[("text", "performer"), "published_test_acc_pct"] == pytest.approx(65.40)
    assert "LRA paper" in table.loc[("text", "performer"), "published_source"]
    # the measured numbers are untouched by the published column
    assert table.loc[("listops", "softmax"), "test_acc_pct_mean"] == pytest.approx(35.0)
    assert "published (LRA paper), not measured here" in (out / "results.md").read_text()


def test_filter_selects_runs(runs_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_compare("--runs", runs_dir, "--out", out, "--filter", "task=text") == 0
    table = pd.read_csv(out / "results.csv")
    assert set(table["task"]) == {"text"}
    assert not (out / "scatter_listops.png").exists()
    assert (out / "scatter_text.png").exists()


def test_a_rerun_of_the_same_setting_keeps_the_last_and_says_so(
    runs_dir: Path, tmp_path: Path, capsys
) -> None:
    copy = runs_dir / "zz-rerun" / "0"
    copy.mkdir(parents=True)
    (copy / "summary.json").write_text(json.dumps(
        {**summary("text", "performer", 1, 0.5, 1, 1), "sweep": "runs"}))
    for folder in runs_dir.glob("2025-01-01/*"):  # the fixture's runs: one sweep, "runs"
        path = folder / "summary.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "sweep": "runs"}))
    assert run_compare("--runs", runs_dir, "--out", tmp_path / "out") == 0
    assert "text/performer/seed 1 in 'runs' ran twice" in capsys.readouterr().out
    table = pd.read_csv(tmp_path / "out" / "results.csv").set_index(["task", "attention"])
    assert table.loc[("text", "performer"), "test_acc_pct_mean"] == pytest.approx(50.0)


def test_malformed_summary_names_file_and_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "summary.json").write_text('{\n  "task": "text",\n  oops\n}')
    assert run_compare("--runs", tmp_path, "--out", tmp_path / "out") == 2
    assert f"{tmp_path / 'summary.json'}:3: malformed JSON" in capsys.readouterr().err


def test_missing_metric_and_missing_folder_are_explained(tmp_path: Path, capsys) -> None:
    broken = summary("text", "softmax", 1, 0.5, 1.0, 1.0)
    del broken["metrics"]["test/acc"]
    (tmp_path / "summary.json").write_text(json.dumps(broken))
    assert run_compare("--runs", tmp_path, "--out", tmp_path / "out") == 2
    assert "metric 'test/acc' is missing" in capsys.readouterr().err
    assert run_compare("--runs", tmp_path / "nope", "--out", tmp_path / "out") == 2
    assert "no such folder" in capsys.readouterr().err


def test_wandb_runs_map_to_records_and_filters() -> None:
    run = SimpleNamespace(
        path=["team", "linarena", "abc123"], name="cosformer-s2", group="listops", config={},
        summary={"test/acc": 0.37, "perf/tokens_per_sec": 5000.0, "perf/peak_memory_mb": 300.0,
                 "model/params": 4321},
    )
    record = record_from_wandb_run(run)
    assert (record.task, record.attention, record.seed) == ("listops", "cosformer", 2)
    assert record.test_acc == pytest.approx(0.37) and record.params == 4321
    renamed = SimpleNamespace(**{**vars(run), "name": "sweep-7"})
    with pytest.raises(ValueError, match="no task/attention/seed"):
        record_from_wandb_run(renamed)
    renamed.config = {"task": "text", "attention": "elu", "seed": 3}  # as training logs them
    record = record_from_wandb_run(renamed)
    assert (record.task, record.attention, record.seed) == ("text", "elu", 3)
    query = wandb_filters({"group": "text", "tags": "final", "attention": "elu", "seed": 1})
    assert query == {"state": "finished", "group": "text", "tags": {"$in": ["final"]},
                     "config.attention": "elu", "config.seed": 1}


def test_scatter_labels_of_coinciding_points_are_stacked() -> None:
    """MQAR's three linear variants sit at nearly the same point: their labels get three lines,
    while a distant point keeps the first line."""
    from linarena.analysis.plots import label_rows

    tokens_per_sec = np.array([150_000.0, 110_000.0, 114_000.0, 109_000.0])
    accuracy = np.array([99.99, 12.1, 12.3, 12.4])
    rows = label_rows(tokens_per_sec, accuracy)
    assert rows[0] == 0
    assert sorted(rows[1:]) == [0, 1, 2]


def test_debug_runs_are_left_out_unless_asked_for(runs_dir: Path, tmp_path: Path, capsys) -> None:
    debug = runs_dir / "debug-run"
    debug.mkdir()
    (debug / "summary.json").write_text(json.dumps(
        {**summary("mqar", "softmax", 1, 0.9, 10.0, 1.0), "debug": True}))
    out = tmp_path / "out"
    assert run_compare("--runs", runs_dir, "--out", out) == 0
    assert "mqar" not in set(pd.read_csv(out / "results.csv")["task"])
    assert run_compare("--runs", runs_dir, "--out", out, "--debug") == 0
    assert "mqar" in set(pd.read_csv(out / "results.csv")["task"])
    assert run_compare("--runs", debug, "--out", out) == 2
    assert "debug runs are left out; --debug includes them" in capsys.readouterr().err


def test_published_numbers_only_beside_the_task_they_were_published_for(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    for task in ("listops", "listops_small"):
        (runs / task).mkdir(parents=True)
        (runs / task / "summary.json").write_text(json.dumps(
            {**summary(task, "softmax", 1, 0.4, 10.0, 1.0), "sweep": "runs"}))
    out = tmp_path / "out"
    assert run_compare("--runs", runs, "--out", out, "--published") == 0
    table = pd.read_csv(out / "results.csv").set_index("task")
    assert table.loc["listops", "published_test_acc_pct"] == pytest.approx(36.37)
    assert math.isnan(table.loc["listops_small", "published_test_acc_pct"])


def test_error_bars_stop_at_zero_percent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run at 1% accuracy with a 3-point std: the lower bar ends at 0, not at -2%."""
    from matplotlib.axes import Axes

    from linarena.analysis.plots import plot_accuracy_vs_throughput

    table = pd.DataFrame({"attention": ["softmax", "elu"], "n": [3, 3],
                          "test_acc_pct_mean": [1.0, 50.0], "test_acc_pct_std": [3.0, 1.0],
                          "tokens_per_sec_mean": [100.0, 200.0],
                          "tokens_per_sec_std": [10.0, 10.0],
                          "peak_memory_mb_mean": [10.0, 10.0]})
    lower_ends = []
    errorbar = Axes.errorbar

    def recording(self, x, y, *args, yerr=None, **kwargs):
        lower_ends.append(y - yerr[0][0])
        return errorbar(self, x, y, *args, yerr=yerr, **kwargs)

    monkeypatch.setattr(Axes, "errorbar", recording)
    plot_accuracy_vs_throughput(table, "t", tmp_path / "scatter.png")
    assert lower_ends == [0.0, 49.0]
