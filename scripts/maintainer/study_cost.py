"""What a study run costs before and after a change: the state-size study's train.py commands,
run by a checkout of `--before` (a git worktree made for the purpose) and by this checkout, one
right after the other (linarena.studies.study_cost says how).

Writes <out>/study_cost_runs.csv (one row per run: entry, width, lr, seed, code, commit, steps,
test accuracy, cpu_s, the process's CPU seconds, duration_s) and <out>/study_cost.csv (per case:
before, after and their ratio; same_result: the same steps and test accuracy), each with its
provenance record, and prints the medians. The CSVs are rewritten after every case, so an
interrupted call keeps what it measured.

    python scripts/maintainer/study_cost.py --before ac55338 --widths 16
    python scripts/maintainer/study_cost.py --before ac55338 --entries softmax,gla --widths 16,64
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from linarena.analysis.bench_args import OUTPUT_DIR, check_out
from linarena.analysis.bench_runner import write_csv_atomic
from linarena.analysis.provenance import command_line, record
from linarena.attention.variants import variant_names
from linarena.files import write_atomic
from linarena.studies.preset import load_grid
from linarena.studies.study_cost import COLUMNS, cost_cases, median_summary, ratios, run_case
from linarena.system import REPO_ROOT

PRESET = "mqar_study_cpu"
CHOSEN = REPO_ROOT / "docs" / "results" / "mqar_state_size.csv"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True,
                        help="the git revision to compare with (e.g. a commit before the change)")
    parser.add_argument("--entries", default=None,
                        help="comma-separated variants or study entries (default: every one "
                             "the preset's study trains)")
    parser.add_argument("--widths", default="16", help="comma-separated d_model values")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--preset", default=PRESET)
    parser.add_argument("--out", type=Path, default=OUTPUT_DIR,
                        help="folder for the CSVs (default outputs/benchmarks/)")
    args = parser.parse_args(argv)
    args.out = check_out(parser, args.out)
    return args


def git(*arguments: str, cwd: Path = REPO_ROOT) -> str:
    return subprocess.run(["git", *arguments], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    grid = load_grid(args.preset)
    names = (args.entries.split(",") if args.entries
             else [*variant_names(), *(n for n in grid["entries"] if n not in variant_names())])
    cases = cost_cases(args.preset, names, [int(w) for w in args.widths.split(",")],
                       pd.read_csv(CHOSEN), args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    runs_path, table_path = args.out / "study_cost_runs.csv", args.out / "study_cost.csv"
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="study_cost_before_") as folder:
        before = Path(folder) / "code"
        git("worktree", "add", "--detach", str(before), args.before)
        try:
            codes = {"before": (before, git("rev-parse", "HEAD", cwd=before)),
                     "after": (REPO_ROOT, git("rev-parse", "HEAD"))}
            for index, case in enumerate(cases):
                order = ["before", "after"] if index % 2 == 0 else ["after", "before"]
                for code in order:
                    path, commit = codes[code]
                    row = run_case(case, path, args.preset, grid["entries"])
                    rows.append({**row, "code": code, "commit": commit[:7]})
                    print(f"{case.entry} d{case.d_model} {code}: {row['cpu_s']} cpu_s, "
                          f"{row['process_cpu_s']} process CPU s, {row['steps']} steps",
                          flush=True)
                write_csv_atomic(rows, runs_path, list(COLUMNS))
                table = ratios(pd.DataFrame(rows))
                write_atomic(table_path, lambda file, table=table: table.to_csv(file, index=False))
        finally:
            git("worktree", "remove", "--force", str(before))
    record([runs_path, table_path], command_line(__file__, argv))
    for key, value in median_summary(pd.read_csv(table_path)).items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
