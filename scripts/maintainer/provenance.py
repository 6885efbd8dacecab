"""The provenance records of docs/results/ (provenance.json): list them, mark a result stale.

    python scripts/maintainer/provenance.py           # every record, stale ones flagged
    python scripts/maintainer/provenance.py --check   # exit 1 if a file has no record,
        # was edited after it was recorded, or has a record that does not name its training
    python scripts/maintainer/provenance.py --stale mqar_state_size.csv \\
        --reason "xavier init changed"

A stale mark (commit, reason) shows beside the result's table in the README after
`python scripts/maintainer/results_tables.py`; rerunning the result (its record's command)
clears it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from linarena.analysis.provenance import PUBLISHED_DIR, load, mark_stale, problems, unrecorded
from linarena.errors import LinarenaError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=PUBLISHED_DIR, help="results folder")
    parser.add_argument("--stale", nargs="+", metavar="FILE", default=[],
                        help="result files (names in the folder) to mark stale")
    parser.add_argument("--reason", default="", help="why they are stale (required with --stale)")
    parser.add_argument("--check", action="store_true",
                        help="fail if a file has no record, has changed since it was "
                             "recorded, or its record's command only reads the file itself")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (LinarenaError, ValueError) as error:  # a damaged provenance.json, a bad --stale
        print(f"provenance.py: error: {error}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    """Mark, check or list the records as `args` say; the exit status."""
    for name in args.stale:
        entry = mark_stale(Path(name).name, args.reason, args.folder)
        print(f"{name}: stale at {entry['stale']['commit']}: {entry['stale']['reason']}")
    if args.check:
        found = problems(args.folder)
        for line in found:
            print(line, file=sys.stderr)
        return 1 if found else 0
    missing = unrecorded(args.folder)
    if not args.stale:
        for name, entry in load(args.folder).items():
            stale = entry.get("stale")
            mark = f"  STALE since {stale['commit'][:10]}: {stale['reason']}" if stale else ""
            print(f"{name}: {(entry.get('commit') or '?')[:10]} `{entry['command']}`{mark}")
        for name in missing:
            print(f"{name}: NO RECORD")
    return 0


if __name__ == "__main__":
    sys.exit(main())
