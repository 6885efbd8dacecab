"""The report of the MQAR state-size study (state_size): one row per point at its chosen lr with
the statistics of every study (statistics.point_statistics), the markdown table and its
caption, and what the grid has that the study has not finished yet."""

from __future__ import annotations

from typing import Any

import pandas as pd

from linarena.analysis.statistics import STATISTICS_COLUMNS, SUCCESS_THRESHOLD, point_statistics
from linarena.attention.patterns import pattern_label
from linarena.attention.variants import owns_short_conv, variant_names
from linarena.studies.runs import GROUP
from linarena.studies.state_size import choose_lr, lr_basis, trains_at


def lr_rule(grid: dict[str, Any]) -> str:
    """Which runs chose the lr, in words."""
    if grid["lr_seeds"] is None:
        return "every seed"
    return "seed" + ("s " if len(grid["lr_seeds"]) > 1 else " ") + \
        ", ".join(map(str, grid["lr_seeds"]))


def summarize(runs: pd.DataFrame, grid: dict[str, Any]) -> pd.DataFrame:
    """One row per (attention, short_conv, d_model) at its chosen lr (chosen on the grid's
    lr_seeds' runs): the median test accuracy over every seed at that lr, the seeds that reached
    SUCCESS_THRESHOLD, the median step of the best validation accuracy, lrs tried, then the
    STATISTICS_COLUMNS (success rate with its Wilson interval)."""
    basis = lr_basis(runs, grid)
    tried = basis.groupby(GROUP)["lr"].nunique()
    groups = dict(list(runs.groupby(GROUP)))
    rows = []
    for key, lr in choose_lr(basis).items():
        at_lr = groups[key][groups[key]["lr"] == lr]
        first = at_lr.iloc[0]
        stats = point_statistics(at_lr["test_acc"])
        rows.append({
            **dict(zip(GROUP, key, strict=True)), "label": first["label"],
            "state_size": first["state_size"], "state_kind": first["state_kind"],
            "chosen_lr": lr, "lr_chosen_on": lr_rule(grid),
            "seeds": stats["n_seeds"], "recalled": stats["successes"],
            "test_acc_median": stats["median_acc"], "test_acc_min": stats["min_acc"],
            "test_acc_max": stats["max_acc"],
            "val_acc_median": at_lr["val_acc_best"].median(),
            "best_step_median": at_lr["best_step"].median(),
            "max_steps": first["max_steps"], "lrs_tried": int(tried[key]),
            **{column: stats[column] for column in STATISTICS_COLUMNS},
        })
    return pd.DataFrame(rows).sort_values(GROUP).reset_index(drop=True)


def unfinished(summary: pd.DataFrame, grid: dict[str, Any]) -> pd.Series:
    """Per row of `summary`: whether its point still lacks runs of the protocol (an lr not
    tried, a seed of `seeds` missing, or split seeds without all of more_seeds)."""
    base = len(grid["seeds"])
    split = (summary["recalled"] > 0) & (summary["recalled"] < summary["seeds"])
    return ((summary["lrs_tried"] < len(grid["lrs"])) | (summary["seeds"] < base)
            | (split & (summary["seeds"] < base + len(grid["more_seeds"]))))


def conv_cell(name: str, conv: int) -> str:
    """The short-conv column of a row: its kernel, "own" for a layer with its own convolutions,
    else "off"."""
    if conv:
        return str(conv)
    parts = [part.partition("*")[0] for part in name.split("+")]
    return "own" if any(owns_short_conv(part) for part in parts) else "off"


