"""Write the README's result tables from the CSVs of docs/results/ (between the
`<!-- results:<name> -->` markers), with each source's provenance and any stale mark.

    python scripts/maintainer/results_tables.py          # update README.md
    python scripts/maintainer/results_tables.py --check  # exit 1 if README.md differs from the CSVs

A source that does not read whole (a CSV cut or edited, a damaged provenance.json, rows missing
that its provenance record promises) is one error line naming the file and line, exit 1, and
README.md is left as it was.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from linarena.analysis.provenance import PUBLISHED_DIR, REPO_ROOT
from linarena.errors import LinarenaError
from linarena.reports.results_tables import write_tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", type=Path, default=REPO_ROOT / "README.md")
    parser.add_argument("--folder", type=Path, default=PUBLISHED_DIR, help="results folder")
    parser.add_argument("--check", action="store_true", help="only compare; change nothing")
    args = parser.parse_args(argv)
    try:
        return check(args.readme, args.folder) if args.check else write(args.readme, args.folder)
    except LinarenaError as error:
        print(f"results_tables.py: error: {error}", file=sys.stderr)
        return 1


def write(readme: Path, folder: Path) -> int:
    """Update the tables of `readme` from `folder`."""
    names = write_tables(readme, folder)
    print(f"{readme}: tables {', '.join(names)} written from {folder}")
    return 0


def check(readme: Path, folder: Path) -> int:
    """1 (and a line saying what to run) when `readme` is not what `folder` gives, else 0."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "README.md"
        shutil.copyfile(readme, copy)
        write_tables(copy, folder)
        if copy.read_text() != readme.read_text():
            print(f"{readme} differs from the tables of {folder}: run "
                  "python scripts/maintainer/results_tables.py", file=sys.stderr)
            return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
