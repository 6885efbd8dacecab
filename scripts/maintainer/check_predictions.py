"""Check the README's predictions (written before the reruns) against the published studies.

Reads the state-size study's point table and the mixture's (docs/results/mqar_state_size.csv,
mqar_mixture.csv), runs every check of linarena.studies.predictions (Fisher's exact test for the
comparisons, the Wilson interval for "recalls") and writes <out>/<name>.csv, one row per check
with its verdict (held, contradicted, not separated, missing), with its provenance record; a
count of verdicts per prediction is printed. A table that does not exist yet, or is marked
stale in its provenance record, is skipped: its predictions get no rows.

    python scripts/maintainer/check_predictions.py --out docs/results
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from linarena.analysis.provenance import PUBLISHED_DIR, command_line, stale_mark
from linarena.studies.cli import STUDY_ERRORS, add_output_arguments, fail
from linarena.studies.predictions import predictions_table, summary_lines
from linarena.studies.preset import load_grid
from linarena.studies.study import write_report

NEEDED = ("attention", "n_seeds", "successes")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="mqar_study_cpu",
                        help="the state-size study's preset (its grid: widths, short convs)")
    parser.add_argument("--state-size", type=Path, default=PUBLISHED_DIR / "mqar_state_size.csv",
                        help="the state-size study's point table (mqar_study.py's <name>.csv)")
    parser.add_argument("--mixture", type=Path, default=PUBLISHED_DIR / "mqar_mixture.csv",
                        help="the mixture's point table (mqar_mixture.py's <name>.csv)")
    add_output_arguments(parser, "predictions", PUBLISHED_DIR.parents[1] / "outputs", "outputs/")
    return parser.parse_args(argv)


def read_points(path: Path, needed: tuple[str, ...], script: str) -> pd.DataFrame | None:
    """The point table at `path` (None when there is none yet), with the `needed` columns;
    `script` writes it."""
    if not path.is_file():
        print(f"{path}: not there yet; its predictions are skipped")
        return None
    if stale := stale_mark(path):
        # Its rates are the previous code's (and protocol's): no verdict is read from them.
        print(f"{path}: marked stale at {stale['commit'][:10]}; its predictions are skipped "
              "until it is rerun")
        return None
    table = pd.read_csv(path)
    absent = [column for column in needed if column not in table.columns]
    if absent:
        raise ValueError(f"{path} has no column {absent}: it was written by an older script; "
                         f"write it again ({script} --report-only)")
    return table


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        grid = load_grid(args.preset)
        state_size = read_points(args.state_size, (*NEEDED, "short_conv", "d_model"),
                                 "scripts/mqar_study.py")
        mixture = read_points(args.mixture, (*NEEDED, "positions", "length", "beyond_train"),
                              "scripts/mqar_mixture.py")
    except STUDY_ERRORS as error:
        return fail("check_predictions.py", error)
    table = predictions_table(state_size, grid, mixture)
    write_report(args.out, args.name, {".csv": table}, command_line(__file__, argv))
    print("\n".join(summary_lines(table)) + f"\n-> {args.out / (args.name + '.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
