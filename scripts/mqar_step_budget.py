"""Was the MQAR study's step budget enough? Rerun its points with more steps and compare.

Reads a finished study's runs CSV (mqar_study.py's <name>_runs.csv), takes the points at
--widths and --short-conv with the lr the study chose for each (on validation, on the grid's
lr seeds), and trains every seed the study ran there with trainer.max_steps=--max-steps, one run
each in <root>/<run id>/ (finished runs are skipped, so the command resumes; --resume-from the
runs CSV it wrote counts those runs as finished too). Then writes into --out <name>_runs.csv
(the longer runs), <name>.csv (per point, both budgets: median test accuracy, seeds at 90%
with the success rate's 95% Wilson interval, median best step, median gain) and <name>.md (that
table), with their provenance records.

    python scripts/mqar_step_budget.py --preset mqar_study_cpu --widths 16 --short-conv 3 \\
        --max-steps 4000 --jobs 2 --out docs/results --study docs/results/mqar_state_size_runs.csv

With --tail N instead of --max-steps, each of the study's runs is continued from its last
checkpoint (in --study-root, the study's run folders) for N more steps at a constant lr,
--tail-lr times the study's (studies.step_budget.TailPoint): the study's run continued, not a
new schedule. Where a study run's checkpoint is gone (a study resumed from its
runs CSV in another session) or its run did not finish (stopped mid-training: a last.ckpt from
its middle, no summary.json), --retrain-study trains that run again first, from scratch, and
throws away a tail that continued the run before; a run repeats bit for bit only on the CPU
kernels that trained it, so on another machine's the retrain differs from its row of --study,
and its tail continues the retrain. Each tail is compared with the run
it continued: its row in <name>_runs.csv names that run's result (start_* columns), and the
caption counts the tails that continued a retrain differing from its published row.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import pandas as pd

from linarena.analysis.bench_args import non_negative_int, positive_int
from linarena.analysis.provenance import command_line, training_note
from linarena.analysis.result_files import read_csv_checked
from linarena.attention.variants import check_variant_names
from linarena.studies.cli import (
    STUDY_ERRORS,
    add_output_arguments,
    add_preset_argument,
    add_runs_command_argument,
    add_training_arguments,
    fail,
    report_command,
)
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
from linarena.studies.study import Task, pending, run_tasks, write_report

REPO_ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_preset_argument(parser, "mqar_study_cpu", "the study's preset")
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
    parser.add_argument("--root", type=Path,
                        default=REPO_ROOT / "outputs" / "studies" / "mqar_step_budget",
                        help="folder of the run folders (default outputs/studies/mqar_step_budget)")
    add_training_arguments(parser)
    parser.add_argument("--resume-from", type=Path, default=None,
                        help="a runs CSV this script wrote (<name>_runs.csv): its runs count "
                             "as finished and go into the report")
    add_output_arguments(parser, "mqar_step_budget", None, "--root")
    add_runs_command_argument(parser)
    return parser.parse_args(argv)


def unfinished_starts(tasks: list[Task]) -> list[Path]:
    """The last.ckpt each tail of `tasks` (TailPoints) starts from, where its study run did
    not finish (or is gone)."""
    return [study_checkpoint(point.study_root, point.point, name)
            for point, names in tasks for name in names
            if not study_run_finished(point.study_root, point.point, name)]


def retrain_study(study: pd.DataFrame, tasks: list[Task], args: argparse.Namespace,
                  entries: dict[str, list[str]]) -> None:
    """Train the study runs of `tasks` that did not finish in --study-root (no last.ckpt, or
    stopped mid-training) again there (the study's own commands), removing any tail in --root
    that continued the run before (it would be paired with the new run), then say how many
    differ from their rows of `study`."""
    missing = [(point, [name for name in names
                        if not study_run_finished(args.study_root, point, name)])
               for point, names in tasks]
    missing = [(point, names) for point, names in missing if names]
    for point, names in missing:  # an unfinished run folder is trained again from scratch
        for name in names:
            shutil.rmtree(args.study_root / point.folder_name / name, ignore_errors=True)
            shutil.rmtree(args.root / point.folder_name / name, ignore_errors=True)
    print(f"retraining {sum(len(n) for _, n in missing)} study runs for their checkpoints",
          flush=True)
    counts: dict[str, int] = {}
    run_tasks(missing, args.preset, args.study_root, args.jobs, args.threads, [], counts,
              entries=entries)
    runs = {f"{point.folder_name}/{name}" for point, names in missing for name in names}
    retrained = load_study([args.study_root])
    differ = unreproduced(study, retrained[retrained["run"].isin(runs)])
    if len(differ):
        row = differ.iloc[0]
        print(f"{len(differ)} of {len(runs)} study runs trained again differ from their rows in "
              f"{args.study} (e.g. {row['run']}: test accuracy {row['test_acc_retrained']}, "
              f"best step {row['best_step_retrained']}; published {row['test_acc']}, best step "
              f"{row['best_step']}): a run repeats bit for bit only on the CPU kernels that "
              "trained it, so their tails continue the runs trained here, and the table "
              "compares each tail with the run it continued", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or args.root
    steps = args.max_steps or args.tail
    longer_steps = [f"trainer.max_steps={steps}"]
    try:
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
            if absent and args.retrain_study and not args.report_only:
                retrain_study(study, plan_tasks(points, study), args, grid["entries"])
                absent = unfinished_starts(tasks)
                if absent:
                    raise FileNotFoundError(
                        f"{absent[0]} (and {len(absent) - 1} more): training the study run "
                        "again did not finish it; its train.log there says why")
            if absent and not args.report_only:
                raise FileNotFoundError(
                    f"{absent[0]} (and {len(absent) - 1} more) not found or not finished (a run "
                    "stopped mid-training leaves a last.ckpt but no summary.json): a tail "
                    "continues the study's own finished runs; point --study-root at the study's "
                    "run folders, or add --retrain-study to train them again there")
        else:
            tasks = plan_tasks(points, study)
        archived = (None if args.resume_from is None else
                    load_archive(args.resume_from, preset_protocol(args.preset, longer_steps)))
        done = frozenset() if archived is None else frozenset(archived["run"])
        if not args.report_only:
            todo = pending(tasks, args.root, done)
            what = f"a constant-lr tail of {steps}" if args.tail else f"max_steps {steps}"
            print(f"{len(points)} points, the study's seeds, {what}: "
                  f"{sum(len(n) for _, n in todo)} runs to go", flush=True)
            counts: dict[str, int] = {}
            run_tasks(todo, args.preset, args.root, args.jobs, args.threads,
                      [] if args.tail else longer_steps, counts, entries=grid["entries"])
            print(f"outcomes: {counts}", flush=True)
        longer = study_runs(args.root, archived)
        longer = longer[longer["max_steps"] == steps]
        if args.tail:  # each tail with the run it continued (kept in the runs CSV it writes)
            starts = (None if archived is None else read_csv_checked(
                args.resume_from, required_columns=["run", *START_COLUMNS.values()]))
            longer = with_starts(longer, args.study_root, args.tail_lr, starts)
    except STUDY_ERRORS as error:
        return fail("mqar_step_budget.py", error)
    # A tail ran at a fraction of the study's lr: paired with the study's run at its own lr.
    paired = longer.assign(lr=longer["lr"] / args.tail_lr) if args.tail else longer
    base = continued(study, paired) if args.tail else study
    table = compare(base, paired, points)
    if table.empty:
        print(f"mqar_step_budget.py: error: no run with max_steps {steps} at the chosen points "
              f"under {args.root} yet: run without --report-only", file=sys.stderr)
        return 2
    planned = sum(len(names_at) for _, names_at in tasks)
    paths = write_report(out, args.name, {
        "_runs.csv": longer, ".csv": table,
        ".md": caption(table, planned, int(table["seeds"].sum()),
                       args.tail_lr if args.tail else None,
                       len(unreproduced(study, base)))
        + training_note(longer, f"{args.name}_runs.csv")
        + comparison_table(table, study_names(grid), tail=bool(args.tail)),
    }, report_command(command_line(__file__, argv), args.runs_command))
    print(f"{len(longer)} longer runs -> {paths[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
