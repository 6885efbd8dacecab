"""The MQAR state-size study (after Based, Arora et al. 2024, Figure 3): recall against state
size, every attention of conf/attention/ (and the preset's hybrid entries) at every width,
short-conv setting, lr and seed of a study preset's grid (preset.load_grid).

Protocol, one (width, short conv) column at a time, so a partial study has whole columns:
1. every lr at each of the grid's lr_seeds; the lr of each (attention, short conv, width) is
   chosen on the median validation accuracy of those seeds (choose_lr; test accuracy is never
   read);
2. the grid's other seeds at that lr only;
3. where those seeds split (some reach SUCCESS_THRESHOLD and some do not: split_points), the
   grid's more_seeds at that lr, so a rate that can go either way rests on more seeds.
With `lr_seeds: null` every seed tries every lr in step 1. A layer with its own short
convolutions (variants.owns_short_conv) is trained at short_conv 0 only: model.short_conv would
add a second convolution it does not have in its paper.
Report: per point the chosen lr, the median test accuracy and the statistics of
statistics.point_statistics; a table (attention x width) and a figure (state_size_plot).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.analysis.statistics import SUCCESS_THRESHOLD
from linarena.attention.variants import check_variant_names, owns_short_conv, variant_names
from linarena.studies.preset import load_grid
from linarena.studies.runs import GROUP, study_runs
from linarena.studies.study import StudyPoint, Task, group_tasks, pending, run_tasks
from linarena.training.summary import SUMMARY_FILE

# Validation accuracies closer than this are a tie (500 examples x 8 queries: steps of 2.5e-4).
TIE = 1e-4


def study_names(grid: dict[str, Any], attentions: Sequence[str] | None = None) -> list[str]:
    """What the study trains: `attentions` (default every variant of conf/attention/), then the
    grid's entries that are not variants (hybrid stacks)."""
    names = check_variant_names(attentions) if attentions else variant_names()
    return [*names, *(name for name in grid["entries"] if name not in variant_names())]


def trains_at(name: str, short_conv: int) -> bool:
    """Whether the study trains `name` (a variant or a hybrid's pattern name) at `short_conv`:
    a model with a layer that owns its short convolutions only at 0."""
    parts = [part.partition("*")[0] for part in name.split("+")]
    return short_conv == 0 or not any(owns_short_conv(part) for part in parts)


def columns(grid: dict[str, Any]) -> list[tuple[int, int]]:
    """The (width, short conv) columns in the order the study trains them: width by width,
    short conv on first."""
    return [(int(w), int(c)) for w in grid["widths"]
            for c in sorted(grid["short_conv"], reverse=True)]


def lr_points(grid: dict[str, Any], width: int, conv: int) -> list[StudyPoint]:
    """Step 1 at one column: every lr at each lr seed (every seed with lr_seeds null), seed by
    seed, the middle learning rates first."""
    lrs = [float(lr) for lr in grid["lrs"]]
    middle = (len(lrs) - 1) / 2
    seeds = grid["seeds"] if grid["lr_seeds"] is None else grid["lr_seeds"]
    points = [StudyPoint(width, conv, lr, int(seed)) for lr, seed in itertools.product(lrs, seeds)]
    return sorted(points, key=lambda p: (seeds.index(p.seed), abs(lrs.index(p.lr) - middle)))


def lr_basis(runs: pd.DataFrame, grid: dict[str, Any]) -> pd.DataFrame:
    """The runs the lr is chosen on: those of the grid's lr_seeds (every run when null)."""
    return runs if grid["lr_seeds"] is None else runs[runs["seed"].isin(grid["lr_seeds"])]


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


def split_points(runs: pd.DataFrame, grid: dict[str, Any]) -> set[tuple[str, int, int]]:
    """The (attention, short conv, width) points whose runs of the grid's `seeds` at the chosen
    lr split: 0 < successes < n."""
    chosen = choose_lr(lr_basis(runs, grid))
    at_lr = runs.merge(chosen.reset_index(), on=[*GROUP, "lr"])
    at_lr = at_lr[at_lr["seed"].isin(grid["seeds"])]
    split = set()
    for key, group in at_lr.groupby(GROUP):
        successes = int((group["test_acc"] >= SUCCESS_THRESHOLD).sum())
        if 0 < successes < len(group):
            split.add(key)
    return split


def seed_tasks(grid: dict[str, Any], runs: pd.DataFrame, root: Path, names: Sequence[str],
               seeds: Sequence[int], only: set[tuple[str, int, int]] | None = None) -> list[Task]:
    """The runs of `seeds` at the lr chosen per (attention, short conv, width) on `runs` (the
    finished runs: runs.study_runs of `root` and the archive), for `names` (and only the points
    in `only` when given), grouped into one task per point and without the finished ones."""
    chosen = choose_lr(lr_basis(runs, grid))
    wanted = [(StudyPoint(int(width), int(conv), float(lr), int(seed)), name)
              for (name, conv, width), lr in chosen.items()
              if name in names and (only is None or (name, conv, width) in only)
              for seed in seeds]
    return pending(group_tasks(wanted), root, frozenset(runs["run"]))


