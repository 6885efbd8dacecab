"""The cross-kernel reproduction check as a command (scripts/maintainer/cross_kernel_check.py,
scripts/study.py cross_kernel): its declaration, its own arguments (the published runs CSV, the
kernel paths, the seeds and size of the sample) and its plan (--dry-run: the sample, the
commands, the CPU time). The sample, reruns and verdicts are cross_kernel's."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.analysis.bench_args import non_negative_int
from linarena.analysis.provenance import PUBLISHED_DIR
from linarena.studies import cross_kernel
from linarena.studies.declaration import Report, Study
from linarena.studies.preset import load_grid, preset_protocol
from linarena.studies.runs import load_archive
from linarena.studies.study import Task


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--runs, --kernel-paths, --seeds, --min-runs, and --dry-run (another name of --plan)."""
    parser.add_argument("--runs", type=Path,
                        default=PUBLISHED_DIR / "mqar_state_size_runs.csv",
                        help="the study's published runs CSV")
    parser.add_argument("--kernel-paths", default="default,avx2",
                        help=f"comma-separated, of {', '.join(cross_kernel.KERNEL_PATHS)}")
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=None,
                        help="rerun only these seeds of each sampled point (default: all; a "
                             "split point is still chosen on all its published seeds)")
    parser.add_argument("--min-runs", type=int, default=cross_kernel.MIN_RUNS,
                        help="runs in the sample at least (per kernel path)")
    parser.add_argument("--dry-run", dest="plan", action="store_true",
                        help="the same as --plan")


@dataclass(frozen=True)
class Loaded:
    """The kernel paths, the grid, the sample of published runs, its reruns' tasks and
    training commands, the reruns --resume-from lists and the train.py overrides."""

    paths: list[str]
    grid: dict[str, Any]
    sample: pd.DataFrame
    tasks: list[Task]
    commands: list[str]
    archived: pd.DataFrame | None
    extra: list[str]


def load(args: argparse.Namespace) -> Loaded:
    paths = cross_kernel.parse_kernel_paths(args.kernel_paths)
    grid = load_grid(args.preset, [o for o in args.overrides if o.startswith("study.")])
    extra = [o for o in args.overrides if not o.startswith("study.")]
    runs = load_archive(args.runs, preset_protocol(args.preset, extra))
    sample = cross_kernel.choose_sample(runs, grid, args.min_runs, args.seeds)
    tasks = cross_kernel.sample_tasks(sample, grid["lrs"])
    commands = cross_kernel.shown_commands(tasks, args.preset, args.root, paths, args.threads,
                                           extra, grid["entries"])
    archived = cross_kernel.load_resume(args.resume_from) if args.resume_from else None
    return Loaded(paths, grid, sample, tasks, commands, archived, extra)


def plan(args: argparse.Namespace, loaded: Loaded) -> None:
    """The sample (per point: why, its seeds' published accuracies), the commands, the time."""
    sample, paths = loaded.sample, loaded.paths
    print(f"sample: {len(sample)} runs per kernel path, {len(paths)} kernel paths "
          f"({', '.join(paths)})")
    for key, point in sample.groupby(["attention", "short_conv", "d_model", "lr"], sort=False):
        accuracies = ", ".join(f"{100 * acc:.1f}" for acc in point["test_acc"])
        print(f"  {key[0]} conv {key[1]} d{key[2]} lr {key[3]:g}: seeds "
              f"{list(point['seed'])} ({point['reason'].iloc[0]}; published test % {accuracies})")
    print("commands:")
    for line in loaded.commands:
        print(f"  {line}")
    seconds, how = cross_kernel.estimate_cpu_seconds(sample, paths, loaded.archived)
    print(f"estimated CPU time: {seconds / 3600:.1f} CPU-hours ({how})")


def run(args: argparse.Namespace, loaded: Loaded) -> dict[str, int]:
    return cross_kernel.run_check(loaded.tasks, args.preset, args.root, loaded.paths, args.jobs,
                                  args.threads, loaded.extra, loaded.archived,
                                  loaded.grid["entries"])


def collect(args: argparse.Namespace, loaded: Loaded) -> pd.DataFrame:
    return cross_kernel.rerun_rows(loaded.sample, args.root, loaded.paths, loaded.archived)


def report(args: argparse.Namespace, loaded: Loaded, reruns: pd.DataFrame) -> Report:
    """<name>.csv (a row per rerun) and <name>_points.csv (per point and kernel path: the
    verdict), recorded with the reruns' training commands."""
    points = cross_kernel.points_table(loaded.sample, reruns, loaded.paths)
    verdicts = [f"{row.attention} conv {row.short_conv} d{row.d_model} lr {row.lr:g} "
                f"[{row.kernel_path}]: {row.verdict}" for row in points.itertuples(index=False)]
    runs = len(loaded.sample) * len(loaded.paths)
    return Report({".csv": reruns, "_points.csv": points}, lambda written: "\n".join(
        [*verdicts, f"{len(reruns)} reruns of {runs} -> {written[0]}, {written[1]}"]),
        trained_by=" ; ".join(loaded.commands))


CROSS_KERNEL = Study(
    name="cross_kernel",
    description="Cross-kernel reproduction check: rerun a sample of a study's published runs "
                "under other CPU kernel paths (or the GPU) and say per point whether the "
                "outcomes agree with the published rate",
    load=load, run=run, plan=plan, collect=collect, report=report, add_arguments=add_arguments,
    preset="mqar_study_cpu", root="cross_kernel", output="cross_kernel",
    script="scripts/maintainer/cross_kernel_check.py",
    help={"--preset": "the study's preset",
          "--resume-from": "a cross_kernel.csv written before: its reruns count as finished",
          "--plan": "print the sample, the commands and the CPU time; train nothing",
          "overrides": "the train.py overrides the study ran with (default none)"},
)
