"""Write the published result tables from the CSVs of docs/results/ (between the
`<!-- results:<name> -->` markers of the results page, the getting-started page and the README's
summary), with each source's provenance and any stale mark.

    python scripts/maintainer/results_tables.py          # update the pages
    python scripts/maintainer/results_tables.py --check  # exit 1 if a page differs from the CSVs

A source that does not read whole (a CSV cut or edited, a damaged provenance.json, rows missing
that its provenance record promises) is one error line naming the file and line, exit 1, and
every page is left as it was.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from linarena.analysis.provenance import PUBLISHED_DIR
from linarena.errors import LinarenaError
from linarena.reports.results_tables import PAGES, TABLES, default_pages, fill, write_pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", type=Path, action="append", dest="pages",
                        help=f"a page holding generated tables; repeatable (default: "
                             f"{', '.join(PAGES)})")
    parser.add_argument("--folder", type=Path, default=PUBLISHED_DIR, help="results folder")
    parser.add_argument("--check", action="store_true", help="only compare; change nothing")
    args = parser.parse_args(argv)
    pages = args.pages or default_pages()
    try:
        return check(pages, args.folder) if args.check else write(pages, args.folder)
    except (LinarenaError, ValueError) as error:
        print(f"results_tables.py: error: {error}", file=sys.stderr)
        return 1


def write(pages: list[Path], folder: Path) -> int:
    """Update the tables of `pages` from `folder`."""
    for page, names in write_pages(pages, folder).items():
        print(f"{page}: tables {', '.join(names) or '(none)'} written from {folder}")
    return 0


def check(pages: list[Path], folder: Path) -> int:
    """1 (and a line per page saying what to run) when a page is not what `folder` gives."""
    filled = {page: fill(page.read_text(), folder) for page in pages}
    placed = {name for _, names in filled.values() for name in names}
    if set(pages) >= set(default_pages()) and (unplaced := [n for n in TABLES if n not in placed]):
        print(f"no page holds the table(s) {', '.join(unplaced)}", file=sys.stderr)
        return 1
    stale = [page for page, (text, _) in filled.items() if text != page.read_text()]
    for page in stale:
        print(f"{page} differs from the tables of {folder}: run "
              "python scripts/maintainer/results_tables.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
