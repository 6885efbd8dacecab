"""compare.py's scatter plots: error bars within 0-100%, one colour per attention, readable
sizes, the sweeps of one folder in one plot."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from PIL import Image

from linarena.analysis.compare import write_plots
from linarena.analysis.plots import (
    attention_color,
    attention_colors,
    plot_accuracy_vs_throughput,
)
from linarena.attention.variants import variant_names


def test_error_bars_stop_at_zero_percent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run at 1% accuracy with a 3-point std: the lower bar ends at 0, not at -2%."""
    table = pd.DataFrame({"sweep": ["runs", "runs"], "attention": ["softmax", "elu"], "n": [3, 3],
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
    plot_accuracy_vs_throughput(table, "t", "runs", tmp_path / "scatter.png")
    assert lower_ends == [0.0, 49.0]


def test_plots_keep_colours_and_a_readable_size(tmp_path: Path) -> None:
    """Each attention has one colour whatever else is plotted; a long sweep label is wrapped,
    not a figure thousands of pixels wide; an Optuna-like folder of one-run sweeps is one plot
    with numbered points."""

    assert attention_color("elu") == attention_color("elu")
    assert len({attention_color(name) for name in ("softmax", "elu", "performer")}) == 3
    long = "multiruns/2025-01-01_10-00-00: " + " ".join(
        f"model.setting_{i}=0.0031622776601683794" for i in range(12))
    trials = [f"multiruns/2025-02-02_10-00-00: optim.lr={lr}" for lr in (0.001, 0.003, 0.01)]
    rows = [{"sweep": sweep, "task": "text", "attention": attention, "n": 1, "n_failed": 0,
             "test_acc_pct_mean": acc, "test_acc_pct_std": float("nan"),
             "tokens_per_sec_mean": tps, "tokens_per_sec_std": float("nan"),
             "peak_memory_mb_mean": 100.0, "peak_memory_mb_std": float("nan"),
             "params_mean": 1.0, "params_std": float("nan")}
            for sweep, attention, acc, tps in [(long, "softmax", 60.0, 1000.0),
                                               (long, "elu", 55.0, 3000.0),
                                               *((t, "elu", 50.0 + i, 2000.0 + 100 * i)
                                                 for i, t in enumerate(trials))]]
    listing = write_plots(pd.DataFrame(rows), tmp_path)
    assert len(listing) == 2 and sorted(p.name for p in tmp_path.glob("*.png")) == [
        "scatter_1_text.png", "scatter_2_text.png"]
    for path in tmp_path.glob("*.png"):
        with Image.open(path) as image:
            assert image.width < 1200 and image.height < 900, (path.name, image.size)


def test_a_hybrid_stacks_colour_reads_apart_from_every_variants() -> None:
    """The state-size figure draws the hybrids beside all the variants: each hybrid's colour
    must be far (RGB distance > 100 of 441) from every variant's and the other hybrids'."""
    variants = variant_names()
    hybrids = ["gated_deltanet+softmax", "gated_deltanet+swa", "gla+swa", "mamba2+softmax"]
    colors = attention_colors([*variants, *hybrids])

    def distance(a: str, b: str) -> float:
        return 255 * math.dist(to_rgb(colors[a]), to_rgb(colors[b]))

    for hybrid in hybrids:
        nearest = min((name for name in [*variants, *hybrids] if name != hybrid),
                      key=lambda name, h=hybrid: distance(h, name))
        assert distance(hybrid, nearest) > 100, (hybrid, nearest)


def test_throughput_tick_labels_never_overprint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    """The ListOps sweep spans 2k-9k tokens/s over 18 attentions beside a wide legend: "5,000"
    and "7,000" overprinted. No two x tick labels of the saved figure may overlap."""
    from matplotlib.figure import Figure

    names = variant_names()
    tps = [2000.0 * (4.5 ** (i / (len(names) - 1))) for i in range(len(names))]
    table = pd.DataFrame({"sweep": "runs", "attention": names, "n": 2,
                          "test_acc_pct_mean": 40.0, "test_acc_pct_std": 1.0,
                          "tokens_per_sec_mean": tps, "tokens_per_sec_std": 100.0,
                          "peak_memory_mb_mean": 900.0})
    figures: list[Figure] = []
    savefig = Figure.savefig

    def keeping(self, *args, **kwargs):
        figures.append(self)
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keeping)
    plot_accuracy_vs_throughput(table, "t", "runs", tmp_path / "scatter.png")
    figure, = figures
    boxes = sorted((label.get_window_extent() for label in
                    figure.axes[0].get_xticklabels() if label.get_visible() and
                    label.get_text()), key=lambda box: box.x0)
    assert len(boxes) >= 3
    assert all(left.x1 <= right.x0 for left, right in itertools.pairwise(boxes)), [
        (box.x0, box.x1) for box in boxes]
