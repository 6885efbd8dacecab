"""The step-budget check as a command (scripts/mqar_step_budget.py, scripts/study.py
step_budget): its declaration, its own arguments (the study's runs CSV, the points, the longer
budget or the tail) and how it trains: the longer runs, after the study runs a tail continues
when --retrain-study trains them again. The comparison itself is step_budget's."""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.analysis.bench_args import non_negative_int, positive_int
from linarena.analysis.provenance import training_note
from linarena.analysis.result_files import read_csv_checked
from linarena.attention.variants import check_variant_names
from linarena.studies.cli import add_attention_argument
from linarena.studies.declaration import Report, Study
from linarena.studies.preset import load_grid, preset_protocol
from linarena.studies.runs import load_archive, load_study, study_runs
from linarena.studies.state_size import study_names
from linarena.studies.step_budget import (
    START_COLUMNS,
    caption,
    chosen_points,
    compare,
    comparison_table,
    continued,
    plan_tail,
    study_checkpoint,
    study_run_finished,
    unreproduced,
    with_starts,
)
from linarena.studies.step_budget import plan as plan_tasks
from linarena.studies.study import Task, pending, run_tasks
from linarena.system import REPO_ROOT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The study's runs CSV, its points, the longer budget (--max-steps) or the tail (--tail,
    --tail-lr, --study-root, --retrain-study), and --attention."""
    parser.add_argument("--study", type=Path, required=True,
                        help="the study's runs CSV (mqar_study.py's <name>_runs.csv)")
    parser.add_argument("--widths", type=positive_int, nargs="+", required=True,
                        help="d_model points")
    parser.add_argument("--short-conv", type=non_negative_int, nargs="+", default=[3, 0],
                        help="short-conv settings of the points")
    budget = parser.add_mutually_exclusive_group(required=True)
    budget.add_argument("--max-steps", type=positive_int,
                        help="trainer.max_steps of the longer runs")
    budget.add_argument("--tail", type=positive_int,
                        help="continue each study run for this many steps at a constant lr")
    parser.add_argument("--tail-lr", type=float, default=0.1,
                        help="the tail's constant lr, as a fraction of the study's (default 0.1)")
    parser.add_argument("--study-root", type=Path,
                        default=REPO_ROOT / "outputs" / "studies" / "mqar_study_cpu",
                        help="the study's run folders, whose last.ckpt the tails start from")
    parser.add_argument("--retrain-study", action="store_true",
                        help="with --tail: train again, into --study-root, the study runs whose "
                             "last.ckpt is missing there (a study resumed from its runs CSV) "
                             "or that did not finish (no summary.json); "
                             "says which differ from their rows of --study (other kernels)")
    add_attention_argument(parser)


@dataclass(frozen=True)
class Loaded:
    """The study's grid and runs, the chosen points, the runs to train there and the longer
    runs --resume-from lists as finished."""

    grid: dict[str, Any]
    study: pd.DataFrame
    points: pd.DataFrame
    tasks: list[Task]
    archived: pd.DataFrame | None

    @property
    def planned(self) -> int:
        return sum(len(names) for _, names in self.tasks)


def steps(args: argparse.Namespace) -> int:
    """The longer budget: --max-steps, or the tail's --tail."""
    return args.max_steps or args.tail


def longer_steps(args: argparse.Namespace) -> list[str]:
    return [f"trainer.max_steps={steps(args)}"]


def unfinished_starts(tasks: list[Task]) -> list[Path]:
    """The last.ckpt each tail of `tasks` (TailPoints) starts from, where its study run did
    not finish (or is gone)."""
    return [study_checkpoint(point.study_root, point.point, name)
            for point, names in tasks for name in names
            if not study_run_finished(point.study_root, point.point, name)]


def load(args: argparse.Namespace) -> Loaded:
    """The points the study has at --widths and --short-conv, with the lr it chose; a tail
    whose study run is missing is an error unless --retrain-study trains it again."""
    grid = load_grid(args.preset)
    names = check_variant_names(args.attention) if args.attention else study_names(grid)
    study = load_archive(args.study, preset_protocol(args.preset))
    points = chosen_points(study, grid, args.widths, args.short_conv, names)
    if points.empty:
        raise ValueError(f"{args.study} has no run at d_model {args.widths} with short conv "
                         f"{args.short_conv} for {names}: pick points the study has")
    if args.tail:
        tasks = plan_tail(points, study, args.study_root, args.tail, args.tail_lr)
        absent = unfinished_starts(tasks)
        if absent and not args.retrain_study and not args.report_only:
            raise FileNotFoundError(
                f"{absent[0]} (and {len(absent) - 1} more) not found or not finished (a run "
                "stopped mid-training leaves a last.ckpt but no summary.json): a tail "
                "continues the study's own finished runs; point --study-root at the study's "
                "run folders, or add --retrain-study to train them again there")
    else:
        tasks = plan_tasks(points, study)
    archived = (None if args.resume_from is None else
                load_archive(args.resume_from, preset_protocol(args.preset, longer_steps(args))))
    return Loaded(grid, study, points, tasks, archived)


