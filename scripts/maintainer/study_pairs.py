"""Which points of the published studies do their seeds separate? Fisher's test on point pairs.

For each study point table found in --folder (mqar_state_size.csv; mqar_mixture.csv) and not
marked stale in its provenance record, tests every pair of points that differ in one coordinate
(linarena.studies.point_pairs): the state-size study's attention, d_model or short conv, the
mixture's attention, kind of positions or test setting, the others held equal. Writes
<out>/<table>_pairs.csv, one row per pair (the seeds at 90% of each, their 95% Wilson
intervals, Fisher's exact p and Holm's within the family; for the mixture also the exact
permutation test of the mean accuracy, from its runs CSV beside it), with its provenance
record: what the README's readings of the studies may call a difference. Each p has its floor
beside it, and the summary says which pairs and families no outcome of their seeds could
separate. The small-budget sweeps have theirs in pairwise_tests.py.

    python scripts/maintainer/study_pairs.py --out docs/results
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from linarena.analysis.provenance import PUBLISHED_DIR, command_line, stale_mark
from linarena.analysis.result_files import read_csv_checked
from linarena.analysis.statistics import ALPHA
from linarena.studies.cli import STUDY_ERRORS, fail
from linarena.studies.point_pairs import POINT_COLUMNS, one_coordinate_pairs
from linarena.studies.study import write_report

# point table -> its coordinates (the mixture's test setting: "L<length> P<pairs>").
STUDIES = {"mqar_state_size": ("attention", "d_model", "short_conv"),
           "mqar_mixture": ("attention", "positions", "setting")}
# The tables whose pairs also get the accuracy test: their runs CSV has a row per seed and point
# (the state-size study's accuracies sit at a plateau or at recall, so its rate says it all).
ACCURACY_TESTED = ("mqar_mixture",)
RUN_COLUMNS = ("attention", "positions", "length", "pairs", "acc")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=PUBLISHED_DIR,
                        help="the folder of the point tables (default docs/results)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the folder the pair tables go to (default: --folder)")
    return parser.parse_args(argv)


def read_points(path: Path) -> pd.DataFrame:
    """A point table, with the mixture's (length, pairs) as one `setting` coordinate."""
    points = read_csv_checked(path, POINT_COLUMNS, numeric_columns=POINT_COLUMNS)
    if {"length", "pairs"} <= set(points.columns):
        points = points.assign(setting=[f"L{length} P{pairs}" for length, pairs
                                        in zip(points["length"], points["pairs"], strict=True)])
    return points


def read_accuracies(path: Path) -> dict[tuple, list[float]]:
    """The mixture's seeds' test accuracies per (attention, positions, setting), from its runs
    CSV (mqar_mixture.py's <name>_runs.csv)."""
    runs = read_csv_checked(path, RUN_COLUMNS, numeric_columns=("length", "pairs", "acc"))
    return {(attention, positions, f"L{length} P{pairs}"): list(group["acc"])
            for (attention, positions, length, pairs), group
            in runs.groupby(["attention", "positions", "length", "pairs"])}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or args.folder
    found = [name for name in STUDIES if (args.folder / f"{name}.csv").is_file()]
    if not found:
        return fail("study_pairs.py", FileNotFoundError(
            f"no study point table ({', '.join(f'{n}.csv' for n in STUDIES)}) in {args.folder}"))
    for name in list(found):
        if stale := stale_mark(args.folder / f"{name}.csv"):
            # The previous code's rates: no reading may rest on tests of them.
            print(f"{name}.csv: marked stale at {stale['commit'][:10]}; skipped until it is rerun")
            found.remove(name)
    tables = {}
    try:
        for name in found:
            runs = args.folder / f"{name}_runs.csv"
            if name in ACCURACY_TESTED and not runs.is_file():
                raise FileNotFoundError(f"{runs}: the per-seed runs of {name}.csv are not there "
                                        f"(written beside it by its study's script)")
            accuracies = read_accuracies(runs) if name in ACCURACY_TESTED else None
            tables[name] = one_coordinate_pairs(read_points(args.folder / f"{name}.csv"),
                                                STUDIES[name], accuracies)
    except STUDY_ERRORS as error:
        return fail("study_pairs.py", error)
    command = command_line(__file__, argv)
    for name, table in tables.items():
        write_report(out, f"{name}_pairs", {".csv": table}, command)
        for varied, group in table.groupby("varied", sort=False):
            print(f"{name}, {varied} varied: {int(group['separated'].sum())} of {len(group)} "
                  f"pairs separated (Fisher p < {ALPHA}), "
                  f"{int(group['separated_after_holm'].sum())} after Holm within each family")
            print_floors(group)
    return 0


def print_floors(group: pd.DataFrame) -> None:
    """Say which of one varied coordinate's pairs and families no outcome of their seeds could
    separate: a pair whose Fisher floor is not below ALPHA; a family whose Holm-adjusted floor
    (its number of pairs times its smallest floor) is not. Those need seeds, not a reading."""
    alone = int((group["fisher_p_floor"] >= ALPHA).sum())
    families = group.groupby("fixed", sort=False)["fisher_p_floor"].agg(["size", "min"])
    closed = int((families["size"] * families["min"] >= ALPHA).sum())
    if alone:
        print(f"  {alone} of {len(group)} pairs cannot be separated at their seed counts "
              f"(Fisher's smallest p >= {ALPHA}); add seeds")
    if closed:
        print(f"  {closed} of {len(families)} families cannot separate any pair after Holm "
              f"(pairs x smallest p >= {ALPHA}); add seeds or read named pairs")


if __name__ == "__main__":
    sys.exit(main())
