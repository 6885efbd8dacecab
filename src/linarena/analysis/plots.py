"""PNG figures: benchmark time/memory against length, accuracy against throughput per task."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
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
from linarena.metrics import PEAK_MEMORY_MB, TEST_ACC, TOKENS_PER_SEC
from linarena.training.summary import round_floats

# Every point of an accuracy scatter has one size: the memory panel beside it gives the memory,
# with room for at least this many rows.
MARKER_AREA = 120.0
MIN_MEMORY_ROWS = 6

WHAT_TITLES = {
    "model_step": "training step (fwd + bwd + AdamW)",
    "attention_fwd_bwd": "attention module (fwd + bwd)",
}


def attention_color(name: str) -> str:
    """A fixed colour per attention, the same in every figure: the variants in registry order
    take tab10's colours, then their lighter tab20 partners (20 distinct colours); any other
    name one of those, by its letters."""
    order = attention_order()
    index = order.index(name) if name in order else len(order) + sum(name.encode())
    return to_hex(colormaps["tab20"](2 * (index % 10) + (index // 10) % 2))


# Colours of the names that are not variants (hybrid stacks), in their sorted order: far from
# tab20's, which go to the variants (Dark2's, used before, sat beside some of them: its teal by
# the Based layer's green, its orange by the sliding window's).
OTHER_COLORS = ("#000000", "#00008b", "#ff00ff", "#00ff00")


def attention_colors(names: list[str]) -> dict[str, str]:
    """attention_color of each variant; any other name (a hybrid stack's) takes OTHER_COLORS
    in the names' sorted order, so no two of them share one with each other or a variant."""
    order = attention_order()
    others = sorted(name for name in set(names) if name not in order)
    extra = {name: OTHER_COLORS[rank % len(OTHER_COLORS)] for rank, name in enumerate(others)}
    return {name: extra.get(name) or attention_color(name) for name in names}


def short_text(text: str, width: int = 72, lines: int = 2) -> str:
    """`text` wrapped to `width` characters, at most `lines` lines (the rest cut with "…")."""
    wrapped = textwrap.wrap(text, width) or [""]
    if len(wrapped) > lines:
        wrapped = [*wrapped[:lines - 1], wrapped[lines - 1][:width - 1] + "…"]
    return "\n".join(wrapped)


def save_figure(fig: Figure, path: Path) -> None:
    """Save the figure as a PNG atomically. Figures are made with Figure(), not pyplot: no
    backend or display is involved, and nothing is kept open."""
    write_atomic(path, lambda file: fig.savefig(file, format="png", dpi=120, bbox_inches="tight"),
                 binary=True)


def plot_benchmark(rows: pd.DataFrame, path: Path) -> None:
    """Log-log time and peak memory against length, one line per attention, one row per what.

    ``rows`` has the benchmark CSV's columns; only rows with status "ok" are drawn, and the
    lengths that were not measured (oom, skipped, ...) are named under each panel.
    """
    whats = [w for w in WHAT_TITLES if w in set(rows["what"])]
    if not whats:
        raise ValueError("no benchmark rows to plot")
    colors = attention_colors(list(rows["attention"]))
    fig = Figure(figsize=(13, 4.2 * len(whats)))
    axes = fig.subplots(len(whats), 2, squeeze=False)
    first = rows.iloc[0]
    setting = f"{first['device']}, {first['dtype']}, batch {first['batch']}"
    if first["device"] == "cpu" and "threads" in rows.columns:
        setting += f", {first['threads']} thread" + ("s" if first["threads"] != 1 else "")
    legend: dict[str, Line2D] = {}  # each attention's first line
    for axes_row, what in zip(axes, whats, strict=True):
        of_what = rows[rows["what"] == what]
        missing = []
        for attention in sorted(set(of_what["attention"]), key=attention_sort_key):
            group = of_what[of_what["attention"] == attention].sort_values("length")
            ok = group[group["status"] == "ok"]
            for ax, column in zip(axes_row, ("ms", "peak_memory_mb"), strict=True):
                values = ok[column].astype(float).where(ok[column] > 0)  # a log axis has no 0
                line, = ax.plot(ok["length"], values, marker="o", color=colors[attention],
                                label=attention_label(attention))
                legend.setdefault(attention, line)
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
        if missing:
            axes_row[0].annotate("not measured: " + "; ".join(missing), (0, -0.22),
                                 xycoords="axes fraction", fontsize=7, va="top", wrap=True)
    # One legend beside the panels (inside them, a dozen variants hide the lines), with every
    # attention of any row once: a row may lack some.
    handles = [legend[name] for name in sorted(legend, key=attention_sort_key)]
    fig.legend(handles, [h.get_label() for h in handles], loc="center right", fontsize=8,
               title="points at 0 MB (below what the\nmeasurement resolves) are not drawn",
               title_fontsize=7)
    fig.tight_layout(rect=(0, 0, 0.78, 1))
    save_figure(fig, path)


def plot_accuracy_vs_throughput(table: pd.DataFrame, task: str, folder: str, path: Path,
                                note: str | None = None, cautions: Sequence[str] = ()) -> None:
    """Test accuracy against tokens/s for one task and one multirun folder, colour = attention
    (attention_color), beside a panel of each row's peak memory written out in MB (as marker
    areas, 805 and 915 MB looked alike); `note` (e.g. PARTIAL: ...) is the title's first line,
    `cautions` (what the numbers cannot say) close the key under the plot.

    ``table`` has rows of :func:`linarena.analysis.table.aggregate_runs` (a sweep column and
    the ``<name>_mean`` / ``_std`` columns); rows without a finished run are left out. Error bars
    are the seed std (absent for n=1), cut at 0% and 100%. No text is drawn on the scatter
    except a sweep number beside each marker when the folder holds several sweeps (settings),
    e.g. the trials of an Optuna search; the memory panel names each row (with that number) and
    its seeds, and the key under the plot says the rest, also when the rows' runs had different
    step budgets (a ``max_steps`` column).
    """
    table = table[table["n"] > 0] if "n" in table.columns else table
    if table.empty:
        raise ValueError(f"no runs of task {task!r} to plot")
    acc_col, tps_col = f"{TEST_ACC.name}_mean", f"{TOKENS_PER_SEC.name}_mean"
    sweeps = list(dict.fromkeys(table["sweep"])) if "sweep" in table.columns else []
    numbered = len(sweeps) > 1
    rows = table.to_dict("records")
    # One row a line of the memory panel, a dozen attentions and more included.
    fig = Figure(figsize=(9, max(5.0, 1.6 + 0.24 * len(rows))))
    ax, memory_ax = fig.subplots(1, 2, width_ratios=(3, 2))
    for row in rows:
        color = attention_color(row["attention"])
        acc, acc_std = row[acc_col], _zero_if_nan(row.get(f"{TEST_ACC.name}_std"))
        tps, tps_std = row[tps_col], _zero_if_nan(row.get(f"{TOKENS_PER_SEC.name}_std"))
        if acc_std or tps_std:  # a single seed has no bars (not a cross of empty ones)
            ax.errorbar(tps, acc, xerr=[[min(tps_std, 0.99 * tps)], [tps_std]],  # > 0 on log
                        yerr=[[min(acc_std, acc)], [min(acc_std, 100.0 - acc)]],
                        fmt="none", ecolor=color, capsize=3, alpha=0.8)
        ax.scatter(tps, acc, s=MARKER_AREA, color=color, alpha=0.7, edgecolors="black",
                   linewidths=0.5)
        if numbered:
            offset = np.sqrt(MARKER_AREA) / 2 + 1  # points: just outside the marker's edge
            ax.annotate(str(sweeps.index(row["sweep"]) + 1), (tps, acc), fontsize=7,
                        textcoords="offset points", xytext=(offset, offset))
    _memory_panel(memory_ax, rows, sweeps if numbered else [])
    _log_throughput_axis(ax, table[tps_col].to_numpy(dtype=float))
    ax.set_xlabel("training throughput (tokens/s)")
    ax.set_ylabel("test accuracy (%)")
    title = f"{task}: accuracy vs throughput\n{short_text(folder, lines=1)}"
    if len(sweeps) == 1 and ": " in sweeps[0]:
        title += "\n" + short_text(_settings(sweeps[0]))
    if note:
        title = f"{short_text(note)}\n{title}"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.margins(0.15)
    low, high = ax.get_ylim()
    ax.set_ylim(max(low, 0.0), min(high, 105.0))  # no negative accuracies on the axis
    key = ["error bars: std over seeds; memory: mean over seeds"]
    budgets = sorted(set(table["max_steps"].dropna())) if "max_steps" in table.columns else []
    if len(budgets) > 1:
        key.append("runs trained for different numbers of steps (trainer.max_steps "
                   f"{', '.join(f'{steps:,.0f}' for steps in budgets)}): not a like-for-like "
                   "comparison")
    if numbered:
        key += [short_text(f"{number}: {_settings(sweep)}", width=110, lines=1)
                for number, sweep in enumerate(sweeps, start=1)]
    fig.tight_layout()  # of the panels only: the key and the cautions go below them
    key_text = fig.text(0.01, 0.0, "\n".join(key), fontsize=7, va="top", ha="left")
    if cautions:
        # Under the key, in red: what a reader of the figure alone must not miss.
        ax.annotate("\n".join(short_text(f"Caution: {caution}", width=110, lines=3)
                              for caution in cautions),
                    xy=(0, 0), xycoords=key_text, xytext=(0, -4), textcoords="offset points",
                    fontsize=7, va="top", ha="left", color="darkred", annotation_clip=False)
    save_figure(fig, path)


def _memory_panel(ax: Axes, rows: list[dict[str, Any]], sweeps: list[str]) -> None:
    """One bar per row, top to bottom, in its attention's colour (the figure's colour key):
    the row's peak memory written at its end, the row's name and seeds (and sweep number, when
    `sweeps` are numbered; its positions, when the rows have several) beside it."""
    memory_col = f"{PEAK_MEMORY_MB.name}_mean"
    # NaN (runs that do not say) is not equal to itself: None stands for it.
    positions = [None if pd.isna(row.get("positions")) else row["positions"] for row in rows]
    labels = []
    for row, kind in zip(rows, positions, strict=True):
        label = attention_label(row["attention"])
        if len(set(positions)) > 1:
            label += f", {kind or 'unrecorded'} positions"
        if sweeps:
            label = f"{sweeps.index(row['sweep']) + 1}: {label}"
        labels.append(f"{label} (n={int(row.get('n', 1))})")
    memory = [_zero_if_nan(row[memory_col]) for row in rows]
    bars = ax.barh(range(len(rows)), memory, height=0.6, alpha=0.7,
                   color=[attention_color(row["attention"]) for row in rows])
    ax.bar_label(bars, fontsize=7, padding=2, labels=[
        "n/a" if pd.isna(row[memory_col]) else f"{row[memory_col]:,.0f} MB" for row in rows])
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    # The first row on top; a few rows are centred with room around them, not stretched into
    # bars as wide as the panel is high.
    pad = max(0.0, (MIN_MEMORY_ROWS - len(rows)) / 2)
    ax.set_ylim(len(rows) - 0.5 + pad, -0.5 - pad)
    ax.set_xlim(0, 1.35 * max(max(memory), 1.0))  # room for the numbers past the longest bar
    ax.set_xlabel("peak memory (MB)")
    ax.grid(True, axis="x", alpha=0.3)


def _settings(sweep: str) -> str:
    """The overrides part of a sweep label, long decimals rounded (labels written before they
    were rounded at the start of a run)."""
    return round_floats(sweep.split(": ", 1)[1]) if ": " in sweep else "(no overrides)"


def _log_throughput_axis(ax: Axes, tokens_per_sec: np.ndarray) -> None:
    """A log x axis with plain numbers, as many per decade as the span leaves room for; no
    minor labels, so nothing overprints."""
    ax.set_xscale("log")
    log_tps = np.log10(tokens_per_sec)
    span = float(np.nanmax(log_tps) - np.nanmin(log_tps))
    subs = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if span < 1 else (1.0, 2.0, 5.0) if span < 2 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: _compact(value)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _compact(value: float) -> str:
    """A tick label short enough for 6 per decade on a narrow axis: 500, 1.5k, 7k, 150k, 1.5M
    ("5,000" beside "7,000" overprinted)."""
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    return f"{value / 1e3:g}k" if value >= 1e3 else f"{value:,.0f}"


def _zero_if_nan(value: float | None) -> float:
    return 0.0 if value is None or pd.isna(value) else float(value)
