"""MQAR recall against state size: run the study of a preset, then write its CSV and figure.

Every attention of conf/attention/ and every hybrid entry of the preset's `study:` block at
every width and short-conv setting, by the protocol of linarena.studies.state_size: every lr at
the lr seeds, the other seeds at the lr chosen on their validation accuracy, more seeds where
the outcomes split; one train.py run each in <root>/<point>/<attention>/. Finished runs are
skipped, so the same command resumes an interrupted study; with --resume-from <the runs CSV it
wrote> the runs listed there count as finished too, so a study spans sessions or machines
through its committed CSV (each row names the commit that trained it). One console line per
finished run (result, ETA); each point's train.py output goes to <root>/<point>/console.log.
Then, from the runs' summary.json files: <out>/<name>_runs.csv (every run), <name>.csv (per
attention, short conv and width: the lr chosen on validation, the median test accuracy over
seeds, the seeds that reached 90% and that success rate with its 95% Wilson interval),
<name>.md (that table) and <name>.png (the figure, every seed drawn), each with its provenance
record in <out>/provenance.json.

    python scripts/mqar_study.py --preset mqar_study_cpu --jobs 2
    python scripts/mqar_study.py --preset mqar_study_cpu --plan
    python scripts/mqar_study.py --preset mqar_study_cpu --report-only --out docs/results
    python scripts/mqar_study.py --preset mqar_study_gpu --jobs 8 --threads 2
    python scripts/mqar_study.py --jobs 2 study.short_conv=[3] trainer.max_steps=3000
    python scripts/mqar_study.py --preset mqar_study_cpu --jobs 2 --out docs/results \\
        --resume-from docs/results/mqar_state_size_runs.csv

Overrides of the study: block (study.widths=..., study.seeds=..., study.lr_seeds=null) change
the grid; the others go to every train.py run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from linarena.analysis.provenance import command_line, training_note
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
from linarena.studies.study import write_report

REPO_ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_preset_argument(parser, "mqar_study_cpu", "a conf/experiment/ preset with a study: block")
    parser.add_argument("--root", type=Path, default=None,
                        help="folder of the run folders (default outputs/studies/<preset>)")
    add_training_arguments(parser)
    add_output_arguments(parser, "mqar_state_size", None, "--root")
    add_runs_command_argument(parser)
    parser.add_argument("--resume-from", type=Path, default=None,
                        help="a runs CSV this study wrote (<name>_runs.csv): its runs count as "
                             "finished and go into the report")
    parser.add_argument("--plan", action="store_true",
                        help="print the runs left per column and step with the hours they "
                             "take at --jobs (from the finished runs' durations); train nothing")
    parser.add_argument("overrides", nargs="*", help="extra train.py overrides for every run")
    return parser.parse_args(argv)


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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = args.root or REPO_ROOT / "outputs" / "studies" / args.preset
    out = args.out or root
    try:
        grid = load_grid(args.preset, [o for o in args.overrides if o.startswith("study.")])
        archived = None
        if args.resume_from is not None:
            protocol = preset_protocol(args.preset, args.overrides)
            archived = load_archive(args.resume_from, protocol)
        if args.plan:
            print_plan(plan_study(grid, root, study_names(grid, args.attention), archived),
                       args.jobs)
            return 0
        if not args.report_only:
            counts = run_study(args.preset, root, args.attention, args.jobs, args.threads,
                               args.overrides, archived)
            print(f"outcomes: {counts}", flush=True)
        runs = study_runs(root, archived)
    except STUDY_ERRORS as error:
        return fail("mqar_study.py", error)
    summary = summarize(runs, grid)
    absent = not_run(summary, grid, study_names(grid, args.attention))
    partial = bool(unfinished(summary, grid).any() or absent)
    paths = write_report(out, args.name, {
        "_runs.csv": runs, ".csv": summary,
        ".md": caption(runs, summary, grid, partial, absent)
        + training_note(runs, f"{args.name}_runs.csv") + accuracy_table(summary),
        ".png": lambda path: plot_state_size(summary, runs, path, title=figure_title(runs)),
    }, report_command(command_line(__file__, argv), args.runs_command))
    print(f"{len(runs)} runs -> {paths[1]}, {paths[3]}" + (" (partial)" if partial else ""))
    return 0



if __name__ == "__main__":
    sys.exit(main())
