"""Full-model benchmark: training-step and attention-only time and peak memory against length.

For each attention and length it measures (1) a full training step (forward, backward, AdamW
step) of the LRA byte-level text classifier (4 layers, d_model 256, 4 heads, mlp 1024, vocab 257,
2 classes, CLS pooling) on random full-length sequences and (2) the attention module alone
(forward + backward) with that model's head shapes. Writes ``benchmark_model.csv`` and
``benchmark_model.png`` (log-log time and memory against length) to ``--out``.

GPU: bf16 autocast, CUDA-event timing, peak memory = torch.cuda.max_memory_allocated growth
(statistics reset per case). CPU: fp32, perf_counter timing, each case in a fresh process whose
peak RSS growth (ru_maxrss) is its peak memory: RSS is what runs a machine out of memory, and
covers oneDNN/OpenMP buffers that torch's allocator profiler does not see.

    python scripts/benchmark_model.py                   # every conf/attention/ variant, 1K-16K
    python scripts/benchmark_model.py --attentions softmax,performer --lengths 1024,4096
    python scripts/benchmark_model.py --device cuda --batch 32 --wandb
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

from linarena.analysis.bench_args import (
    OUTPUT_DIR,
    REPO_ROOT,
    add_timing_arguments,
    check_device,
    check_out,
    flat_lengths,
    lengths_arg,
    names_arg,
    positive_int,
)
from linarena.analysis.bench_cases import TEXT_MODEL, TINY_MODEL, WHATS, CaseSpec
from linarena.analysis.bench_runner import (
    exit_code,
    read_benchmark_csv,
    run_benchmark,
    write_csv_atomic,
)
from linarena.analysis.plots import plot_benchmark
from linarena.analysis.provenance import command_line, record
from linarena.attention.engine.backend import BACKENDS
from linarena.attention.variants import check_variant_names, variant_names
from linarena.errors import LinarenaError

DEFAULT_LENGTHS = (1024, 2048, 4096, 8192, 16384)
TINY_LENGTHS = (16, 32, 64)
DTYPE_ALIASES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16",
                 "bfloat16": "bfloat16"}
CPU_DEFAULT_MAX_SECONDS = 300.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attentions", type=names_arg, default=None,
                        help="comma-separated names of conf/attention/*.yaml (default: all)")
    parser.add_argument("--lengths", type=lengths_arg, nargs="+", default=None,
                        help="sequence lengths, 1024 4096 or 1024,4096 (default 1024,...,16384; "
                             "16,32,64 with --tiny)")
    parser.add_argument("--what", type=names_arg, default=",".join(WHATS),
                        help=f"comma-separated subset of {','.join(WHATS)}")
    parser.add_argument("--batch", type=positive_int, default=None,
                        help="default 1 on CPU, 32 on CUDA")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPE_ALIASES), default=None,
                        help="bf16 = bf16 autocast (default on CUDA); fp32 (default on CPU)")
    parser.add_argument("--threads", type=positive_int, default=torch.get_num_threads(),
                        help="torch CPU threads per case (default: torch's, one per core); "
                             "on a CPU shared with other jobs 1 gives steadier times")
    add_timing_arguments(
        parser, warmup=(1, "untimed calls per case"),
        repeats=(3, "timed calls per case (median)"),
        max_seconds=(None, "skip a case whose predicted time (previous length's time x growth "
                           "x calls) exceeds this; on CPU also kills a case after twice it "
                           f"plus start-up (default {CPU_DEFAULT_MAX_SECONDS:g} on CPU, "
                           "none on CUDA)"))
    parser.add_argument("--out", type=Path, default=OUTPUT_DIR,
                        help="folder for benchmark_model.csv and .png (default: "
                             "outputs/benchmarks/ in the repository)")
    parser.add_argument("--tiny", action="store_true", help="tiny model and lengths (tests)")
    parser.add_argument("--replot", action="store_true",
                        help="only redraw benchmark_model.png from the CSV in --out (no timing)")
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="attention.backend of every layer "
                             "(linarena.attention.engine.backend); "
                             "a variant that cannot honour it gets an error row saying why")
    parser.add_argument("--conf-dir", type=Path, default=REPO_ROOT / "conf",
                        help="Hydra config folder holding attention/<name>.yaml")
    parser.add_argument("--wandb", action="store_true",
                        help="log the CSV as a W&B table and the plot as an image "
                             "(WANDB_MODE=offline works without an account)")
    parser.add_argument("--wandb-project", default="linarena")
    args = parser.parse_args(argv)
    args.lengths = (flat_lengths(args.lengths) if args.lengths is not None
                    else list(TINY_LENGTHS if args.tiny else DEFAULT_LENGTHS))
    try:
        args.attentions = check_variant_names(args.attentions or variant_names(args.conf_dir),
                                              args.conf_dir)
    except ValueError as error:
        parser.error(f"--attentions: {error}")
    unknown = sorted(set(args.what) - set(WHATS))
    if unknown:
        parser.error(f"--what: unknown {unknown}; valid: {','.join(WHATS)}")
    on_cuda = check_device(parser, args.device).type == "cuda"
    args.out = check_out(parser, args.out)
    if args.out.is_file():
        parser.error(f"--out {args.out}: is a file; --out is the folder the CSV and plot go to")
    args.batch = args.batch or (32 if on_cuda else 1)
    args.dtype = DTYPE_ALIASES[args.dtype or ("bf16" if on_cuda else "fp32")]
    if args.max_seconds is None and not on_cuda:
        args.max_seconds = CPU_DEFAULT_MAX_SECONDS
    return args


def build_specs(args: argparse.Namespace) -> list[CaseSpec]:
    """Cases grouped by (what, attention), lengths increasing within a group."""
    shape = TINY_MODEL if args.tiny else TEXT_MODEL
    return [
        CaseSpec(attention=attention, length=length, what=what, batch=args.batch,
                 device=args.device, dtype=args.dtype, threads=args.threads, warmup=args.warmup,
                 repeats=args.repeats, shape=shape, conf_dir=str(args.conf_dir.resolve()),
                 backend=args.backend)
        for what in args.what for attention in args.attentions for length in args.lengths
    ]


def log_to_wandb(args: argparse.Namespace, table: pd.DataFrame, png: Path) -> None:
    import wandb

    run = wandb.init(project=args.wandb_project, job_type="benchmark_model",
                     config={key: str(value) for key, value in vars(args).items()})
    run.log({"benchmark_model/table": wandb.Table(dataframe=table),
             "benchmark_model/plot": wandb.Image(str(png))})
    run.finish()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    csv_path, png_path = args.out / "benchmark_model.csv", args.out / "benchmark_model.png"
    if args.replot:
        if not csv_path.is_file():
            print(f"benchmark_model.py: error: --replot: no {csv_path}; run the benchmark first",
                  file=sys.stderr)
            return 2
        try:
            table = read_benchmark_csv(csv_path)
        except LinarenaError as error:
            print(f"benchmark_model.py: error: {error}", file=sys.stderr)
            return 2
        plot_benchmark(table, png_path)
        record([png_path], command_line(__file__, argv))
        print(f"wrote {png_path}")
        return 0
    specs = build_specs(args)
    isolate = torch.device(args.device).type == "cpu"
    rows = run_benchmark(specs, max_seconds=args.max_seconds, isolate=isolate,
                         on_row=lambda rows: write_csv_atomic(rows, csv_path))
    command = command_line(__file__, argv)
    record([csv_path], command)  # first: the record's row count is what the reader checks
    table = read_benchmark_csv(csv_path)
    plot_benchmark(table, png_path)
    record([png_path], command)
    print(f"wrote {csv_path} and {png_path}")
    if args.wandb:
        log_to_wandb(args, table, png_path)
    return exit_code(rows)


if __name__ == "__main__":
    sys.exit(main())