STAGES = ("every lr", "the other seeds at the chosen lr", "more seeds where the seeds split")


def stage_seeds(stage: str, grid: dict[str, Any]) -> list[int]:
    """The seeds one of the later STAGES steps trains: the grid's seeds other than lr_seeds,
    or more_seeds."""
    if stage == STAGES[1]:
        return [s for s in grid["seeds"] if s not in (grid["lr_seeds"] or [])]
    return list(grid["more_seeds"])


def stage_tasks(stage: str, grid: dict[str, Any], root: Path, names: Sequence[str],
                column: tuple[int, int], archived: pd.DataFrame | None,
                runs: pd.DataFrame | None = None) -> list[Task]:
    """The unfinished runs of one STAGES step of the protocol at one (width, short conv).
    `runs`: the finished runs (study_runs of `root` and `archived`), loaded here when None."""
    width, conv = column
    if stage == STAGES[0]:
        done = frozenset() if archived is None else frozenset(archived["run"])
        return pending(((point, list(names)) for point in lr_points(grid, width, conv)),
                       root, done)
    seeds = stage_seeds(stage, grid)
    if not seeds:
        return []
    if runs is None:
        runs = study_runs(root, archived)
    only = None if stage == STAGES[1] else split_points(runs, grid)
    tasks = seed_tasks(grid, runs, root, names, seeds, only)
    return [(point, left) for point, left in tasks if (point.d_model, point.short_conv) == column]


def run_study(
    preset: str, root: Path, attentions: Sequence[str] | None = None, jobs: int = 2,
    threads: int = 1, extra: Sequence[str] = (), archived: pd.DataFrame | None = None,
) -> dict[str, int]:
    """Train every missing run of the study (the protocol above), column by column, `jobs`
    points at a time; a count per outcome. `archived`: finished runs from an earlier session
    (runs.load_archive), not rerun."""
    grid = load_grid(preset, [o for o in extra if o.startswith("study.")])
    extra = [o for o in extra if not o.startswith("study.")]
    names = study_names(grid, attentions)
    counts: dict[str, int] = {}
    print(f"{preset}: {len(names)} attentions, columns (width, short conv) {columns(grid)}; "
          f"per-run logs in {root}/<point>/console.log", flush=True)
    for column in columns(grid):
        here = [name for name in names if trains_at(name, column[1])]
        for stage in STAGES:
            todo = stage_tasks(stage, grid, root, here, column, archived)
            print(f"d_model {column[0]}, short conv {column[1]}, {stage}: "
                  f"{sum(len(n) for _, n in todo)} runs to go", flush=True)
            run_tasks(todo, preset, root, jobs, threads, extra, counts, entries=grid["entries"])
    return counts


def plan_study(grid: dict[str, Any], root: Path, names: Sequence[str],
               archived: pd.DataFrame | None = None) -> pd.DataFrame:
    """The runs the study still has to train, per column and STAGES step: `runs`, exact where
    the steps before it are finished (which lr each point trains at is then known), else the
    most it can be (`exact` False: every point's seeds split, for the last step); and
    `seconds_per_run`, the mean duration of the finished runs in that column (else at that
    width, else of all of them; NaN before any): the mean, because the runs left take about
    their number times it, where early-stopped runs pull a median far below the runs that
    train every step."""
    done = study_runs(root, archived) if archived is not None or any(
        root.rglob(SUMMARY_FILE)) else None
    rows = []
    for width, conv in columns(grid):
        here = [name for name in names if trains_at(name, conv)]
        earlier_done = True
        for stage in STAGES:
            if earlier_done:
                todo = stage_tasks(stage, grid, root, here, (width, conv), archived, done)
                runs = sum(len(left) for _, left in todo)
            else:
                runs = len(here) * len(stage_seeds(stage, grid))
            rows.append({"d_model": width, "short_conv": conv, "stage": stage, "runs": runs,
                         "exact": earlier_done,
                         "seconds_per_run": _seconds(done, width, conv)})
            earlier_done = earlier_done and runs == 0
    return pd.DataFrame(rows)


def _seconds(runs: pd.DataFrame | None, width: int, conv: int) -> float:
    """The mean duration of the finished runs at (`width`, `conv`), else at `width`, else of
    all of them, else NaN."""
    if runs is None or runs["duration_s"].isna().all():
        return float("nan")
    timed = runs.dropna(subset=["duration_s"])
    at_width = timed[timed["d_model"] == width]
    in_column = at_width[at_width["short_conv"] == conv]
    for where in (in_column, at_width):
        if len(where):
            return float(where["duration_s"].mean())
    return float(timed["duration_s"].mean())
