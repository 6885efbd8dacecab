"""The MQAR state-size study as a command (scripts/mqar_study.py, scripts/study.py state_size):
its declaration, and how its plan and report read on the console and in its files. The protocol
is state_size's, the report's tables and caption state_size_report's, the figure
state_size_plot's."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import pandas as pd

from linarena.analysis.provenance import training_note
from linarena.studies.cli import add_attention_argument
from linarena.studies.declaration import Report, Study
from linarena.studies.preset import load_grid, preset_protocol
from linarena.studies.runs import load_archive, study_runs
from linarena.studies.state_size import plan_study, run_study, study_names
from linarena.studies.state_size_plot import plot_state_size
from linarena.studies.state_size_report import (
    accuracy_table,
    caption,
    figure_title,
    not_run,
    summarize,
    unfinished,
)


@dataclass(frozen=True)
class Loaded:
    """The grid (with the study.* overrides) and the runs archived by --resume-from."""

    grid: dict[str, Any]
    archived: pd.DataFrame | None


def load(args: argparse.Namespace) -> Loaded:
    grid = load_grid(args.preset, [o for o in args.overrides if o.startswith("study.")])
    archived = None if args.resume_from is None else \
        load_archive(args.resume_from, preset_protocol(args.preset, args.overrides))
    return Loaded(grid, archived)


def print_plan(plan: pd.DataFrame, jobs: int) -> None:
    """The runs left per column and step, and the hours they take `jobs` at a time."""
    hours = plan["runs"] * plan["seconds_per_run"] / 3600 / jobs
    for row, hour in zip(plan.itertuples(), hours, strict=True):
        count = f"{row.runs}" if row.exact else f"at most {row.runs}"
        took = "" if pd.isna(hour) else f", about {hour:.1f} h"
        print(f"d_model {row.d_model}, short conv {row.short_conv}, {row.stage}: {count} "
              f"runs{took}")
    known = plan[plan["exact"]]
    print(f"left: {known['runs'].sum()} runs known, at most {plan['runs'].sum()} in all; "
          + ("no run has finished yet to time them" if hours.isna().all() else
             f"about {hours[plan['exact']].sum():.1f} to {hours.sum():.1f} hours at "
             f"--jobs {jobs} (mean durations of the finished runs in each column)"))


def plan(args: argparse.Namespace, loaded: Loaded) -> None:
    names = study_names(loaded.grid, args.attention)
    print_plan(plan_study(loaded.grid, args.root, names, loaded.archived), args.jobs)


def run(args: argparse.Namespace, loaded: Loaded) -> dict[str, int]:
    return run_study(args.preset, args.root, args.attention, args.jobs, args.threads,
                     args.overrides, loaded.archived)


def collect(args: argparse.Namespace, loaded: Loaded) -> pd.DataFrame:
    return study_runs(args.root, loaded.archived)


def report(args: argparse.Namespace, loaded: Loaded, runs: pd.DataFrame) -> Report:
    """<name>_runs.csv (every run), <name>.csv (per point), <name>.md (caption and table) and
    <name>.png (the figure); PARTIAL where the grid is not finished."""
    grid = loaded.grid
    summary = summarize(runs, grid)
    absent = not_run(summary, grid, study_names(grid, args.attention))
    partial = bool(unfinished(summary, grid).any() or absent)
    return Report({
        "_runs.csv": runs, ".csv": summary,
        ".md": caption(runs, summary, grid, partial, absent)
        + training_note(runs, f"{args.name}_runs.csv") + accuracy_table(summary),
        ".png": lambda path: plot_state_size(summary, runs, path, title=figure_title(runs)),
    }, lambda paths: f"{len(runs)} runs -> {paths[1]}, {paths[3]}"
        + (" (partial)" if partial else ""))


STATE_SIZE = Study(
    name="state_size",
    description="MQAR recall against state size: train the grid of a study preset, then write "
                "its CSV, table and figure",
    load=load, run=run, plan=plan, collect=collect, report=report,
    preset="mqar_study_cpu", output="mqar_state_size", script="scripts/mqar_study.py",
    add_arguments=add_attention_argument,
    help={"--plan": "print the runs left per column and step with the hours they take at "
                    "--jobs (from the finished runs' durations); train nothing",
          "overrides": "extra train.py overrides for every run (study.* ones change the grid)"},
)
