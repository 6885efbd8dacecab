"""Where the time of one MQAR-study training step goes: the whole Lightning step and its parts
(data, forward, backward, optimizer, metrics/logging, loop overhead), per attention, width and
thread count, plus process start-up (linarena.studies.step_profile says what each part is).

Writes <out>/step_profile.csv (attention, d_model, threads, part, ms, share, steps) with its
provenance record and prints a table. On a shared machine the numbers are noisy.

    python scripts/maintainer/profile_step.py
    python scripts/maintainer/profile_step.py --attentions softmax,mamba2_layer --widths 16 \
        --threads 1 --steps 30 --skip-startup
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from linarena.analysis.bench_args import OUTPUT_DIR, check_out, non_negative_int, positive_int
from linarena.analysis.bench_runner import write_csv_atomic
from linarena.analysis.provenance import command_line, record
from linarena.studies.step_profile import (
    COLUMNS,
    DEFAULT_ATTENTIONS,
    DEFAULT_THREADS,
    DEFAULT_WIDTHS,
    PRESET,
    Case,
    case_overrides,
    format_report,
    profile,
    startup_rows,
)
from linarena.system import REPO_ROOT


def _names(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _ints(text: str) -> list[int]:
    return [positive_int(item) for item in _names(text)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attentions", type=_names, default=list(DEFAULT_ATTENTIONS),
                        help="comma-separated variants of conf/attention/ or hybrid entries of "
                             f"the preset (default {','.join(DEFAULT_ATTENTIONS)})")
    parser.add_argument("--widths", type=_ints, default=list(DEFAULT_WIDTHS),
                        help="comma-separated model.d_model values (default 16,64)")
    parser.add_argument("--threads", type=_ints, default=list(DEFAULT_THREADS),
                        help="comma-separated torch thread counts (default 1,2)")
    parser.add_argument("--steps", type=positive_int, default=50,
                        help="timed steps per case (medians over them)")
    parser.add_argument("--warmup", type=non_negative_int, default=10,
                        help="untimed steps per case before the timed ones")
    parser.add_argument("--preset", default=PRESET, help="the study preset (experiment=)")
    parser.add_argument("--skip-startup", action="store_true",
                        help="do not time train.py --help and the imports")
    parser.add_argument("--out", type=Path, default=OUTPUT_DIR,
                        help="folder for step_profile.csv (default outputs/benchmarks/)")
    args = parser.parse_args(argv)
    for attention in args.attentions:
        try:
            case_overrides(attention, args.widths[0], args.preset)
        except ValueError as error:
            parser.error(f"--attentions: {error}")
    args.out = check_out(parser, args.out)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # As train.py: the default data folder (paths.data_dir) is this repository's data/.
    os.environ.setdefault("LINARENA_ROOT", str(REPO_ROOT))
    # Lightning's per-fit notices (seed, accelerators, max_steps reached) would bury the table.
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        return profile_to(args, argv)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def profile_to(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Profile the cases of `args`, write and record the CSV, print the table."""
    cases = [Case(attention, width, threads) for attention in args.attentions
             for width in args.widths for threads in args.threads]
    path = args.out / "step_profile.csv"
    args.out.mkdir(parents=True, exist_ok=True)
    startup = [] if args.skip_startup else startup_rows()

    def write(case_rows: list[dict]) -> None:  # after every case: a partial profile is kept
        write_csv_atomic([*startup, *case_rows], path, list(COLUMNS))

    rows = [*startup, *profile(cases, args.steps, args.warmup, args.preset, on_case=write)]
    record([path], command_line(__file__, argv))
    print(format_report(rows))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
