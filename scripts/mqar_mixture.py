"""MQAR mixture report: accuracy per test setting, per attention, over seeds.

Reads the summary.json of every run of experiment=mqar_mixture(_cpu) under --runs (debug runs
left out) and writes, into --out, <name>_runs.csv (a row per run and test setting),
<name>.csv (per attention and setting: the median accuracy over seeds, its range, the seeds
that reached 90% and that success rate with its 95% Wilson interval) and <name>.md (caption and table; settings longer than any training length
marked †), each with its provenance record in <out>/provenance.json.

    python train.py -m experiment=mqar_mixture_cpu attention=softmax,elu,taylor seed=1,2,3 \\
        hydra.sweep.dir=outputs/studies/mqar_mixture
    python scripts/mqar_mixture.py --runs outputs/studies/mqar_mixture --out docs/results
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from linarena.analysis.provenance import command_line
from linarena.errors import LinarenaError
from linarena.studies.mixture import accuracy_table, caption, load_runs, summarize
from linarena.studies.study import write_report


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True,
                        help="folders searched for the runs' summary.json (recursively)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the CSVs and the table go (default: the first --runs)")
    parser.add_argument("--name", default="mqar_mixture", help="file name stem of the outputs")
    parser.add_argument("--runs-command", default=None,
                        help="the command that made the runs, for the outputs' provenance "
                             "records (<out>/provenance.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        runs, config = load_runs(args.runs)
    except (LinarenaError, ValueError, FileNotFoundError) as error:
        print(f"mqar_mixture.py: error: {error}", file=sys.stderr)
        return 2
    summary = summarize(runs)
    table = accuracy_table(summary)
    out = args.out or args.runs[0]
    command = command_line(__file__, argv)
    paths = write_report(out, args.name, {
        "_runs.csv": runs, ".csv": summary, ".md": caption(runs, config) + table,
    }, f"{args.runs_command}; then {command}" if args.runs_command else command)
    runs_count = len(runs.drop_duplicates(["attention", "seed"]))
    print(table + f"{runs_count} runs -> {', '.join(map(str, paths))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
