"""The MQAR state-size figure (after Based, Arora et al. 2024, Figure 3): test accuracy against
state size, one line per attention, one panel with the short conv and one without."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import pandas as pd

from linarena.analysis.plots import _save, attention_colors
from linarena.attention.variants import variant_names


def plot_state_size(best: pd.DataFrame, path: Path, title: str = "") -> None:
    """Accuracy (best lr per point) against state size on a log-2 axis.

    ``best`` has the columns of mqar_results.best_per_setting. Panels: short_conv > 0 first
    ("with short conv k"), then 0 ("no short conv"). Softmax's x is its KV cache at the test
    length, drawn dashed with hollow markers.
    """
    if best.empty:
        raise ValueError("no runs to plot")
    convs = sorted(set(best["short_conv"]), reverse=True)
    order = [name for name in variant_names() if name in set(best["attention"])]
    order += sorted(set(best["attention"]) - set(order))
    colors = attention_colors(order)
    fig, axes = plt.subplots(1, len(convs), figsize=(6.2 * len(convs), 4.6), sharey=True,
                             squeeze=False)
    for ax, conv in zip(axes[0], convs, strict=True):
        panel = best[best["short_conv"] == conv]
        for name in order:
            line = panel[panel["attention"] == name].sort_values("state_size")
            if line.empty:
                continue
            kv = (line["state_kind"] == "kv_cache").all()
            ax.plot(line["state_size"], 100 * line["test_acc"], marker="o", color=colors[name],
                    linestyle="--" if kv else "-", markerfacecolor="none" if kv else colors[name],
                    label=f"{line['label'].iloc[0]}" + (" (KV cache)" if kv else ""))
            for _, row in line.iterrows():
                ax.annotate(f"d{row['d_model']}", (row["state_size"], 100 * row["test_acc"]),
                            textcoords="offset points", xytext=(3, 3), fontsize=6,
                            color=colors[name])
        ax.set_xscale("log", base=2)
        ax.set_title(f"short conv, kernel {conv}" if conv else "no short conv")
        ax.set_xlabel("state size (numbers, all layers; softmax: KV cache at test length)")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_ylim(-2, 102)
    axes[0][0].set_ylabel("MQAR test accuracy (%), best lr")
    axes[0][-1].legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    _save(fig, path)
