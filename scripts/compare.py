"""Compare training runs: accuracy against throughput and memory, per task and attention.

Gathers finished runs from local folders (every summary.json below them) or from W&B, and
writes to ``--out``: ``results.csv`` and ``results.md`` (task x attention, mean ± sample std over
seeds of test accuracy, tokens/s, peak memory and parameter count) and one
``scatter_<task>.png`` per task (accuracy against tokens/s, marker area ~ peak memory).

    python scripts/compare.py --runs multirun/ outputs/
    python scripts/compare.py --runs multirun/ --filter task=listops --published
    python scripts/compare.py --wandb my-team/linarena --filter group=text --filter tags=final
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from linarena.analysis.order import task_sort_key
from linarena.analysis.plots import plot_accuracy_vs_throughput
from linarena.analysis.runs import check_unique, load_local_runs, load_wandb_runs, parse_filters
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
    parser.add_argument("--published", action="store_true",
                        help="add the published LRA accuracies (not measured here) as a column")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "results" / "compare")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        filters = parse_filters(args.filter)
        if args.runs:
            records = load_local_runs(args.runs, filters)
        else:
            records = load_wandb_runs(args.wandb, filters)
        if not records:
            raise ValueError(f"no run matches the filters {filters}")
        check_unique(records)
    except (ValueError, FileNotFoundError) as error:
        print(f"compare.py: error: {error}", file=sys.stderr)
        return 2
    table = aggregate_runs(records, published=args.published)
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / "results.csv", lambda file: table.to_csv(file, index=False))
    write_atomic(args.out / "results.md", lambda file: file.write(to_markdown(table)))
    for task in sorted(set(table["task"]), key=task_sort_key):
        rows = table[table["task"] == task]
        plot_accuracy_vs_throughput(rows, task, args.out / f"scatter_{task}.png")
    print(to_markdown(table))
    print(f"{len(records)} runs; wrote results.csv, results.md and scatter plots to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
