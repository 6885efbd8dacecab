"""PNG figures: benchmark time/memory against length, accuracy against throughput per task."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import (
    FuncFormatter,
    LogFormatter,
    LogLocator,
    NullFormatter,
    ScalarFormatter,
)

from linarena.analysis.order import attention_label, attention_order, attention_sort_key
from linarena.files import write_atomic

WHAT_TITLES = {
    "model_step": "training step (fwd + bwd + AdamW)",
    "attention_fwd_bwd": "attention module (fwd + bwd)",
}


def attention_colors(names: list[str]) -> dict[str, str]:
    """A fixed colour per attention, the same in every figure."""
    ordered = sorted(set(names) | set(attention_order()), key=attention_sort_key)
    return {name: f"C{i % 10}" for i, name in enumerate(ordered)}


def _save(fig: plt.Figure, path: Path) -> None:
    """Save the figure as a PNG atomically and close it."""
    write_atomic(path, lambda file: fig.savefig(file, format="png", dpi=120, bbox_inches="tight"),
                 binary=True)
    plt.close(fig)


def plot_benchmark(rows: pd.DataFrame, path: Path) -> None:
    """Log-log time and peak memory against length, one line per attention, one row per what.

    ``rows`` has the benchmark CSV's columns; only rows with status "ok" are drawn, and the
    lengths that were not measured (oom, skipped, ...) are named under each panel.
    """
    whats = [w for w in WHAT_TITLES if w in set(rows["what"])]
    if not whats:
        raise ValueError("no benchmark rows to plot")
    colors = attention_colors(list(rows["attention"]))
    fig, axes = plt.subplots(len(whats), 2, figsize=(11, 4.2 * len(whats)), squeeze=False)
    first = rows.iloc[0]
    setting = f"{first['device']}, {first['dtype']}, batch {first['batch']}"
    if first["device"] == "cpu" and "threads" in rows.columns:
        setting += f", {first['threads']} thread" + ("s" if first["threads"] != 1 else "")
    for axes_row, what in zip(axes, whats, strict=True):
        of_what = rows[rows["what"] == what]
        missing = []
        for attention in sorted(set(of_what["attention"]), key=attention_sort_key):
            group = of_what[of_what["attention"] == attention].sort_values("length")
            ok = group[group["status"] == "ok"]
            for ax, column in zip(axes_row, ("ms", "peak_memory_mb"), strict=True):
                values = ok[column].astype(float).where(ok[column] > 0)  # a log axis has no 0
                ax.plot(ok["length"], values, marker="o", color=colors[attention],
                        label=attention_label(attention))
            missing += [f"{attention} {r.length}: {r.status}"
                        for r in group.itertuples() if r.status != "ok"]
        for ax, ylabel in zip(axes_row, ("time per call (ms)", "peak memory (MB)"), strict=True):
            ax.set_xscale("log", base=2)
            lengths = sorted(set(of_what["length"]))
            ax.set_xticks(lengths)
            ax.set_xlim(lengths[0] / 1.25, lengths[-1] * 1.25)
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())
            if any((line.get_ydata() > 0).any() for line in ax.get_lines()):
                ax.set_yscale("log")  # not when nothing is positive (e.g. 0 MB at tiny sizes)
                ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
                ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False,
                                                          minor_thresholds=(1.5, 0.5)))
            ax.set_xlabel("sequence length (tokens)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{WHAT_TITLES[what]}\n{setting}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        if missing:
            axes_row[0].annotate("not measured: " + "; ".join(missing), (0, -0.22),
                                 xycoords="axes fraction", fontsize=7, va="top", wrap=True)
    fig.tight_layout()
    _save(fig, path)


def plot_accuracy_vs_throughput(table: pd.DataFrame, task: str, path: Path) -> None:
    """Scatter of test accuracy against tokens/s for one task, marker area ~ peak memory.

    ``table`` has one row per attention with the aggregate columns of
    :func:`linarena.analysis.table.aggregate_runs`; error bars are the seed std (absent for
    n=1), cut at 0% and 100%.
    """
    if table.empty:
        raise ValueError(f"no runs of task {task!r} to plot")
    colors = attention_colors(list(table["attention"]))
    memory = table["peak_memory_mb_mean"].to_numpy(dtype=float)
    # Marker area proportional to memory, the largest 900 pt^2, none smaller than 40 pt^2.
    sizes = np.maximum(900.0 * memory / np.nanmax(memory), 40.0) if np.nanmax(memory) > 0 \
        else np.full_like(memory, 200.0)
    fig, ax = plt.subplots(figsize=(7, 5))
    stacking = label_rows(table["tokens_per_sec_mean"].to_numpy(dtype=float),
                             table["test_acc_pct_mean"].to_numpy(dtype=float))
    log_tps = np.log10(table["tokens_per_sec_mean"].to_numpy(dtype=float))
    span = max(float(log_tps.max() - log_tps.min()), 1e-9)
    for row, size, label_row, at in zip(table.itertuples(), sizes, stacking,
                                        (log_tps - log_tps.min()) / span, strict=True):
        color = colors[row.attention]
        acc, acc_std = row.test_acc_pct_mean, _zero_if_nan(row.test_acc_pct_std)
        tps, tps_std = row.tokens_per_sec_mean, _zero_if_nan(row.tokens_per_sec_std)
        ax.errorbar(tps, acc, xerr=[[min(tps_std, 0.99 * tps)], [tps_std]],  # > 0 on a log axis
                    yerr=[[min(acc_std, acc)], [min(acc_std, 100.0 - acc)]],
                    fmt="none", ecolor=color, capsize=3, alpha=0.8)
        ax.scatter(row.tokens_per_sec_mean, row.test_acc_pct_mean, s=size, color=color,
                   alpha=0.6, edgecolors="black", linewidths=0.5)
        ax.annotate(f"{row.attention}: {row.peak_memory_mb_mean:,.0f} MB (n={row.n})",
                    (row.tokens_per_sec_mean, row.test_acc_pct_mean),
                    textcoords="offset points", fontsize=8,
                    # labels of the right-most points go to their left, inside the axes
                    xytext=(-8 if at > 0.7 else 8, 8 + 11 * label_row),
                    ha="right" if at > 0.7 else "left")
    handles = [Line2D([], [], marker="o", linestyle="", color=colors[name], label=attention_label(name))
               for name in table["attention"]]
    ax.legend(handles=handles, title="attention", fontsize=8)
    ax.set_xscale("log")
    # Plain numbers, as many per decade as the span leaves room for; no minor labels, so
    # nothing overprints.
    subs = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if span < 1 else (1.0, 2.0, 5.0) if span < 2 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("training throughput (tokens/s)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{task}: accuracy vs throughput (marker area ~ peak memory; "
                 "bars: seed std)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.margins(0.15)
    low, high = ax.get_ylim()
    ax.set_ylim(max(low, 0.0), min(high, 105.0))  # no negative accuracies on the axis
    fig.tight_layout()
    _save(fig, path)


def label_rows(x: np.ndarray, y: np.ndarray) -> list[int]:
    """A label line per point, so that labels of points that (nearly) coincide are stacked
    instead of printed over each other: near means within 30% of the plotted log-throughput
    span (a label's width, at least 0.1 decade) and 5% of the accuracy range. Points are taken
    by increasing accuracy."""
    log_x = np.log10(x)
    x_near = max(0.3 * float(np.nanmax(log_x) - np.nanmin(log_x)), 0.1)
    y_near = 0.05 * max(float(np.nanmax(y) - np.nanmin(y)), 1e-9)
    rows = [0] * len(x)
    placed: list[int] = []
    for i in np.argsort(y, kind="stable"):
        near = [j for j in placed
                if abs(log_x[i] - log_x[j]) < x_near and abs(y[i] - y[j]) < y_near]
        rows[i] = max((rows[j] + 1 for j in near), default=0)
        placed.append(i)
    return rows


def _zero_if_nan(value: float) -> float:
    return 0.0 if pd.isna(value) else float(value)
