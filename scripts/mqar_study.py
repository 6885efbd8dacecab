"""MQAR recall against state size: run the study of a preset, then write its CSV and figure.

Every attention of conf/attention/ at every width, short-conv setting and learning rate of the
preset's `study:` block, one train.py run each in <root>/<run id>/; finished runs are skipped,
so the same command resumes an interrupted study. Then, from the runs' summary.json files:
<out>/<name>_runs.csv (every run), <name>.csv (the best lr per attention, short conv and width,
chosen on validation accuracy), <name>.md (that table) and <name>.png (the figure).

    python scripts/mqar_study.py --preset mqar_study_cpu --jobs 2
    python scripts/mqar_study.py --preset mqar_study_cpu --report-only --out docs/results
    python scripts/mqar_study.py --preset mqar_study_gpu --jobs 8 --threads 2
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from linarena.analysis.mqar_plot import plot_state_size
from linarena.analysis.mqar_results import accuracy_table, best_per_setting, load_study
from linarena.analysis.mqar_study import load_grid, run_study
from linarena.files import write_atomic, write_text_atomic

REPO_ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="mqar_study_cpu",
                        help="a conf/experiment/ preset with a study: block")
    parser.add_argument("--root", type=Path, default=None,
                        help="folder of the run folders (default outputs/<preset>)")
    parser.add_argument("--attention", nargs="+", default=None,
                        help="only these variants (default: every file of conf/attention/)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--report-only", action="store_true", help="do not train; report only")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the CSV, table and figure go (default <root>)")
    parser.add_argument("--name", default="mqar_state_size", help="file name stem of the outputs")
    parser.add_argument("overrides", nargs="*", help="extra train.py overrides for every run")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args = parse_args(argv)
    root = args.root or REPO_ROOT / "outputs" / args.preset
    out = args.out or root
    try:
        grid = load_grid(args.preset)
        if not args.report_only:
            counts = run_study(args.preset, root, args.attention, args.jobs, args.threads,
                               args.overrides)
            logging.info("outcomes: %s", counts)
        runs = load_study([root])
    except (ValueError, FileNotFoundError) as error:
        print(f"mqar_study.py: error: {error}", file=sys.stderr)
        return 2
    best = best_per_setting(runs)
    expected = len(grid["lrs"])
    partial = bool((best["lrs_tried"] < expected).any())
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / f"{args.name}_runs.csv", lambda f: runs.to_csv(f, index=False))
    write_atomic(out / f"{args.name}.csv", lambda f: best.to_csv(f, index=False))
    first = runs.iloc[0]
    setting = (f"MQAR, vocab {first['vocab_size']}, length {first['seq_len']}, "
               f"{first['num_pairs']} pairs, {first['num_layers']} layers, "
               f"{first['max_steps']} steps; best of {expected} lrs")
    if partial:
        setting += f" (PARTIAL: some points have fewer than {expected} lrs)"
    header = f"{setting}\n\nTest accuracy (%) at the lr with the best validation accuracy.\n\n"
    write_text_atomic(out / f"{args.name}.md", header + accuracy_table(best))
    plot_state_size(best, out / f"{args.name}.png", title=setting)
    print(f"{len(runs)} runs -> {out / (args.name + '.csv')}, {out / (args.name + '.png')}"
          + (" (partial)" if partial else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
