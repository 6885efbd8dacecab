"""Write the README's result tables from the CSVs of docs/results/ (between the
`<!-- results:<name> -->` markers), with each source's provenance and any stale mark.

    python scripts/results_tables.py            # update README.md
    python scripts/results_tables.py --check    # exit 1 if README.md is not what the CSVs give
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from linarena.analysis.provenance import REPO_ROOT, RESULTS_DIR
from linarena.analysis.results_tables import write_tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", type=Path, default=REPO_ROOT / "README.md")
    parser.add_argument("--folder", type=Path, default=RESULTS_DIR, help="results folder")
    parser.add_argument("--check", action="store_true", help="only compare; change nothing")
    args = parser.parse_args(argv)
    if not args.check:
        names = write_tables(args.readme, args.folder)
        print(f"{args.readme}: tables {', '.join(names)} written from {args.folder}")
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "README.md"
        shutil.copyfile(args.readme, copy)
        write_tables(copy, args.folder)
        if copy.read_text() != args.readme.read_text():
            print(f"{args.readme} differs from the tables of {args.folder}: run "
                  "python scripts/results_tables.py", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
