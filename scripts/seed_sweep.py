"""Train every attention at several seeds, with more seeds where the outcomes split; resumable.

Each attention of conf/attention/ (or --attention) is trained at each of --seeds with
experiment=--preset (default: the default config) and the overrides given, one run each in
<root>/seed<s>/<attention>/; an attention whose seeds split (some reach 90% test accuracy, some
do not) is trained at --more-seeds too (linarena.studies.seed_sweep). Finished runs are skipped,
so the same command resumes; with --resume-from the runs CSV compare.py wrote of the sweep
(results_runs.csv), the runs it lists count as finished too, so a sweep spans sessions or
machines. All the runs are one sweep for scripts/compare.py:

    python scripts/seed_sweep.py --preset mqar_cpu --root outputs/sweeps/mqar --jobs 2
    python scripts/seed_sweep.py --root outputs/sweeps/listops trainer.max_steps=300
    python scripts/compare.py --runs outputs/sweeps
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from linarena.analysis.bench_args import non_negative_int
from linarena.analysis.runs_archive import load_runs_csv
from linarena.attention.variants import check_variant_names, variant_names
from linarena.studies.cli import STUDY_ERRORS, add_preset_argument, add_training_arguments, fail
from linarena.studies.preset import sweep_protocol
from linarena.studies.seed_sweep import archived_runs, run_sweep


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_preset_argument(parser, None,
                        "a conf/experiment/ preset (default: none, the default config)")
    parser.add_argument("--root", type=Path, required=True,
                        help="the sweep's folder (its multirun folder for compare.py)")
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=[1, 2, 3, 4, 5],
                        help="the seeds of every attention (default 1-5)")
    parser.add_argument("--more-seeds", type=non_negative_int, nargs="*", default=[6, 7, 8, 9, 10],
                        help="the seeds added where --seeds split (default 6-10; "
                             "`--more-seeds` with none after it: no more seeds)")
    parser.add_argument("--resume-from", type=Path, default=None, metavar="CSV",
                        help="a runs CSV compare.py wrote of this sweep (results_runs.csv): the "
                             "runs it lists from <...>/<root's name>/seed<s>/<attention>/ are "
                             "finished")
    add_training_arguments(parser, report_only=False)
    parser.add_argument("overrides", nargs="*", help="train.py overrides for every run")
    args = parser.parse_args(argv)
    if set(args.more_seeds) & set(args.seeds):
        parser.error(f"--more-seeds {args.more_seeds} repeats seeds of --seeds {args.seeds}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        names = check_variant_names(args.attention) if args.attention else variant_names()
        archived = None
        if args.resume_from is not None:
            task, max_steps = sweep_protocol(args.preset, args.overrides)
            archived = archived_runs(load_runs_csv(args.resume_from), args.root, task, max_steps)
            print(f"{args.resume_from}: {len(archived)} runs of this sweep count as finished",
                  flush=True)
        counts = run_sweep(args.preset, args.root, names, args.seeds, args.more_seeds,
                           args.jobs, args.threads, args.overrides, archived)
    except STUDY_ERRORS as error:
        return fail("seed_sweep.py", error)
    print(f"outcomes: {counts}", flush=True)
    return 0 if all(outcome.startswith(("ok", "done")) for outcome in counts) else 1


if __name__ == "__main__":
    sys.exit(main())