def accuracy_table(summary: pd.DataFrame) -> str:
    """Markdown: a row per attention and short_conv, a column per width; each cell the median
    test accuracy % over seeds at the chosen lr and the seeds that recalled, e.g. "98.9 (2/3)"."""
    cells = summary.assign(cell=[
        f"{100 * row.test_acc_median:.1f} ({row.recalled}/{row.seeds})"
        for row in summary.itertuples()])
    table = cells.pivot(index=["attention", "short_conv"], columns="d_model", values="cell")
    # Registry order, then the hybrids by name; short conv on before off.
    hybrids = sorted(set(summary["attention"]) - set(variant_names()))
    order = {name: index for index, name in enumerate([*variant_names(), *hybrids])}
    table = table.sort_index(key=lambda index: index.map(
        lambda value: order[value] if isinstance(value, str) else -value))
    lines = ["| attention | short conv | " + " | ".join(f"d={w}" for w in table.columns) + " |",
             "|---|---|" + "---|" * len(table.columns)]
    for (name, conv), row in table.iterrows():
        values = " | ".join("–" if pd.isna(v) else v for v in row)
        lines.append(f"| {pattern_label(name)} | {conv_cell(name, conv)} | {values} |")
    return "\n".join(lines) + "\n"


def not_run(summary: pd.DataFrame, grid: dict, names: list[str]) -> list[str]:
    """What the grid has and the study has not finished a point of yet: a name's label when
    none of its points is, else the label with the short-conv settings (and widths, when not
    every width of one is missing) left."""
    have = set(zip(summary["attention"], summary["short_conv"], summary["d_model"], strict=True))
    absent = []
    for name in names:
        convs = [conv for conv in grid["short_conv"] if trains_at(name, conv)]
        left = {conv: [w for w in grid["widths"] if (name, conv, w) not in have] for conv in convs}
        if all(len(widths) == len(grid["widths"]) for widths in left.values()):
            absent.append(pattern_label(name))
            continue
        parts = [(f"conv {conv}" if conv else "without conv")
                 + ("" if len(widths) == len(grid["widths"])
                    else " at d=" + ", ".join(map(str, widths)))
                 for conv, widths in left.items() if widths]
        if parts:
            absent.append(f"{pattern_label(name)} {' and '.join(parts)}")
    return absent


def caption(runs: pd.DataFrame, summary: pd.DataFrame, grid: dict, partial: bool,
            absent: list[str]) -> str:
    """What the table shows and how its lr and its number of seeds were chosen, above it in
    <name>.md."""
    first = runs.iloc[0]
    more = (f"; where they split (some reached {100 * SUCCESS_THRESHOLD:.0f}% and some did not) "
            f"seeds {grid['more_seeds']} were added at that lr" if grid["more_seeds"] else "")
    entries = "".join(f" {pattern_label(name)}: {' '.join(extra)}."
                      for name, extra in grid["entries"].items())
    text = (f"MQAR, vocab {first['vocab_size']}, length {first['seq_len']}, "
            f"{first['num_pairs']} pairs, {first['num_layers']} layers, at most "
            f"{first['max_steps']} steps (early stop at val acc 0.99); lrs {grid['lrs']}.\n\n"
            f"Seeds: every lr at {lr_rule(grid)}; the lr of each point is the one with the best "
            f"median validation accuracy over those runs (ties to the lower lr; test accuracy "
            f"never read); seeds {grid['seeds']} at that lr{more}.\n\n"
            f"Each cell: median test accuracy (%) over the seeds at the chosen lr, and (k/n) the "
            f"seeds whose test accuracy reached {100 * SUCCESS_THRESHOLD:.0f}%. Short conv "
            f"\"own\": a layer with its own short convolutions, trained without model.short_conv."
            f"{entries} Median step of the best validation accuracy: "
            f"{summary['best_step_median'].median():.0f} of at most {first['max_steps']}.\n\n")
    if partial:
        left = f" Not finished yet: {'; '.join(absent)}." if absent else ""
        text = (f"PARTIAL: the study has not finished; rows with fewer lrs or seeds than the "
                f"protocol are incomplete.{left}\n\n" + text)
    return text


def figure_title(runs: pd.DataFrame) -> str:
    """The figure's title: the task and what the line and points are."""
    first = runs.iloc[0]
    return (f"MQAR, vocab {first['vocab_size']}, length {first['seq_len']}, "
            f"{first['num_pairs']} pairs; median over seeds (line), every seed (points)")
