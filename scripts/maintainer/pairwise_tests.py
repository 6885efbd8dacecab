"""Which attentions do the small-budget sweeps separate? Every pair, per sweep and task.

Reads compare.py's per-run table (docs/results/results_runs.csv) and tests each pair of
attentions of one sweep and task on their seeds' test accuracies: for a recall task (MQAR) the
rates of seeds at 90% (Fisher's exact test), for the others the mean accuracy (the exact
permutation test); the p-values of one sweep and task are adjusted together (Holm), so a pair is
`separated` when its adjusted p < 0.05. Each row also has `p_floor`, the smallest p its test can
give at the two seed counts (every seed of one above every seed of the other), and the summary
says when a family cannot separate any pair at all (Holm's smallest adjusted p is the number of
pairs times the smallest p): then it needs more seeds, not another reading. Writes
<out>/<name>.csv, one row per pair, with its provenance record: what the README's readings of the
sweeps may call a difference.

    python scripts/maintainer/pairwise_tests.py --out docs/results
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import pandas as pd

from linarena.analysis.provenance import PUBLISHED_DIR, command_line
from linarena.analysis.result_files import read_csv_checked
from linarena.analysis.statistics import (
    ALPHA,
    RECALL_TASKS,
    holm,
)
from linarena.metrics import TEST_ACC
from linarena.studies.cli import STUDY_ERRORS, add_output_arguments, fail
from linarena.studies.point_pairs import pair_test
from linarena.studies.study import write_report


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=PUBLISHED_DIR / "results_runs.csv",
                        help="compare.py's per-run table (results_runs.csv)")
    add_output_arguments(parser, "results_pairs", PUBLISHED_DIR.parents[1] / "outputs", "outputs/")
    return parser.parse_args(argv)


def pairs_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Every pair of attentions per sweep and task, Holm-adjusted within each."""
    rows = []
    for (sweep, task), group in runs.groupby(["sweep", "task"], sort=False):
        accuracies = {name: seeds["test_acc_pct"] / TEST_ACC.scale for name, seeds in
                      group.groupby("attention", sort=False)}
        found = [{"sweep": sweep, "task": task, "a": a, "b": b, "n_a": len(accuracies[a]),
                  "n_b": len(accuracies[b]),
                  **pair_test(accuracies[a], accuracies[b], rates=task in RECALL_TASKS)}
                 for a, b in itertools.combinations(accuracies, 2)]
        for row, adjusted in zip(found, holm([row["p"] for row in found]), strict=True):
            rows.append(row | {"p_holm": adjusted, "separated": adjusted < ALPHA})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        runs = read_csv_checked(args.runs, ["sweep", "task", "attention", "test_acc_pct"],
                                numeric_columns=["test_acc_pct"])
        table = pairs_table(runs)
    except STUDY_ERRORS as error:
        return fail("pairwise_tests.py", error)
    write_report(args.out, args.name, {".csv": table}, command_line(__file__, argv))
    for (sweep, task), group in table.groupby(["sweep", "task"], sort=False):
        print(f"{task} ({sweep}): {int(group['separated'].sum())} of {len(group)} pairs "
              f"separated (Holm-adjusted p < {ALPHA})")
        smallest = min(1.0, len(group) * group["p_floor"].min())
        if smallest >= ALPHA:
            print(f"  at these seed counts no pair can be separated: Holm's smallest adjusted p "
                  f"is {len(group)} x {group['p_floor'].min():.2g} = {smallest:.2g}; add seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
