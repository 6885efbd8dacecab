"""Compare training runs: accuracy against throughput and memory, per sweep, task and attention.

Gathers finished runs from local folders (every summary.json below them) or from W&B, and
writes to ``--out``: ``results.csv`` and ``results.md`` (sweep x task x attention, mean ± sample
std over seeds of the compared metrics of linarena.metrics: test accuracy, tokens/s, peak memory,
parameter count; runs that failed counted apart) and one ``scatter_<task>.png`` per task and
multirun folder (accuracy against tokens/s, beside each row's peak memory in MB). The scatter
plots an earlier call wrote there and this one does not (their provenance records say which)
are removed, with their records; no other file is touched.

Cautions (run_cautions) follow the table and close each plot's key: rows of fewer than 3 seeds
(one seed is an anecdote), and runs that trained on CPU after other jobs of their
``train.py -m`` process (Hydra's basic launcher runs the jobs one after the other in one
process), whose peak memory includes what the earlier jobs left resident.

A sweep is what a run was compared with when it was started: its multirun folder (or "runs" for
single runs), plus the overrides other than attention and seed. Runs of different sweeps are
never averaged together; ``--sweep`` picks some. Debug runs (debug=smoke/fdr/overfit) are left
out unless ``--debug``. A sweep that spans sessions or machines is compared with the runs CSV
it wrote before (``--resume-from``, linarena.analysis.runs_archive). A run folder with a
checkpoint but no summary.json (stopped before it finished) is listed with the command that
resumes it.

    python scripts/compare.py --runs outputs/
    python scripts/compare.py --runs outputs/ --sweep multiruns/2025-01-01_10-00-00 --published
    python scripts/compare.py --wandb my-team/linarena --filter task=text --filter tags=final
    python scripts/compare.py --runs outputs/sweeps --resume-from docs/results/results_runs.csv
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from linarena.analysis.order import task_sort_key
from linarena.analysis.plots import plot_accuracy_vs_throughput
from linarena.analysis.provenance import (
    REPO_ROOT,
    command_line,
    load,
    record,
    remove_results,
    trained_by,
)
from linarena.analysis.results_captions import THEN
from linarena.analysis.run_cautions import (
    failed_note,
    few_seeds_caution,
    folder_of,
    runs_count,
    shared_caution,
    shared_process_runs,
    steps_warnings,
    throughput_warnings,
    unfinished_runs,
)
from linarena.analysis.runs import (
    RunRecord,
    drop_reruns,
    load_local_runs,
    parse_filters,
    select_sweeps,
)
from linarena.analysis.runs_archive import load_runs_csv, with_archive
from linarena.analysis.table import aggregate_runs, runs_table, to_markdown
from linarena.analysis.wandb_runs import load_wandb_runs
from linarena.commands import resume_command
from linarena.files import write_atomic
from linarena.training.summary import SUMMARY_FILE


def parse_args(argv: list[str] | None, default_out: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--runs", nargs="+", type=Path, metavar="DIR",
                        help="folders searched recursively for summary.json")
    source.add_argument("--wandb", metavar="ENTITY/PROJECT",
                        help="read finished runs from the W&B API (needs an API key: wandb login)")
    parser.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                        help="keep matching runs; repeatable. Local: a summary.json key, dotted "
                             "for nesting (task=listops, hparams.d_model=128, "
                             "config.model.short_conv=true). W&B: group, tags, state, name, or a "
                             "config key (attention=performer)")
    parser.add_argument("--sweep", action="append", default=[], metavar="LABEL",
                        help="keep the runs of this sweep (a label as listed, or its start, e.g. "
                             "multiruns/2025-01-01_10-00-00); repeatable; default: every sweep")
    parser.add_argument("--resume-from", type=Path, default=None, metavar="CSV",
                        help="a runs CSV this script wrote before (results_runs.csv): its runs "
                             "count beside the summary.json files found, which win over their "
                             "rows (a sweep that spans sessions or machines); --filter does not "
                             "apply to its rows, --sweep does")
    parser.add_argument("--debug", action="store_true",
                        help="include debug runs (debug=smoke, fdr, overfit)")
    parser.add_argument("--published", action="store_true",
                        help="add the published LRA accuracies (not measured here) as a column")
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--note", default=None,
                        help="a line at the top of results.md and of every plot's title, e.g. "
                             "'PARTIAL: the runs finished so far' for a sweep still running")
    parser.add_argument("--runs-command", default=None,
                        help="the command that made the runs, for the outputs' provenance "
                             "records (<out>/provenance.json)")
    return parser.parse_args(argv)


COMPARE_PY = REPO_ROOT / "scripts" / "compare.py"
# The names of the plots this script writes: scatter_<task>.png, scatter_<number>_<task>.png.
PLOT_NAME = re.compile(r"scatter_.+\.png")


def write_plots(table: pd.DataFrame, out: Path, note: str | None = None,
                shared_runs: Mapping[tuple[str, str], list[RunRecord]] | None = None
                ) -> tuple[list[str], list[Path]]:
    """One scatter plot per multirun folder and task (the sweeps of one folder, e.g. the
    trials of an Optuna search, share a plot), `note` atop each title, and in its key the
    cautions of its rows of few seeds and of its runs in `shared_runs` (shared_process_runs);
    returns a line per folder for the listing and the files written."""
    folders = sorted({folder_of(sweep) for sweep in table["sweep"]})
    # A task in one folder only keeps the plain name (stable across reruns that add folders);
    # a task several folders share gets the folder's number.
    pairs = zip(table["sweep"], table["task"], strict=True)
    folders_of_task = Counter(task for _, task in {(folder_of(s), t) for s, t in pairs})
    listing, written = [], []
    for number, folder in enumerate(folders, start=1):
        of_folder = table[[folder_of(sweep) == folder for sweep in table["sweep"]]]
        for task in sorted(set(of_folder["task"]), key=task_sort_key):
            rows = of_folder[of_folder["task"] == task]
            if not rows["n"].gt(0).any():
                continue  # every run failed: nothing to place
            shared = folders_of_task[task] > 1
            name = f"scatter_{number}_{task}.png" if shared else f"scatter_{task}.png"
            cautions = [caution for caution in (
                few_seeds_caution(rows, with_task=False),
                shared_caution((shared_runs or {}).get((folder, task), []), with_folder=False))
                if caution]
            plot_accuracy_vs_throughput(rows, task, folder, out / name, note=note,
                                        cautions=cautions)
            written.append(out / name)
        listing.append(f"  {number}: {folder}")
    return listing, written


def earlier_plots(out: Path) -> list[Path]:
    """The scatter plots in `out` that this script wrote (their provenance records' last
    command is compare.py): a later call removes those it does not write again."""
    ours = command_line(COMPARE_PY, []).split()
    return [out / name for name, entry in load(out).items()
            if PLOT_NAME.fullmatch(name)
            and entry["command"].rpartition(THEN)[2].split()[:len(ours)] == ours]


def main(argv: list[str] | None = None, default_out: Path = Path("outputs/compare")) -> int:
    """scripts/compare.py; returns the exit status (2 for bad input, with a one-line error)."""
    args = parse_args(argv, default_out)
    # Said first: also when no run finished.
    for run in unfinished_runs(args.runs or [], args.debug):
        print(f"note: {run} has checkpoints but no {SUMMARY_FILE} (stopped before it finished), "
              f"so it is not compared; resume: {resume_command(run)}")
    try:
        filters = parse_filters(args.filter)
        if args.runs:
            # Every run of a resumed sweep may be archived, none trained in this session yet.
            archived_only = args.resume_from is not None and not any(
                folder.is_dir() and any(folder.rglob("summary.json")) for folder in args.runs)
            records = [] if archived_only else load_local_runs(args.runs, filters,
                                                               include_debug=args.debug)
        else:
            records = load_wandb_runs(args.wandb, filters, include_debug=args.debug)
        if args.resume_from is not None:
            if filters:
                raise ValueError("--filter reads summary.json keys, which the rows of "
                                 f"--resume-from {args.resume_from} do not have: pick runs with "
                                 "--sweep instead")
            records = with_archive(records, load_runs_csv(args.resume_from))
        if not records:
            debug = "" if args.debug else " (debug runs are left out; --debug includes them)"
            raise ValueError(f"no finished run matches the filters {filters}{debug}")
        records = select_sweeps(records, args.sweep)
    except (ValueError, FileNotFoundError) as error:
        print(f"compare.py: error: {error}", file=sys.stderr)
        return 2
    records, notes = drop_reruns(records)
    failed = failed_note(records)
    for note in [*notes, *([failed] if failed else [])]:
        print(f"note: {note}")
    for warning in [*steps_warnings(records), *throughput_warnings(records)]:
        print(f"warning: {warning}")
    table = aggregate_runs(records, published=args.published)
    shared = shared_process_runs(records)
    cautions = [caution for caution in (few_seeds_caution(table),
                                        *(shared_caution(runs) for runs in shared.values()))
                if caution]
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / "results.csv", lambda file: table.to_csv(file, index=False))
    runs = runs_table(records)
    write_atomic(args.out / "results_runs.csv", lambda file: runs.to_csv(file, index=False))
    markdown = "".join([to_markdown(table), *(f"\n**Caution:** {c}\n" for c in cautions),
                        f"\n{trained_by(runs)}\n"])
    if args.note:
        markdown = f"**{args.note}**\n\n{markdown}"
    write_atomic(args.out / "results.md", lambda file: file.write(markdown))
    earlier = earlier_plots(args.out)
    listing, plots = write_plots(table, args.out, args.note, shared)
    command = command_line(COMPARE_PY, argv)
    record([args.out / "results.csv", args.out / "results_runs.csv", args.out / "results.md",
            *plots],
           f"{args.runs_command}{THEN}{command}" if args.runs_command else command)
    # Once this call's plots are in place: a plot of runs no longer compared would sit beside
    # them as if it were one of this call's.
    stale = sorted(path for path in earlier if path not in plots)
    remove_results(stale)
    print(to_markdown(table))
    for caution in cautions:
        print(f"caution: {caution}")
    sweeps = sorted(set(table["sweep"]))
    if len(sweeps) > 1:
        print("Sweeps (pick some with --sweep LABEL):")
        for sweep in sweeps:
            print(f"  {sweep} ({runs_count(sum(r.sweep == sweep for r in records))})")
    if len(listing) > 1:
        print("Folders (scatter_<number>_<task>.png where folders share a task):", *listing,
              sep="\n")
    if stale:
        print(f"removed {', '.join(path.name for path in stale)}, written by an earlier call "
              "for runs not compared now")
    print(f"{runs_count(len(records))}; wrote results.csv, results.md and scatter plots to "
          f"{args.out}")
    return 0
