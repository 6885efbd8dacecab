"""The MQAR state-size figure (after Based, Arora et al. 2024, Figure 3): test accuracy against
state size, one line per attention through the medians over seeds, every seed drawn as a point;
one panel with the short conv and one without."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import pandas as pd

from linarena.analysis.plots import _save, attention_colors
from linarena.attention.variants import variant_names


def plot_state_size(summary: pd.DataFrame, runs: pd.DataFrame, path: Path,
                    title: str = "") -> None:
    """Median test accuracy at the chosen lr (line) and every seed's (points) against state
    size on a log-2 axis.

    ``summary``: state_size.summarize's rows; ``runs``: every run (runs.load_study), of which the
    runs at each point's chosen lr are drawn. Panels: short_conv > 0 first, then 0. Softmax's x
    is its KV cache at the test length, drawn dashed with hollow markers.
    """
    if summary.empty:
        raise ValueError("no runs to plot")
    keys = ["attention", "short_conv", "d_model"]
    chosen = runs.merge(summary[[*keys, "chosen_lr"]], on=keys)
    chosen = chosen[chosen["lr"] == chosen["chosen_lr"]]
    convs = sorted(set(summary["short_conv"]), reverse=True)
    order = [name for name in variant_names() if name in set(summary["attention"])]
    order += sorted(set(summary["attention"]) - set(order))
    colors = attention_colors(order)
    fig, axes = plt.subplots(1, len(convs), figsize=(6.2 * len(convs), 4.6), sharey=True,
                             squeeze=False)
    for ax, conv in zip(axes[0], convs, strict=True):
        for name in order:
            line = summary[(summary["short_conv"] == conv) & (summary["attention"] == name)]
            if line.empty:
                continue
            line = line.sort_values("state_size")
            kv = (line["state_kind"] == "kv_cache").all()
            ax.plot(line["state_size"], 100 * line["test_acc_median"], color=colors[name],
                    linestyle="--" if kv else "-", marker="_", markersize=12,
                    markeredgewidth=2,
                    label=f"{line['label'].iloc[0]}" + (" (KV cache)" if kv else ""))
            seeds = chosen[(chosen["short_conv"] == conv) & (chosen["attention"] == name)]
            ax.scatter(seeds["state_size"], 100 * seeds["test_acc"], s=14, alpha=0.7,
                       color="none" if kv else colors[name], edgecolors=colors[name])
            for row in line.itertuples():
                ax.annotate(f"d{row.d_model}", (row.state_size, 100 * row.test_acc_median),
                            textcoords="offset points", xytext=(3, 3), fontsize=6,
                            color=colors[name])
        ax.set_xscale("log", base=2)
        ax.set_title(f"short conv, kernel {conv}" if conv else "no short conv")
        ax.set_xlabel("state size (numbers, all layers; softmax: KV cache at test length)")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_ylim(-2, 102)
    axes[0][0].set_ylabel("MQAR test accuracy (%): line median, points seeds")
    # Beside the panels: inside, with 11 variants, it hid the seeds' points.
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                       borderaxespad=0.0)
    if title:
        fig.suptitle(title, fontsize=10)
    _save(fig, path)
