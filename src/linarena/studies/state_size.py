"""The MQAR state-size study (after Based, Arora et al. 2024, Figure 3): recall against state
size, every attention of conf/attention/ at every width, short-conv setting, lr and seed of a
study preset's grid (preset.load_grid).

Grid: with `lr_seed: null` every (lr, seed) is trained. With `lr_seed: <s>` the learning rate of
each (attention, short conv, width) is chosen on seed s's runs (validation only, choose_lr) and
the other seeds run at that learning rate only: fewer runs, said in the table's caption.
Report: per point the chosen lr, the median test accuracy and the statistics of
statistics.point_statistics; a table (attention x width) and a figure (state_size_plot).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.attention.variants import check_variant_names, label, variant_names
from linarena.studies.preset import load_grid
from linarena.studies.runs import GROUP, study_runs
from linarena.studies.statistics import STATISTICS_COLUMNS, SUCCESS_THRESHOLD, point_statistics
from linarena.studies.study import StudyPoint, Task, group_tasks, pending, run_tasks

# Validation accuracies closer than this are a tie (500 examples x 8 queries: steps of 2.5e-4).
TIE = 1e-4


def plan_points(grid: dict[str, Any], seeds: Sequence[int] | None = None) -> list[StudyPoint]:
    """Every (width, short_conv, lr, seed) of the grid for `seeds` (default: the grid's),
    ordered so that a partial study is as useful as possible: seed by seed, all points at the
    middle learning rate first, then the neighbouring ones; short conv on first, then by width."""
    lrs = [float(lr) for lr in grid["lrs"]]
    middle = (len(lrs) - 1) / 2
    rank = {lr: abs(index - middle) for index, lr in enumerate(lrs)}
    seeds = grid["seeds"] if seeds is None else seeds
    points = [StudyPoint(int(width), int(conv), lr, int(seed)) for width, conv, lr, seed
              in itertools.product(grid["widths"], grid["short_conv"], lrs, seeds)]
    return sorted(points, key=lambda p: (seeds.index(p.seed), rank[p.lr], -p.short_conv,
                                         p.d_model))


def choose_lr(runs: pd.DataFrame) -> pd.Series:
    """Per (attention, short_conv, d_model): the lr with the highest median val/acc_best over
    its seeds; ties (within TIE) go to the lower lr. Test accuracy is never read. A diverged
    run has no val/acc_best: its lr is never chosen unless every lr diverged (then the lowest)."""
    chosen = {}
    for key, group in runs.groupby(GROUP):
        per_lr = group.groupby("lr")["val_acc_best"].median().sort_index()
        if per_lr.isna().all():
            chosen[key] = float(per_lr.index[0])
            continue
        best = per_lr.max()
        chosen[key] = float(per_lr[per_lr >= best - TIE].index[0])
    return pd.Series(chosen, name="lr").rename_axis(GROUP)


def _later_seed_tasks(
    grid: dict[str, Any], root: Path, names: Sequence[str], archived: pd.DataFrame | None = None,
) -> list[Task]:
    """The runs of the seeds after lr_seed: each (attention, short conv, width) at the lr its
    lr_seed runs chose, grouped into one task per point."""
    runs = study_runs(root, archived)
    chosen = choose_lr(runs[runs["seed"] == grid["lr_seed"]])
    later = [(StudyPoint(int(width), int(conv), float(lr), int(seed)), name)
             for (name, conv, width), lr in chosen.items() if name in names
             for seed in grid["seeds"] if seed != grid["lr_seed"]]
    return pending(group_tasks(later), root, frozenset(runs["run"]))


def run_study(
    preset: str, root: Path, attentions: Sequence[str] | None = None, jobs: int = 2,
    threads: int = 1, extra: Sequence[str] = (), archived: pd.DataFrame | None = None,
) -> dict[str, int]:
    """Train every missing run of the study, `jobs` points at a time; a count per outcome.
    `archived`: finished runs from an earlier session (runs.load_archive), not rerun.

    With the grid's lr_seed set: first every lr at that seed, then the other seeds at the lr
    chosen (on validation) per attention, short conv and width."""
    done = frozenset() if archived is None else frozenset(archived["run"])
    names = check_variant_names(attentions) if attentions else variant_names()
    grid = load_grid(preset, [o for o in extra if o.startswith("study.")])
    first_seeds = grid["seeds"] if grid["lr_seed"] is None else [grid["lr_seed"]]
    points = plan_points(grid, first_seeds)
    todo = pending(((point, list(names)) for point in points), root, done)
    print(f"{preset}: {len(points)} points x {len(names)} attentions (seeds {first_seeds}); "
          f"{sum(len(left) for _, left in todo)} runs to go, {jobs} points at a time; "
          f"per-run logs in {root}/<point>/console.log", flush=True)
    counts: dict[str, int] = {}
    run_tasks(todo, preset, root, jobs, threads, extra, counts)
    if grid["lr_seed"] is None:
        return counts
    later = _later_seed_tasks(grid, root, names, archived)
    print(f"{preset}: lr chosen on seed {grid['lr_seed']}; {sum(len(n) for _, n in later)} "
          "runs of the other seeds to go", flush=True)
    run_tasks(later, preset, root, jobs, threads, extra, counts)
    return counts


def summarize(runs: pd.DataFrame, lr_seed: int | None = None) -> pd.DataFrame:
    """One row per (attention, short_conv, d_model) at its chosen lr (chosen on the lr_seed's
    runs when given, else on every seed's): the median test accuracy over seeds, the seeds that
    reached SUCCESS_THRESHOLD, the median step of the best validation accuracy, lrs tried, then
    the STATISTICS_COLUMNS (success rate with its Wilson interval)."""
    basis = runs if lr_seed is None else runs[runs["seed"] == lr_seed]
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
            "chosen_lr": lr, "lr_chosen_on": "all seeds" if lr_seed is None else f"seed {lr_seed}",
            "seeds": stats["n_seeds"], "recalled": stats["successes"],
            "test_acc_median": stats["median_acc"], "test_acc_min": stats["min_acc"],
            "test_acc_max": stats["max_acc"],
            "val_acc_median": at_lr["val_acc_best"].median(),
            "best_step_median": at_lr["best_step"].median(),
            "max_steps": first["max_steps"], "lrs_tried": int(tried[key]),
            **{column: stats[column] for column in STATISTICS_COLUMNS},
        })
    return pd.DataFrame(rows).sort_values(GROUP).reset_index(drop=True)


def accuracy_table(summary: pd.DataFrame) -> str:
    """Markdown: a row per attention and short_conv, a column per width; each cell the median
    test accuracy % over seeds at the chosen lr and the seeds that recalled, e.g. "98.9 (2/3)"."""
    cells = summary.assign(cell=[
        f"{100 * row.test_acc_median:.1f} ({row.recalled}/{row.seeds})"
        for row in summary.itertuples()])
    table = cells.pivot(index=["attention", "short_conv"], columns="d_model", values="cell")
    order = {name: index for index, name in enumerate(variant_names())}
    table = table.sort_index(key=lambda index: index.map(
        lambda value: order.get(value, len(order)) if isinstance(value, str) else -value))
    lines = ["| attention | short conv | " + " | ".join(f"d={w}" for w in table.columns) + " |",
             "|---|---|" + "---|" * len(table.columns)]
    for (name, conv), row in table.iterrows():
        values = " | ".join("–" if pd.isna(v) else v for v in row)
        lines.append(f"| {label(name)} | {conv or 'off'} | {values} |")
    return "\n".join(lines) + "\n"


def not_run(summary: pd.DataFrame, grid: dict, attentions: list[str]) -> list[str]:
    """What the grid has and the study has not finished a point of yet: an attention's label
    when none of its points is, else the label with the short-conv settings (and widths, when
    not every width of one is missing) left."""
    have = set(zip(summary["attention"], summary["short_conv"], summary["d_model"], strict=True))
    absent = []
    for name in attentions:
        left = {conv: [w for w in grid["widths"] if (name, conv, w) not in have]
                for conv in grid["short_conv"]}
        if all(len(widths) == len(grid["widths"]) for widths in left.values()):
            absent.append(label(name))
            continue
        parts = [(f"conv {conv}" if conv else "without conv")
                 + ("" if len(widths) == len(grid["widths"])
                    else " at d=" + ", ".join(map(str, widths)))
                 for conv, widths in left.items() if widths]
        if parts:
            absent.append(f"{label(name)} {' and '.join(parts)}")
    return absent


def caption(runs: pd.DataFrame, summary: pd.DataFrame, grid: dict, partial: bool,
            absent: list[str]) -> str:
    """What the table shows and how it was chosen, above it in <name>.md."""
    first = runs.iloc[0]
    lr_rule = ("on seed {}'s runs; the other seeds ran at that lr only".format(grid["lr_seed"])
               if grid["lr_seed"] is not None else "on the median over seeds")
    text = (f"MQAR, vocab {first['vocab_size']}, length {first['seq_len']}, "
            f"{first['num_pairs']} pairs, {first['num_layers']} layers, at most "
            f"{first['max_steps']} steps (early stop at val acc 0.99); seeds {grid['seeds']}; "
            f"lrs {grid['lrs']}.\n\nEach cell: median test accuracy (%) over seeds at the lr "
            f"with the best validation accuracy (chosen {lr_rule}; ties to the lower lr; test "
            f"accuracy never read), and (k/n) the seeds whose test accuracy reached "
            f"{100 * SUCCESS_THRESHOLD:.0f}%. Median step of the best validation accuracy: "
            f"{summary['best_step_median'].median():.0f} of at most {first['max_steps']}.\n\n")
    if partial:
        left = f" Not finished yet: {'; '.join(absent)}." if absent else ""
        text = (f"PARTIAL: the study has not finished. Rows with fewer than "
                f"{len(grid['lrs'])} lrs tried or {len(grid['seeds'])} seeds are incomplete."
                f"{left}\n\n" + text)
    return text


def figure_title(runs: pd.DataFrame, grid: dict) -> str:
    """The figure's title: the task and what the line and points are."""
    first = runs.iloc[0]
    return (f"MQAR, vocab {first['vocab_size']}, length {first['seq_len']}, "
            f"{first['num_pairs']} pairs; median of {len(grid['seeds'])} seeds (line), "
            "every seed (points)")
