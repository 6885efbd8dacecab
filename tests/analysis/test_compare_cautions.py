"""What compare.py says beside its numbers: rows of fewer than 3 seeds, and runs whose CPU memory
holds what earlier jobs of their `-m` process left; the peak memory of every point in figures;
and only this call's plots in --out."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from matplotlib.figure import Figure

from linarena.analysis.compare import main
from linarena.analysis.plots import plot_accuracy_vs_throughput
from linarena.analysis.provenance import load, record

SEED_CAUTION = "one seed is an anecdote; see scripts/seed_sweep.py for a comparison with intervals"
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
SUBMITIT_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"


def summary(task: str, attention: str, seed: int, acc: float, device: str, sweep: str | None
            ) -> dict:
    return {"task": task, "attention": attention, "seed": seed,
            **({"sweep": sweep} if sweep else {}),
            "metrics": {"test/acc": acc, "test/loss": 1.0, "perf/tokens_per_sec": 1000.0 + seed,
                        "perf/samples_per_sec": 10.0, "perf/peak_memory_mb": 100.0,
                        "model/params": 1000},
            "device": device, "duration_s": 1.0}


def job(sweep: Path, num: int, attention: str, seed: int, acc: float = 0.5,
        launcher: str = BASIC_LAUNCHER, device: str = "cpu", task: str = "listops",
        sweep_label: str | None = None) -> Path:
    """A job folder of a `train.py -m` as Hydra writes it: summary.json (its sweep the folder
    holding it, unless `sweep_label`) and .hydra/hydra.yaml."""
    folder = sweep / f"{num}_{attention}_s{seed}"
    (folder / ".hydra").mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summary(task, attention, seed, acc, device,
                                                            sweep_label)))
    (folder / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {
        "mode": "MULTIRUN", "launcher": {"_target_": launcher}, "job": {"num": num}}}))
    return folder


def cautions(capsys: pytest.CaptureFixture) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("caution:")]


def plotted_texts(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every text drawn on each figure saved from now on (titles and labels aside: the figure's
    own texts and the axes' annotations), one list per figure."""
    texts: list[list[str]] = []
    savefig = Figure.savefig

    def keeping(self: Figure, *args, **kwargs):
        texts.append([text.get_text() for text in self.texts]
                     + [text.get_text() for ax in self.axes for text in ax.texts])
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keeping)
    return texts


def test_rows_of_fewer_than_three_seeds_are_a_caution_in_the_table_and_on_the_plot(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 100-step, one-seed table put elu+1 7 points below softmax, where 10 seeds differ by
    about a point: rows of n < 3 say so, wherever the numbers are read."""
    runs = tmp_path / "runs"
    for seed in (1, 2, 3):
        job(runs / "a", 0, "softmax", seed, launcher=SUBMITIT_LAUNCHER)
    job(runs / "a", 0, "elu", 1, launcher=SUBMITIT_LAUNCHER)
    texts = plotted_texts(monkeypatch)
    out = tmp_path / "out"
    assert main(["--runs", str(runs), "--out", str(out)]) == 0
    caution, = cautions(capsys)
    assert SEED_CAUTION in caution and "listops/elu+1 (n=1)" in caution
    assert "softmax" not in caution  # 3 seeds
    markdown = (out / "results.md").read_text()
    assert SEED_CAUTION in markdown and "listops/elu+1 (n=1)" in markdown
    assert len(texts) == 1 and any(SEED_CAUTION in " ".join(text.split()) for text in texts[0])


def test_later_jobs_of_one_process_are_a_caution_on_their_cpu_memory(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under Hydra's basic launcher every job of a `-m` trains in its one process, one after the
    other: on CPU a later job's peak resident memory holds what the earlier ones left. A job
    that had a process of its own (the first, a submitit job, seed_sweep.py's one-job calls) or
    trained on a GPU (its peak is its own tensors) is no caution."""
    sweep = tmp_path / "runs" / "multiruns" / "2025-01-01_10-00-00"
    for num, (attention, seed) in enumerate([("softmax", 1), ("softmax", 2), ("softmax", 3),
                                             ("elu", 1), ("elu", 2), ("elu", 3)]):
        job(sweep, num, attention, seed)
    for seed in (1, 2, 3):
        job(tmp_path / "runs" / "own" / f"seed{seed}", 0, "performer", seed, sweep_label="own")
        job(tmp_path / "runs" / "slurm", seed, "cosformer", seed, launcher=SUBMITIT_LAUNCHER)
        job(tmp_path / "runs" / "gpu", seed, "gla", seed, device="cuda")
    texts = plotted_texts(monkeypatch)
    out = tmp_path / "out"
    assert main(["--runs", str(tmp_path / "runs"), "--out", str(out)]) == 0
    caution, = cautions(capsys)
    assert caution.startswith("caution: listops, multiruns/2025-01-01_10-00-00: 5 runs "
                              "(softmax s2, softmax s3, elu+1 s1, elu+1 s2, elu+1 s3) trained "
                              "after other jobs of the same `train.py -m` process")
    assert "what the earlier jobs left resident" in caution and "seed_sweep.py" in caution
    for other in ("performer", "cosFormer", "GLA", "softmax s1,"):
        assert other not in caution
    assert "what the earlier jobs left resident" in (out / "results.md").read_text()
    # On the plot of that sweep only.
    shared = [figure for figure in texts if any("left resident" in text for text in figure)]
    assert len(texts) == 4 and len(shared) == 1


def test_each_point_reads_its_peak_memory(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """805 MB and 915 MB as marker areas look alike: each point's memory is written out."""
    table = pd.DataFrame({"sweep": "runs", "attention": ["softmax", "elu", "performer"],
                          "n": 3, "test_acc_pct_mean": [40.0, 39.0, 38.0],
                          "test_acc_pct_std": 1.0, "tokens_per_sec_mean": [1000.0, 2000.0, 3000.0],
                          "tokens_per_sec_std": 100.0,
                          "peak_memory_mb_mean": [805.2, 915.0, float("nan")]})
    texts = plotted_texts(monkeypatch)
    plot_accuracy_vs_throughput(table, "listops", "runs", tmp_path / "scatter.png")
    drawn, = texts
    assert {"805 MB", "915 MB", "n/a"} <= set(drawn)
    assert not any("marker area" in text for text in drawn)


def test_plots_of_an_earlier_call_are_replaced_and_nothing_else_is_touched(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A first call plots listops and text; a second one, of text only, leaves no listops plot
    beside its own (nor its record), and keeps the files it did not write."""
    runs = tmp_path / "runs"
    for task in ("listops", "text"):
        for seed in (1, 2, 3):
            job(runs / task, 0, "softmax", seed, task=task, launcher=SUBMITIT_LAUNCHER)
    out = tmp_path / "out"
    out.mkdir()
    (out / "scatter_mine.png").write_bytes(b"a user's own file")
    (out / "scatter_other.png").write_bytes(b"another script's result")
    record([out / "scatter_other.png"], "python scripts/other.py --out out")
    assert main(["--runs", str(runs), "--out", str(out)]) == 0
    assert {"scatter_listops.png", "scatter_text.png"} <= set(load(out))
    assert main(["--runs", str(runs / "text"), "--out", str(out)]) == 0
    assert sorted(path.name for path in out.glob("*.png")) == [
        "scatter_mine.png", "scatter_other.png", "scatter_text.png"]
    assert "scatter_listops.png" not in load(out) and "scatter_other.png" in load(out)
    assert "removed scatter_listops.png" in capsys.readouterr().out
