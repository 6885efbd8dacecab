"""Compare training runs: accuracy against throughput and memory, per sweep, task and attention.

Gathers finished runs from local folders (every summary.json below them) or from W&B, and
writes to ``--out``: ``results.csv`` and ``results.md`` (sweep x task x attention, mean ± sample
std over seeds of the compared metrics of linarena.metrics: test accuracy, tokens/s, peak memory,
parameter count; runs that failed counted apart) and one ``scatter_<task>.png`` per task and
multirun folder (accuracy against tokens/s, beside each row's peak memory in MB). The scatter
plots an earlier call wrote there and this one does not (their provenance records say which)
are removed, with their records; no other file is touched.

Cautions follow the table and close each plot's key: rows of fewer than 3 seeds (one seed is
an anecdote), and runs that trained on CPU after other jobs of their ``train.py -m`` process
(Hydra's basic launcher runs the jobs one after the other in one process), whose peak memory
includes what the earlier jobs left resident.

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
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd
import yaml

from linarena.analysis.order import attention_label, attention_sort_key, task_sort_key
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
from linarena.analysis.runs import (
    RunRecord,
    drop_reruns,
    load_local_runs,
    load_wandb_runs,
    parse_filters,
    parse_summary_file,
    select_sweeps,
)
from linarena.analysis.runs_archive import load_runs_csv, with_archive
from linarena.analysis.table import aggregate_runs, runs_table, to_markdown
from linarena.files import write_atomic
from linarena.metrics import TOKENS_PER_SEC
from linarena.training.commands import resume_command
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
# Rows with fewer finished seeds than this are a caution: the published ListOps rows differ by
# about a point over 10 seeds, and a single 100-step seed put elu+1 7 points below softmax.
MIN_SEEDS = 3
SEED_CAUTION = "one seed is an anecdote; see scripts/seed_sweep.py for a comparison with intervals"
# The launcher that runs the jobs of one `train.py -m` one after the other in its own process
# (the default; submitit's start a process per job).
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
SHARED_CAUTION = ("on CPU a run's peak memory then includes what the earlier jobs left "
                  "resident, so it is not the run's alone; compare the memory of runs that "
                  "each had a process of their own (scripts/seed_sweep.py trains them so)")


def folder_of(sweep: str) -> str:
    """The multirun folder (or "runs") of a sweep label, without its settings."""
    return sweep.split(": ", 1)[0]


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


def few_seeds_caution(table: pd.DataFrame, with_task: bool = True) -> str | None:
    """The caution for the rows of `table` (aggregate_runs) with 1 to MIN_SEEDS - 1 finished
    seeds, naming them (with their task), or None."""
    few = table[table["n"].between(1, MIN_SEEDS - 1)]
    if few.empty:
        return None
    names = dict.fromkeys(
        f"{f'{row.task}/' if with_task else ''}{attention_label(row.attention)} (n={row.n})"
        for row in few.itertuples())
    return f"fewer than {MIN_SEEDS} seeds: {', '.join(names)}; {SEED_CAUTION}"


def shared_process_runs(records: Iterable[RunRecord]
                        ) -> dict[tuple[str, str], list[RunRecord]]:
    """The runs that trained on CPU after other jobs of their `train.py -m` process, by
    multirun folder and task, in attention and seed order."""
    shared: dict[tuple[str, str], list[RunRecord]] = {}
    for run in sorted(records, key=lambda r: (attention_sort_key(r.attention), r.seed)):
        if _after_other_jobs(Path(run.source).parent) and \
                parse_summary_file(Path(run.source)).get("device") == "cpu":
            shared.setdefault((folder_of(run.sweep), run.task), []).append(run)
    return shared


def _after_other_jobs(run: Path) -> bool:
    """Whether the run folder's last training (its start, or its latest resume) was a job of a
    multirun under the basic launcher after its first job, from the Hydra config that job
    saved; False where there is none (a W&B run, a run of a runs CSV)."""
    for saved in (run / ".hydra" / "resume" / "hydra.yaml", run / ".hydra" / "hydra.yaml"):
        if saved.is_file():
            try:
                hydra = (yaml.safe_load(saved.read_text()) or {}).get("hydra") or {}
            except yaml.YAMLError:
                return False
            return (hydra.get("mode") == "MULTIRUN"
                    and (hydra.get("launcher") or {}).get("_target_") == BASIC_LAUNCHER
                    and int((hydra.get("job") or {}).get("num") or 0) > 0)
    return False


def shared_caution(runs: list[RunRecord], with_folder: bool = True) -> str | None:
    """The caution for `runs`, of one multirun folder and task (shared_process_runs), naming
    them (with the folder and task), or None when there are none."""
    if not runs:
        return None
    where = f"{runs[0].task}, {folder_of(runs[0].sweep)}: " if with_folder else ""
    names = ", ".join(f"{attention_label(run.attention)} s{run.seed}" for run in runs)
    return (f"{where}{runs_count(len(runs))} ({names}) trained after other jobs of the same "
            f"`train.py -m` process: {SHARED_CAUTION}")


def runs_count(count: int) -> str:
    """'1 run', '3 runs'."""
    return f"{count} run" + ("" if count == 1 else "s")


def failed_note(records: list[RunRecord]) -> str | None:
    """A note naming the failed runs (no finite test accuracy), or None."""
    failed = [record.source for record in records if record.failed]
    if not failed:
        return None
    shown = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
    return (f"{len(failed)} run(s) failed (test/acc NaN or missing: diverged), counted in the "
            f"'failed' column and left out of the means: {shown}")


def unfinished_runs(dirs: Iterable[Path], include_debug: bool) -> list[Path]:
    """The run folders under `dirs` with checkpoints/last.ckpt but no summary.json: runs stopped
    (a signal, kill -9, a crash) before they finished, which nothing can be compared of; debug
    runs only with `include_debug`."""
    found = []
    for directory in dirs:
        for last in sorted(directory.rglob("last.ckpt")) if directory.is_dir() else ():
            run = last.parent.parent
            if last.parent.name == "checkpoints" and not (run / SUMMARY_FILE).is_file() and (
                    include_debug or not _is_debug(run)):
                found.append(run.resolve())
    return found


def _is_debug(run: Path) -> bool:
    """Whether the run's saved config is a debug preset's (run_group debug)."""
    try:
        config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(config, dict) and config.get("run_group") == "debug"


def steps_warnings(records: Iterable[RunRecord]) -> list[str]:
    """A warning per task whose runs were trained for different numbers of steps
    (trainer.max_steps), naming each budget's sweeps: their rows and points are not a
    like-for-like comparison. Runs whose budget is unknown are left out."""
    sweeps: dict[str, dict[int, set[str]]] = {}
    for run in records:
        if run.max_steps is not None:
            sweeps.setdefault(run.task, {}).setdefault(run.max_steps, set()).add(run.sweep)
    return [f"runs of {task} trained for different numbers of steps: "
            + ", ".join(f"{steps} ({'; '.join(sorted(labels))})"
                        for steps, labels in sorted(budgets.items()))
            + "; their rows (the steps column) are not a like-for-like comparison"
            for task, budgets in sweeps.items() if len(budgets) > 1]


# A run below this share of its other seeds' median tokens/s was most likely slowed by something
# else on the machine: on the shared 2-core VM one attention's seeds ran at 0.75-1.30 x their
# median (the 285 runs of docs/results/results_runs.csv on one CPU), while two runs with a test
# suite beside them ran at about 0.2 x (not kept: they were trained again).
CONTENDED_SHARE = 0.5


def throughput_warnings(records: Iterable[RunRecord]) -> list[str]:
    """A warning per run whose tokens/s is below CONTENDED_SHARE of the median of the other
    seeds (at least 2) of its sweep, task and attention: its tokens/s is in the row's mean as
    measured, so rerun it on an idle machine (remove its folder and resume the sweep)."""
    groups: dict[tuple[str, str, str], list[RunRecord]] = {}
    for run in records:
        if run.metrics.get(TOKENS_PER_SEC.key) is not None:
            groups.setdefault((run.sweep, run.task, run.attention), []).append(run)
    warnings = []
    for (sweep, task, attention), runs in groups.items():
        for run in runs:
            others = [other.metrics[TOKENS_PER_SEC.key] for other in runs if other is not run]
            if len(others) < 2:
                continue
            share = run.metrics[TOKENS_PER_SEC.key] / statistics.median(others)
            if share < CONTENDED_SHARE:
                warnings.append(
                    f"{task}/{attention} seed {run.seed} ({sweep}) ran at "
                    f"{run.metrics[TOKENS_PER_SEC.key]:,.0f} tokens/s, {share:.2f} x the median "
                    f"of its other seeds: was the machine busy?{_cpu_note(run, runs)} Its "
                    f"tokens/s is in the mean; rerun it on an idle machine ({run.source})")
    return warnings


def _cpu_share(run: RunRecord) -> float | None:
    """CPU seconds of the run's process per second of wall time (None where not recorded)."""
    if run.cpu_s is None or not run.duration_s:
        return None
    return run.cpu_s / run.duration_s


def _cpu_note(run: RunRecord, runs: list[RunRecord]) -> str:
    """What the run's CPU time says of it beside its other seeds', where it was recorded: a
    process given less CPU per second than they were shared its cores with another."""
    own = _cpu_share(run)
    others = [value for other in runs if other is not run
              if (value := _cpu_share(other)) is not None]
    if own is None or not others:
        return ""
    return (f" Its process had {own:.2f} CPU-seconds per second of wall time, its other "
            f"seeds {statistics.median(others):.2f} (median).")


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
