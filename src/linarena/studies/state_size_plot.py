"""The MQAR state-size figure (after Based, Arora et al. 2024, Figure 3): test accuracy against
state size, one line per attention through the medians over seeds, every seed drawn as a point
(top row); below it the rate of seeds that reached 90% with its 95% Wilson interval (a
result that can go either way is a rate); a column with the short conv and one without."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from linarena.analysis.plots import attention_colors, save_figure
from linarena.attention.variants import variant_names


def plot_state_size(summary: pd.DataFrame, runs: pd.DataFrame, path: Path,
                    title: str = "") -> None:
    """state_size_figure, saved to `path`."""
    save_figure(state_size_figure(summary, runs, title), path)


def state_size_figure(summary: pd.DataFrame, runs: pd.DataFrame, title: str = "") -> Figure:
    """Median test accuracy at the chosen lr (line) and every seed's (points) against state
    size on a log-2 axis; below, the success rate with its Wilson interval (error bars).

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
    variants = variant_names()
    order = [name for name in variants if name in set(summary["attention"])]
    order += sorted(set(summary["attention"]) - set(order))
    colors = attention_colors(order)
    handles: dict[str, Line2D] = {}  # the first line of each attention, for the legend
    fig, axes = plt.subplots(2, len(convs), figsize=(6.2 * len(convs), 8.4), sharey="row",
                             sharex="col", squeeze=False, height_ratios=[1.3, 1])
    for ax, rate_ax, conv in zip(axes[0], axes[1], convs, strict=True):
        for name in order:
            line = summary[(summary["short_conv"] == conv) & (summary["attention"] == name)]
            if line.empty:
                continue
            line = line.sort_values("state_size")
            kv = (line["state_kind"] == "kv_cache").all()
            # Dashed: softmax's KV cache; dash-dot: a hybrid stack, so that it reads apart from
            # the variants whatever its colour.
            style = "--" if kv else "-" if name in variants else "-."
            handle, = ax.plot(line["state_size"], 100 * line["test_acc_median"],
                              color=colors[name], linestyle=style, marker="_",
                              markersize=12, markeredgewidth=2,
                              label=f"{line['label'].iloc[0]}" + (" (KV cache)" if kv else ""))
            handles.setdefault(name, handle)
            seeds = chosen[(chosen["short_conv"] == conv) & (chosen["attention"] == name)]
            ax.scatter(seeds["state_size"], 100 * seeds["test_acc"], s=14, alpha=0.7,
                       color="none" if kv else colors[name], edgecolors=colors[name])
            rate = 100 * line["success_rate"]
            rate_ax.errorbar(line["state_size"], rate,
                             yerr=[rate - 100 * line["success_ci_low"],
                                   100 * line["success_ci_high"] - rate],
                             color=colors[name], linestyle=style, marker="o",
                             markersize=3, capsize=2, linewidth=1, alpha=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(f"short conv, kernel {conv}" if conv else "no short conv (or a layer's own)")
        rate_ax.set_xlabel("state size (numbers, all layers; softmax: KV cache at test length)")
        for panel in (ax, rate_ax):
            panel.grid(True, which="major", alpha=0.3)
            panel.set_ylim(-2, 102)
    axes[0][0].set_ylabel("MQAR test accuracy (%): line median, points seeds")
    axes[1][0].set_ylabel("seeds at 90% (%), 95% Wilson interval")
    # One entry per attention drawn in any panel (a layer with its own convolutions is in one
    # column only), in registry order; beside the panels, since inside, with a dozen variants,
    # it hid the seeds' points.
    legend = [handles[name] for name in order if name in handles]
    axes[0][-1].legend(legend, [h.get_label() for h in legend], fontsize=8, loc="upper left",
                       bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    # A state grows with d_model for every attention, so each line's points read left to right
    # in width order; said once here rather than as a label per point, which crowded where a
    # dozen attentions share a state size.
    widths = sorted(set(summary["d_model"]))
    caption = f"d_model {widths[0]}" if len(widths) == 1 else (
        f"d_model {', '.join(map(str, widths))}: each attention's points, left to right")
    fig.suptitle(f"{title}\n{caption}" if title else caption, fontsize=10)
    return fig
