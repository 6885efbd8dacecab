"""Compare training runs: accuracy against throughput and memory, per sweep, task and attention.

Gathers finished runs from local folders (every summary.json below them) or from W&B, and
writes to ``--out``: ``results.csv`` and ``results.md`` (sweep x task x attention, mean ± sample
std over seeds of test accuracy, tokens/s, peak memory and parameter count) and one
``scatter_<task>.png`` per task and sweep (accuracy against tokens/s, marker area ~ peak memory).

A sweep is what a run was compared with when it was started: its multirun folder (or "runs" for
single runs), plus the overrides other than attention and seed. Runs of different sweeps are
never averaged together; ``--sweep`` picks some. Debug runs (debug=smoke/fdr/overfit) are left
out unless ``--debug``.

    python scripts/compare.py --runs outputs/
    python scripts/compare.py --runs outputs/ --sweep multiruns/2025-01-01_10-00-00 --published
    python scripts/compare.py --wandb my-team/linarena --filter task=text --filter tags=final
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from linarena.analysis.order import task_sort_key
from linarena.analysis.plots import plot_accuracy_vs_throughput
from linarena.analysis.provenance import command_line, record
from linarena.analysis.runs import (
    drop_reruns,
    load_local_runs,
    load_wandb_runs,
    parse_filters,
    select_sweeps,
)
from linarena.analysis.table import aggregate_runs, to_markdown
from linarena.files import write_atomic

REPO_ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--runs", nargs="+", type=Path, metavar="DIR",
                        help="folders searched recursively for summary.json")
    source.add_argument("--wandb", metavar="ENTITY/PROJECT",
                        help="read finished runs from the W&B API (needs an API key: wandb login)")
    parser.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                        help="keep matching runs; repeatable. Local: a summary.json key, dotted "
                             "for nesting (task=listops, hparams.d_model=128). W&B: group, tags, "
                             "state, name, or a config key (attention=performer)")
    parser.add_argument("--sweep", action="append", default=[], metavar="LABEL",
                        help="keep the runs of this sweep (a label as listed, or its start, e.g. "
                             "multiruns/2025-01-01_10-00-00); repeatable; default: every sweep")
    parser.add_argument("--debug", action="store_true",
                        help="include debug runs (debug=smoke, fdr, overfit)")
    parser.add_argument("--published", action="store_true",
                        help="add the published LRA accuracies (not measured here) as a column")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "results" / "compare")
    parser.add_argument("--runs-command", default=None,
                        help="the command that made the runs, for the outputs' provenance "
                             "records (<out>/provenance.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        filters = parse_filters(args.filter)
        if args.runs:
            records = load_local_runs(args.runs, filters, include_debug=args.debug)
        else:
            records = load_wandb_runs(args.wandb, filters, include_debug=args.debug)
        if not records:
            debug = "" if args.debug else " (debug runs are left out; --debug includes them)"
            raise ValueError(f"no finished run matches the filters {filters}{debug}")
        records = select_sweeps(records, args.sweep)
    except (ValueError, FileNotFoundError) as error:
        print(f"compare.py: error: {error}", file=sys.stderr)
        return 2
    records, notes = drop_reruns(records)
    for note in notes:
        print(f"note: {note}")
    table = aggregate_runs(records, published=args.published)
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / "results.csv", lambda file: table.to_csv(file, index=False))
    write_atomic(args.out / "results.md", lambda file: file.write(to_markdown(table)))
    sweeps = sorted(set(table["sweep"]))
    written = [args.out / "results.csv", args.out / "results.md"]
    for number, sweep in enumerate(sweeps, start=1):
        of_sweep = table[table["sweep"] == sweep]
        for task in sorted(set(of_sweep["task"]), key=task_sort_key):
            rows = of_sweep[of_sweep["task"] == task]
            name = f"scatter_{task}.png" if len(sweeps) == 1 else f"scatter_{number}_{task}.png"
            title = task if len(sweeps) == 1 else f"{task} ({sweep})"
            plot_accuracy_vs_throughput(rows, title, args.out / name)
            written.append(args.out / name)
    command = command_line(__file__, argv)
    record(written, f"{args.runs_command}; then {command}" if args.runs_command else command)
    print(to_markdown(table))
    if len(sweeps) > 1:
        print("Sweeps (pick some with --sweep LABEL; plots scatter_<number>_<task>.png):")
        for number, sweep in enumerate(sweeps, start=1):
            print(f"  {number}: {sweep} ({sum(r.sweep == sweep for r in records)} runs)")
    print(f"{len(records)} runs; wrote results.csv, results.md and scatter plots to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
