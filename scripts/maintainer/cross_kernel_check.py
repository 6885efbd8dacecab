"""Cross-kernel reproduction check: rerun a sample of a study's published runs under other CPU
kernel paths (or the GPU) and say per point whether the outcomes agree with the published rate.

The sample (linarena.studies.cross_kernel, whose docstring states the rules): every split point
of the runs CSV at its chosen lr with all its seeds, then the points nearest the 90% threshold,
until at least --min-runs runs. Each rerun is the study's own train.py command under the kernel
path's environment (--kernel-paths: default, avx2, avx512 set ATEN_CPU_CAPABILITY, each with
MKL_CBWR=COMPATIBLE; native pins nothing; cuda trains on the GPU in float32), one folder per run
in <root>/<kernel path>/<point>/<attention>/; finished runs are skipped, so the same command
resumes. Then <out>/cross_kernel.csv (one row per rerun) and <out>/cross_kernel_points.csv (per
point and kernel path: published and rerun k/n with Wilson intervals, Fisher's p, consistent,
flipped seeds, a verdict), each with its provenance record naming the training commands.

    python scripts/maintainer/cross_kernel_check.py --dry-run
    python scripts/maintainer/cross_kernel_check.py --jobs 2 --out docs/results
    python scripts/maintainer/cross_kernel_check.py --report-only --out docs/results
    python scripts/maintainer/cross_kernel_check.py --report-only \\
        --resume-from docs/results/cross_kernel.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from linarena.analysis.bench_args import non_negative_int
from linarena.analysis.provenance import PUBLISHED_DIR, command_line
from linarena.studies import cross_kernel
from linarena.studies.cli import (
    STUDY_ERRORS,
    add_preset_argument,
    add_training_arguments,
    fail,
    report_command,
)
from linarena.studies.preset import load_grid, preset_protocol
from linarena.studies.runs import load_archive
from linarena.studies.study import write_report

REPO_ROOT = Path(__file__).resolve().parents[2]
NAME = "cross_kernel"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_preset_argument(parser, "mqar_study_cpu", "the study's preset")
    parser.add_argument("--runs", type=Path,
                        default=PUBLISHED_DIR / "mqar_state_size_runs.csv",
                        help="the study's published runs CSV")
    parser.add_argument("--kernel-paths", default="default,avx2",
                        help=f"comma-separated, of {', '.join(cross_kernel.KERNEL_PATHS)}")
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=None,
                        help="rerun only these seeds of each sampled point (default: all; a "
                             "split point is still chosen on all its published seeds)")
    parser.add_argument("--min-runs", type=int, default=cross_kernel.MIN_RUNS,
                        help="runs in the sample at least (per kernel path)")
    parser.add_argument("--root", type=Path, default=None,
                        help="folder of the rerun folders (default outputs/studies/cross_kernel)")
    parser.add_argument("--out", type=Path, default=None, help="where the CSVs go (default <root>)")
    add_training_arguments(parser, attention=False)
    parser.add_argument("--resume-from", type=Path, default=None,
                        help="a cross_kernel.csv written before: its reruns count as finished")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the sample, the commands and the CPU time; train nothing")
    parser.add_argument("overrides", nargs="*",
                        help="the train.py overrides the study ran with (default none)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = args.root or REPO_ROOT / "outputs" / "studies" / NAME
    out = args.out or root
    try:
        paths = cross_kernel.parse_kernel_paths(args.kernel_paths)
        grid = load_grid(args.preset, [o for o in args.overrides if o.startswith("study.")])
        extra = [o for o in args.overrides if not o.startswith("study.")]
        runs = load_archive(args.runs, preset_protocol(args.preset, extra))
        sample = cross_kernel.choose_sample(runs, grid, args.min_runs, args.seeds)
        tasks = cross_kernel.sample_tasks(sample, grid["lrs"])
        commands = cross_kernel.shown_commands(tasks, args.preset, root, paths, args.threads,
                                               extra, grid["entries"])
        archived = cross_kernel.load_resume(args.resume_from) if args.resume_from else None
        if args.dry_run:
            print_plan(sample, commands, paths, archived)
            return 0
        if not args.report_only:
            counts = cross_kernel.run_check(tasks, args.preset, root, paths, args.jobs,
                                            args.threads, extra, archived, grid["entries"])
            print(f"outcomes: {counts}", flush=True)
        reruns = cross_kernel.rerun_rows(sample, root, paths, archived)
    except STUDY_ERRORS as error:
        return fail("cross_kernel_check.py", error)
    points = cross_kernel.points_table(sample, reruns, paths)
    # The reruns' training commands, per kernel path and point, then the report's.
    command = report_command(command_line(__file__, argv), " ; ".join(commands))
    written = write_report(out, NAME, {".csv": reruns, "_points.csv": points}, command)
    for row in points.itertuples(index=False):
        print(f"{row.attention} conv {row.short_conv} d{row.d_model} lr {row.lr:g} "
              f"[{row.kernel_path}]: {row.verdict}")
    print(f"{len(reruns)} reruns of {len(sample) * len(paths)} -> {written[0]}, {written[1]}")
    return 0


def print_plan(sample, commands: list[str], paths: list[str], archived=None) -> None:
    """The sample (per point: why, its seeds' published accuracies), the commands, the time."""
    print(f"sample: {len(sample)} runs per kernel path, {len(paths)} kernel paths "
          f"({', '.join(paths)})")
    for key, point in sample.groupby(["attention", "short_conv", "d_model", "lr"], sort=False):
        accuracies = ", ".join(f"{100 * acc:.1f}" for acc in point["test_acc"])
        print(f"  {key[0]} conv {key[1]} d{key[2]} lr {key[3]:g}: seeds "
              f"{list(point['seed'])} ({point['reason'].iloc[0]}; published test % {accuracies})")
    print("commands:")
    for line in commands:
        print(f"  {line}")
    seconds, how = cross_kernel.estimate_cpu_seconds(sample, paths, archived)
    print(f"estimated CPU time: {seconds / 3600:.1f} CPU-hours ({how})")


if __name__ == "__main__":
    sys.exit(main())
