"""PNG figures: benchmark time/memory against length, accuracy against throughput per task."""

from __future__ import annotations

import textwrap
from pathlib import Path

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
                                note: str | None = None) -> None:
    """Scatter of test accuracy against tokens/s for one task and one multirun folder, marker
    area ~ peak memory, colour = attention (attention_color); `note` (e.g. PARTIAL: ...) is
    the title's first line.

    ``table`` has rows of :func:`linarena.analysis.table.aggregate_runs` (a sweep column and
    the ``<name>_mean`` / ``_std`` columns); rows without a finished run are left out. Error bars
    are the seed std (absent for n=1), cut at 0% and 100%. No text is drawn on the axes except a
    sweep number beside each marker when the folder holds several sweeps (settings), e.g. the
    trials of an Optuna search; the legend and the key under the plot say the rest, and the key
    says so when the rows' runs had different step budgets (a ``max_steps`` column).
    """
    table = table[table["n"] > 0] if "n" in table.columns else table
    if table.empty:
        raise ValueError(f"no runs of task {task!r} to plot")
    acc_col, tps_col, mem_col = (f"{m.name}_mean" for m in (TEST_ACC, TOKENS_PER_SEC,
                                                             PEAK_MEMORY_MB))
    memory = table[mem_col].to_numpy(dtype=float)
    # Marker area proportional to memory, the largest 900 pt^2, none smaller than 40 pt^2.
    sizes = np.maximum(900.0 * memory / np.nanmax(memory), 40.0) if np.nanmax(memory) > 0 \
        else np.full_like(memory, 200.0)
    sweeps = list(dict.fromkeys(table["sweep"])) if "sweep" in table.columns else []
    numbered = len(sweeps) > 1
    fig = Figure(figsize=(7, 5))
    ax = fig.subplots()
    for row, size in zip(table.to_dict("records"), sizes, strict=True):
        color = attention_color(row["attention"])
        acc, acc_std = row[acc_col], _zero_if_nan(row.get(f"{TEST_ACC.name}_std"))
        tps, tps_std = row[tps_col], _zero_if_nan(row.get(f"{TOKENS_PER_SEC.name}_std"))
        if acc_std or tps_std:  # a single seed has no bars (not a cross of empty ones)
            ax.errorbar(tps, acc, xerr=[[min(tps_std, 0.99 * tps)], [tps_std]],  # > 0 on log
                        yerr=[[min(acc_std, acc)], [min(acc_std, 100.0 - acc)]],
                        fmt="none", ecolor=color, capsize=3, alpha=0.8)
        ax.scatter(tps, acc, s=size, color=color, alpha=0.6, edgecolors="black",
                   linewidths=0.5)
        if numbered:
            offset = np.sqrt(size) / 2 + 1  # points: just outside the marker's edge
            ax.annotate(str(sweeps.index(row["sweep"]) + 1), (tps, acc), fontsize=7,
                        textcoords="offset points", xytext=(offset, offset))
    handles = []
    for name in sorted(set(table["attention"]), key=attention_sort_key):
        rows = table[table["attention"] == name]
        detail = "" if numbered else (f": {rows[mem_col].iloc[0]:,.0f} MB, "
                                      f"n={int(rows['n'].iloc[0]) if 'n' in rows else 1}")
        handles.append(Line2D([], [], marker="o", linestyle="", color=attention_color(name),
                              label=attention_label(name) + detail))
    ax.legend(handles=handles, title="attention" + ("" if numbered else ": peak memory, seeds"),
              fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
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
    key = ["marker area ~ peak memory; bars: std over seeds"]
    budgets = sorted(set(table["max_steps"].dropna())) if "max_steps" in table.columns else []
    if len(budgets) > 1:
        key.append("runs trained for different numbers of steps (trainer.max_steps "
                   f"{', '.join(f'{steps:,.0f}' for steps in budgets)}): not a like-for-like "
                   "comparison")
    if numbered:
        key += [short_text(f"{number}: {_settings(sweep)}", width=90, lines=1)
                for number, sweep in enumerate(sweeps, start=1)]
    fig.text(0.01, 0.0, "\n".join(key), fontsize=7, va="top", ha="left")
    fig.tight_layout()
    save_figure(fig, path)


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