def retrain_study(args: argparse.Namespace, loaded: Loaded) -> None:
    """Train the study runs the tails continue that did not finish in --study-root (no
    last.ckpt, or stopped mid-training) again there (the study's own commands), removing any
    tail in --root that continued the run before (it would be paired with the new run), then
    say how many differ from their rows of --study."""
    missing = [(point, [name for name in names
                        if not study_run_finished(args.study_root, point, name)])
               for point, names in plan_tasks(loaded.points, loaded.study)]
    missing = [(point, names) for point, names in missing if names]
    for point, names in missing:  # an unfinished run folder is trained again from scratch
        for name in names:
            shutil.rmtree(args.study_root / point.folder_name / name, ignore_errors=True)
            shutil.rmtree(args.root / point.folder_name / name, ignore_errors=True)
    print(f"retraining {sum(len(n) for _, n in missing)} study runs for their checkpoints",
          flush=True)
    counts: dict[str, int] = {}
    run_tasks(missing, args.preset, args.study_root, args.jobs, args.threads, [], counts,
              entries=loaded.grid["entries"])
    runs = {f"{point.folder_name}/{name}" for point, names in missing for name in names}
    retrained = load_study([args.study_root])
    differ = unreproduced(loaded.study, retrained[retrained["run"].isin(runs)])
    if len(differ):
        row = differ.iloc[0]
        print(f"{len(differ)} of {len(runs)} study runs trained again differ from their rows in "
              f"{args.study} (e.g. {row['run']}: test accuracy {row['test_acc_retrained']}, "
              f"best step {row['best_step_retrained']}; published {row['test_acc']}, best step "
              f"{row['best_step']}): a run repeats bit for bit only on the CPU kernels that "
              "trained it, so their tails continue the runs trained here, and the table "
              "compares each tail with the run it continued", flush=True)


def run(args: argparse.Namespace, loaded: Loaded) -> dict[str, int]:
    """The longer runs (or tails) not yet finished, after the study runs --retrain-study
    trains again for the tails."""
    if args.tail and args.retrain_study and unfinished_starts(loaded.tasks):
        retrain_study(args, loaded)
        absent = unfinished_starts(loaded.tasks)
        if absent:
            raise FileNotFoundError(
                f"{absent[0]} (and {len(absent) - 1} more): training the study run "
                "again did not finish it; its train.log there says why")
    done = frozenset() if loaded.archived is None else frozenset(loaded.archived["run"])
    todo = pending(loaded.tasks, args.root, done)
    what = f"a constant-lr tail of {args.tail}" if args.tail else f"max_steps {args.max_steps}"
    print(f"{len(loaded.points)} points, the study's seeds, {what}: "
          f"{sum(len(n) for _, n in todo)} runs to go", flush=True)
    counts: dict[str, int] = {}
    run_tasks(todo, args.preset, args.root, args.jobs, args.threads,
              [] if args.tail else longer_steps(args), counts, entries=loaded.grid["entries"])
    return counts


def collect(args: argparse.Namespace, loaded: Loaded) -> pd.DataFrame:
    """The longer runs; each tail with the result of the run it continued (START_COLUMNS,
    kept in the runs CSV it writes)."""
    longer = study_runs(args.root, loaded.archived)
    longer = longer[longer["max_steps"] == steps(args)]
    if not args.tail:
        return longer
    starts = (None if loaded.archived is None else read_csv_checked(
        args.resume_from, required_columns=["run", *START_COLUMNS.values()]))
    return with_starts(longer, args.study_root, args.tail_lr, starts)


def report(args: argparse.Namespace, loaded: Loaded, longer: pd.DataFrame) -> Report:
    """<name>_runs.csv (the longer runs), <name>.csv and <name>.md (per point, both budgets)."""
    # A tail ran at a fraction of the study's lr: paired with the study's run at its own lr.
    paired = longer.assign(lr=longer["lr"] / args.tail_lr) if args.tail else longer
    base = continued(loaded.study, paired) if args.tail else loaded.study
    table = compare(base, paired, loaded.points)
    if table.empty:
        raise ValueError(f"no run with max_steps {steps(args)} at the chosen points under "
                         f"{args.root} yet: run without --report-only")
    return Report({
        "_runs.csv": longer, ".csv": table,
        ".md": caption(table, loaded.planned, int(table["seeds"].sum()),
                       args.tail_lr if args.tail else None,
                       len(unreproduced(loaded.study, base)))
        + training_note(longer, f"{args.name}_runs.csv")
        + comparison_table(table, study_names(loaded.grid), tail=bool(args.tail)),
    }, lambda paths: f"{len(longer)} longer runs -> {paths[1]}")


STEP_BUDGET = Study(
    name="step_budget",
    description="Was the MQAR study's step budget enough? Rerun its points with more steps "
                "and compare",
    load=load, run=run, collect=collect, report=report, add_arguments=add_arguments,
    preset="mqar_study_cpu", root="mqar_step_budget", output="mqar_step_budget",
    overrides=False, script="scripts/mqar_step_budget.py",
    help={"--preset": "the study's preset",
          "--resume-from": "a runs CSV this script wrote (<name>_runs.csv): its runs count as "
                           "finished and go into the report"},
)
