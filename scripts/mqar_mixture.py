"""MQAR mixture study: train it (resumable), then report accuracy per test setting, per attention
and kind of positions, over seeds.

Trains every attention of conf/attention/ with each kind of positions and seed of the preset's
`study:` block (linarena.studies.mixture_study: more seeds where they split), one run each in
<root>/<positions>_seed<s>/<attention>/ (finished runs are skipped, so the same command resumes);
with --report-only, trains nothing; with --resume-from <the runs CSV it wrote before> (e.g. the
committed docs/results/mqar_mixture_runs.csv), the runs listed there count as finished, on any
machine or checkout. Then reads the summary.json of every run under --runs
(default: the root; debug runs left out) and writes, into --out, <name>_runs.csv (a row per run
and test setting), <name>.csv (per attention, positions and setting: the median accuracy over
seeds, its range, the seeds that reached 90% and that success rate with its 95% Wilson
interval) and <name>.md (caption and table; settings longer than any training length marked
†), each with its provenance record in <out>/provenance.json.

    python scripts/mqar_mixture.py --preset mqar_mixture_cpu --jobs 2 --out docs/results
    python scripts/mqar_mixture.py --report-only --runs outputs/studies/mqar_mixture \\
        --out docs/results
    python scripts/mqar_mixture.py --report-only --resume-from docs/results/mqar_mixture_runs.csv \\
        --out docs/results
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from linarena.analysis.provenance import command_line, training_note
from linarena.studies.cli import (
    STUDY_ERRORS,
    add_output_arguments,
    add_preset_argument,
    add_runs_command_argument,
    add_training_arguments,
    fail,
    report_command,
)
from linarena.studies.mixture import load_runs, summarize
from linarena.studies.mixture_report import accuracy_table, caption
from linarena.studies.mixture_study import load_archive, mixture_runs, run_mixture
from linarena.studies.study import write_report

REPO_ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_preset_argument(parser, "mqar_mixture_cpu",
                        "a mixture preset with a study: block (positions, seeds)")
    parser.add_argument("--root", type=Path,
                        default=REPO_ROOT / "outputs" / "studies" / "mqar_mixture",
                        help="folder of the run folders (default outputs/studies/mqar_mixture)")
    add_training_arguments(parser)
    parser.add_argument("--runs", type=Path, nargs="+", default=None,
                        help="folders searched for the runs' summary.json (recursively; "
                             "default: --root)")
    parser.add_argument("--resume-from", type=Path, default=None,
                        help="a runs CSV this study wrote before (<name>_runs.csv): its runs "
                             "count as finished and are reported beside --root's")
    add_output_arguments(parser, "mqar_mixture", None, "the first --runs")
    add_runs_command_argument(parser)
    parser.add_argument("overrides", nargs="*", help="extra train.py overrides for every run "
                                                     "(study.* ones change the grid)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    roots = args.runs or [args.root]
    try:
        if args.resume_from is not None and args.runs is not None:
            raise ValueError("--resume-from reads the runs of --root beside the archived ones; "
                             "give --root, not --runs")
        archived = None if args.resume_from is None else \
            load_archive(args.resume_from, args.preset, args.overrides)
        if not args.report_only:
            counts = run_mixture(args.preset, args.root, args.attention, args.jobs,
                                 args.threads, args.overrides, archived)
            print(f"outcomes: {counts}", flush=True)
        runs, config = load_runs(roots) if archived is None else \
            mixture_runs(args.root, args.preset, archived, args.overrides)
    except STUDY_ERRORS as error:
        return fail("mqar_mixture.py", error)
    summary = summarize(runs)
    table = accuracy_table(summary)
    out = args.out or roots[0]
    command = command_line(__file__, argv)
    paths = write_report(out, args.name, {
        "_runs.csv": runs, ".csv": summary,
        ".md": caption(runs, config) + training_note(runs, f"{args.name}_runs.csv") + table,
    }, report_command(command, args.runs_command))
    runs_count = len(runs.drop_duplicates(["attention", "positions", "seed"]))
    print(table + f"{runs_count} runs -> {', '.join(map(str, paths))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
