"""The card's training: the published protocols run for one subject through the studies' own
runner (studies.study: a run with a summary.json is finished, so the same command resumes), in
folders under the card's root: <root>/state_size/<point>/<name>/ and
<root>/listops/seed<s>/<name>/.

- The MQAR state-size study (studies.state_size): the preset's grid at the widths and
  short-conv settings asked for, each column in the study's three steps (every lr at the lr
  seeds, the lr chosen on validation accuracy; the other seeds at it; more seeds where they
  split).
- The small-budget ListOps sweep (studies.seed_sweep, `trainer.max_steps=300`, the default
  config): every seed asked for, each run in a process of its own, two threads, as published.
- The MQAR mixture (studies.mixture_study, `experiment=mqar_mixture_cpu`): each kind of
  positions of the preset's study block at its seeds, then its more seeds where they split at
  some test setting, one thread each, in <root>/<positions>_seed<s>/<name>/.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.analysis.runs import read_run
from linarena.arena.subject import Subject
from linarena.attention.variants import owns_short_conv, variant_names
from linarena.metrics import TEST_ACC, TOKENS_PER_SEC
from linarena.studies.mixture import load_runs, wanted_seeds
from linarena.studies.mixture_study import MixturePoint, load_mixture_grid
from linarena.studies.preset import load_grid
from linarena.studies.runs import study_runs
from linarena.studies.seed_sweep import LISTOPS_OVERRIDES, LISTOPS_THREADS, SweepPoint
from linarena.studies.state_size import STAGES, columns, stage_tasks
from linarena.studies.study import pending, run_tasks
from linarena.training.summary import SUMMARY_FILE

STATE_SIZE_PRESET = "mqar_study_cpu"
MIXTURE_PRESET = "mqar_mixture_cpu"


def state_size_grid(subject: Subject, widths: Sequence[int],
                    short_convs: Sequence[int] | None = None,
                    study: Sequence[str] = ()) -> dict[str, Any]:
    """The study preset's grid at `widths` (and `short_convs`, default the preset's; `study`:
    study.* overrides of it, e.g. fewer lrs), with the subject's own entry only: its
    overrides, or the preset's settings of it (the window of 16 it gives swa and
    based_layer)."""
    grid = load_grid(STATE_SIZE_PRESET,
                     [f"study.widths=[{','.join(map(str, widths))}]", *study])
    if short_convs is not None:
        grid["short_conv"] = list(short_convs)
    own = list(subject.overrides) or grid["entries"].get(subject.name, [])
    grid["entries"] = {subject.name: own} if own else {}
    return grid


def state_size_columns(subject: Subject, grid: dict[str, Any]) -> list[tuple[int, int]]:
    """The (width, short conv) columns the study trains the subject at."""
    return [column for column in columns(grid) if subject.trains_at(column[1])]


def run_state_size(subject: Subject, grid: dict[str, Any], root: Path, jobs: int,
                   extra: Sequence[str]) -> dict[str, int]:
    """Train what is left of the subject's state-size runs (one thread each, as the study),
    column by column and step by step; a count per outcome."""
    counts: dict[str, int] = {}
    for column in state_size_columns(subject, grid):
        for stage in STAGES:
            todo = stage_tasks(stage, grid, root, [subject.name], column, None)
            print(f"state size, d_model {column[0]}, short conv {column[1]}, {stage}: "
                  f"{sum(len(n) for _, n in todo)} runs to go", flush=True)
            run_tasks(todo, STATE_SIZE_PRESET, root, jobs, 1, extra, counts,
                      entries=grid["entries"])
    return counts


def state_size_runs(root: Path) -> pd.DataFrame | None:
    """The finished state-size runs under `root` (studies.runs' rows), None before any."""
    if not root.is_dir() or not any(root.rglob(SUMMARY_FILE)):
        return None
    return study_runs(root, None)


def _entries(subject: Subject, own: Sequence[str] = ()) -> dict[str, list[str]] | None:
    """The study runner's entries for the subject: its overrides and `own` (None if none)."""
    own = [*subject.overrides, *own]
    if subject.name in subject.parts and subject.name not in variant_names():
        # a variant of another conf folder: train_commands names only conf/attention/'s
        own = [f"attention={subject.name}", *own]
    return {subject.name: own} if own else None


def run_listops(subject: Subject, seeds: Sequence[int], root: Path, extra: Sequence[str]
                ) -> dict[str, int]:
    """Train the subject's ListOps runs left at `seeds`, one at a time; a count per outcome."""
    entries = _entries(subject)
    todo = pending([(SweepPoint(seed), [subject.name]) for seed in seeds], root, frozenset())
    print(f"listops: {len(todo)} runs to go", flush=True)
    counts: dict[str, int] = {}
    run_tasks(todo, None, root, 1, LISTOPS_THREADS, [*LISTOPS_OVERRIDES, *extra], counts,
              entries=entries)
    return counts


def listops_runs(subject: Subject, seeds: Sequence[int], root: Path) -> pd.DataFrame:
    """One row per finished ListOps run: seed, test_acc (a fraction), tokens_per_sec,
    duration_s, cpu_s, commit, cpu, cpu_kernels."""
    rows = []
    for seed in seeds:
        path = root / SweepPoint(seed).folder_name / subject.name / SUMMARY_FILE
        if not path.is_file():
            continue
        record = read_run(path)
        rows.append({"seed": seed, "test_acc": record.metrics.get(TEST_ACC.key),
                     "tokens_per_sec": record.metrics.get(TOKENS_PER_SEC.key),
                     "duration_s": record.duration_s, "cpu_s": record.cpu_s,
                     "commit": record.commit,
                     "cpu": record.cpu, "cpu_kernels": record.cpu_kernels})
    return pd.DataFrame(rows, columns=["seed", "test_acc", "tokens_per_sec", "duration_s",
                                       "cpu_s", "commit", "cpu", "cpu_kernels"])


def mixture_grid(study: Sequence[str] = ()) -> dict[str, Any]:
    """The mixture preset's study block (positions, seeds, more_seeds), with `study`: its study.*
    overrides."""
    return load_mixture_grid(MIXTURE_PRESET, list(study))


def run_mixture(subject: Subject, grid: dict[str, Any], root: Path, jobs: int,
                extra: Sequence[str]) -> dict[str, int]:
    """Train the subject's mixture runs left: every kind of positions at the grid's seeds, then
    the more seeds of the positions whose seeds split; one thread each, as the study; a count
    per outcome. A layer with its own short convolutions runs without the preset's, as there."""
    own_conv = any(owns_short_conv(p, subject.conf_dir) for p in subject.parts)
    entries = _entries(subject, ["model.short_conv=0"] if own_conv else [])
    counts: dict[str, int] = {}
    todo = pending([(MixturePoint(positions, seed), [subject.name])
                    for seed in grid["seeds"] for positions in grid["positions"]],
                   root, frozenset())
    print(f"mixture: {len(todo)} runs to go", flush=True)
    run_tasks(todo, MIXTURE_PRESET, root, jobs, 1, extra, counts, entries=entries)
    runs = mixture_runs(root)
    if grid["more_seeds"] and runs is not None:
        wanted = wanted_seeds(runs, [subject.name], grid)
        more = pending([(MixturePoint(positions, seed), [subject.name])
                        for (_, positions), seeds in wanted.items()
                        for seed in seeds if seed in grid["more_seeds"]], root, frozenset())
        print(f"mixture, more seeds where they split: {len(more)} runs to go", flush=True)
        run_tasks(more, MIXTURE_PRESET, root, jobs, 1, extra, counts, entries=entries)
    return counts


def mixture_runs(root: Path) -> pd.DataFrame | None:
    """The finished mixture runs under `root`, a row per run and test setting
    (studies.mixture.RUN_COLUMNS); None before any."""
    if not root.is_dir() or not any(root.rglob(SUMMARY_FILE)):
        return None
    return load_runs([root])[0]
