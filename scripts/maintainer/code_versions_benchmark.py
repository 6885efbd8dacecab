"""Is this checkout's attention code as fast as an older revision's, and does it compute the same
numbers? Both versions are imported into one process and timed alternately.

The older revision (--before, default 909c14a: before the recurrences moved into one engine) is
checked out in a temporary git worktree and its src/linarena copied under another name
(linarena_before, its imports rewritten; nothing of it imports this checkout's linarena, which
is checked). Each variant of conf/attention/ that both versions have (cores and whole layers) is
built by both with the same seed and the same weights (copied across when the names match; the
`weights` column says), at the published attention benchmark's shapes
(docs/results/benchmark_attention_causal.csv: batch, heads, head_dim, causal; fp32 on CPU; a
layer gets x of width heads * head_dim), or at --shape (a study's model). Both get the same
inputs: their outputs and gradients are compared (`identical`, else the largest differences),
then forward+backward is timed in the order before, after, after, before, ... (--repeats calls
of each, more for short calls: --min-seconds), medians. ratio = after / before (> 1: slower
now); pair_ratio_q25/q75 are the quartiles of the ratios of neighbouring calls, and `verdict`
says whether the ratio is within noise (within --tolerance of 1, or the quartiles hold 1). A
length whose predicted call exceeds --max-seconds is skipped, as in the attention benchmark.
Running it with --before and --after the same revision measures the noise itself.

torch runs --threads threads (2, as the published benchmark), with OMP_WAIT_POLICY=PASSIVE
unless the environment sets it (the `omp_wait_policy` column): on a shared machine, threads
spinning while they wait for each other cost more than the code compared.

Writes <out>/code_versions_benchmark.csv (--name) after every variant (an interrupted run
keeps what it measured), its provenance record once all are measured, and prints a table.

    python scripts/maintainer/code_versions_benchmark.py --out docs/results
    python scripts/maintainer/code_versions_benchmark.py --attentions gla,gla_layer \
        --lengths 16384 --repeats 5
    python scripts/maintainer/code_versions_benchmark.py --before HEAD --after HEAD \
        --name same_version_noise       # two copies of one version: the noise
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Idle OpenMP threads sleep rather than spin (read when torch loads OpenMP, so set before it is
# imported; OMP_WAIT_POLICY=ACTIVE in the environment keeps spinning). Same operations, same
# numbers: on a machine shared with other processes, two spinning threads waiting for each other
# made a recurrence's call 5 to 40 times slower than one thread.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pandas as pd
import torch

from linarena.analysis.bench_args import (
    OUTPUT_DIR,
    add_timing_arguments,
    check_out,
    flat_lengths,
    lengths_arg,
    names_arg,
    positive_float,
    positive_int,
)
from linarena.analysis.bench_runner import growth_factor, write_csv_atomic
from linarena.analysis.package_copy import (
    Version,
    leaked_references,
    load_checkout,
    load_revision,
)
from linarena.analysis.provenance import PUBLISHED_DIR, command_line, record
from linarena.analysis.versions_benchmark import (
    COLUMNS,
    Shape,
    alternate_times,
    build,
    compare_calls,
    is_layer,
    make_cases,
    median_ratios,
    ratio_table,
    repeats_for,
    share_weights,
    timing_fields,
    variant_names,
)
from linarena.system import REPO_ROOT, cpu_model

PUBLISHED = PUBLISHED_DIR / "benchmark_attention_causal.csv"


def published_shape(path: Path) -> Shape:
    """The one batch, heads, head_dim and causal of the published benchmark's rows (fp32, CPU)."""
    table = pd.read_csv(path)
    values = {}
    for column in ("batch", "heads", "head_dim", "causal", "device", "dtype"):
        distinct = table[column].unique()
        if len(distinct) != 1:
            raise SystemExit(f"{path}: several values of {column} ({list(distinct)}); "
                             "expected one shape")
        values[column] = distinct[0].item() if hasattr(distinct[0], "item") else distinct[0]
    if (values["device"], values["dtype"]) != ("cpu", "fp32"):
        raise SystemExit(f"{path}: measured on {values['device']} in {values['dtype']}; this "
                         "script compares fp32 on CPU")
    return Shape(int(values["batch"]), int(values["heads"]), int(values["head_dim"]),
                 bool(values["causal"]))


def shape_arg(text: str) -> Shape:
    """--shape BATCH,HEADS,HEAD_DIM,causal|bidirectional, e.g. 32,4,32,bidirectional (a study's
    model: listops_small's batch, heads and head_dim)."""
    parts = text.split(",")
    if (len(parts) != 4 or not all(part.isdigit() and int(part) > 0 for part in parts[:3])
            or parts[3] not in ("causal", "bidirectional")):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected BATCH,HEADS,HEAD_DIM,causal|bidirectional, e.g. "
            "32,4,32,bidirectional")
    return Shape(int(parts[0]), int(parts[1]), int(parts[2]), parts[3] == "causal")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="909c14a", help="the older revision (default "
                        "909c14a)")
    parser.add_argument("--after", default=None,
                        help="the newer revision (default: this checkout as it is, "
                             "uncommitted changes included)")
    parser.add_argument("--attentions", type=names_arg, default=None,
                        help="comma-separated variants (default: every file of conf/attention/ "
                             "that both versions have)")
    parser.add_argument("--lengths", type=lengths_arg, nargs="+", default=[[1024, 4096, 16384]],
                        help="sequence lengths: 1024 4096 or 1024,4096 (default 1024,4096,16384)")
    add_timing_arguments(
        parser, warmup=(0, "untimed calls of each after the checked one (which warms up)"),
        repeats=(5, "timed forward+backward calls of each version, at least"),
        max_seconds=(30.0, "skip a length whose predicted forward+backward call exceeds this"))
    parser.add_argument("--min-seconds", type=positive_float, default=10.0,
                        help="more calls (up to --max-repeats) until both versions' timed calls "
                             "last this long")
    parser.add_argument("--max-repeats", type=positive_int, default=50)
    parser.add_argument("--threads", type=positive_int, default=2,
                        help="torch's CPU threads (the published benchmark ran with 2)")
    parser.add_argument("--tolerance", type=positive_float, default=0.05,
                        help="a ratio within this of 1 is within noise")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shapes-from", type=Path, default=PUBLISHED,
                        help="the benchmark CSV whose batch, heads, head_dim, causal are used")
    parser.add_argument("--shape", type=shape_arg, default=None,
                        help="BATCH,HEADS,HEAD_DIM,causal|bidirectional instead of "
                             "--shapes-from, e.g. 32,4,32,bidirectional")
    parser.add_argument("--name", default="code_versions_benchmark", help="CSV name, no suffix")
    parser.add_argument("--out", type=Path, default=OUTPUT_DIR,
                        help="folder of the CSV (default outputs/benchmarks/)")
    args = parser.parse_args(argv)
    args.lengths = flat_lengths(args.lengths)
    args.out = check_out(parser, args.out)
    return args


def pick_variants(args: argparse.Namespace, before: Version, after: Version) -> list[str]:
    """The variants to compare, in the after version's order; the others are named and left."""
    ours, theirs = variant_names(after), set(variant_names(before))
    wanted = args.attentions or ours
    unknown = [name for name in wanted if name not in ours]
    if unknown:
        raise SystemExit(f"--attentions: {unknown} are not variants of {after.commit} "
                         f"({', '.join(ours)})")
    missing = [name for name in wanted if name not in theirs]
    if missing:
        print(f"not in {before.commit}'s conf/attention/, left out: {', '.join(missing)}")
    return [name for name in wanted if name in theirs]


def compare_variant(name: str, versions: tuple[Version, Version], shape: Shape,
                    args: argparse.Namespace, fields: dict) -> list[dict]:
    """Build `name` in both versions, then at each length check and time it; one row each. A
    length whose predicted call (from the previous length: linearly, or quadratically for a
    quadratic variant) exceeds --max-seconds is skipped, as in the attention benchmark."""
    before, after = versions
    modules = (build(before, name, shape, max(args.lengths), args.seed),
               build(after, name, shape, max(args.lengths), args.seed))
    weights = share_weights(modules[1], modules[0])
    layer = is_layer(after, modules[1])
    if layer != is_layer(before, modules[0]):
        raise SystemExit(f"{name} is a whole layer in one version and a core in the other")
    linear = after.module("attention.variants").is_linear(name, after.conf_dir)
    rows, previous = [], None  # previous: (length, seconds of one call) measured last
    for length in args.lengths:
        row = {"variant": name, "kind": "layer" if layer else "core", "length": length,
               **fields, "weights": weights}
        if previous is not None:
            predicted_s = previous[1] * growth_factor(linear, previous[0], length)
            if predicted_s > args.max_seconds:
                row["verdict"] = (f"skipped: predicted {predicted_s:.0f} s a call > "
                                  f"--max-seconds {args.max_seconds:g}")
                print(f"{name:>22} N={length:>6}  {row['verdict']}", flush=True)
                rows.append({column: row.get(column, math.nan) for column in COLUMNS})
                continue
        cases = make_cases(modules, layer, shape, length, args.seed)
        started = time.perf_counter()
        numerics = compare_calls(*cases)  # also the first, warming-up call of each
        call_s = (time.perf_counter() - started) / 2
        for _ in range(args.warmup):
            for case in cases:
                case.forward_backward()
        repeats = repeats_for(call_s, args.repeats, args.min_seconds, args.max_repeats)
        before_s, after_s = alternate_times(cases[0].forward_backward,
                                            cases[1].forward_backward, repeats)
        row |= timing_fields(before_s, after_s, args.tolerance) | numerics
        previous = (length, max(statistics.median(before_s), statistics.median(after_s)))
        rows.append({column: row[column] for column in COLUMNS})
        same = ("identical" if numerics["identical"] else
                f"out {numerics['max_abs_diff_out']:.2g} grad {numerics['max_abs_diff_grad']:.2g}")
        print(f"{name:>22} N={length:>6}  before {row['before_ms']:9.1f} ms  after "
              f"{row['after_ms']:9.1f} ms  ratio {row['ratio']:.3f} "
              f"[{row['pair_ratio_q25']:.3f}, {row['pair_ratio_q75']:.3f}] x{repeats}  {same}",
              flush=True)
        del cases
        gc.collect()
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    shape = args.shape or published_shape(args.shapes_from)
    path = args.out / f"{args.name}.csv"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="code-versions-") as scratch:
        before = load_revision(REPO_ROOT, args.before, "linarena_before", Path(scratch))
        after = (load_checkout(REPO_ROOT) if args.after is None
                 else load_revision(REPO_ROOT, args.after, "linarena_after", Path(scratch)))
        print(f"before {before.commit} ({before.package.__name__}), after {after.commit} "
              f"({after.package.__name__}); batch {shape.batch}, heads {shape.heads}, head_dim "
              f"{shape.head_dim}, causal {shape.causal}, fp32, CPU, {torch.get_num_threads()} "
              f"threads, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')}", flush=True)
        names = pick_variants(args, before, after)
        fields = {"before_commit": before.commit, "after_commit": after.commit,
                  "batch": shape.batch, "heads": shape.heads, "head_dim": shape.head_dim,
                  "causal": shape.causal, "dtype": "fp32", "device": "cpu",
                  "threads": torch.get_num_threads(),
                  "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "cpu": cpu_model()}
        rows: list[dict] = []
        for name in names:
            rows += compare_variant(name, (before, after), shape, args, fields)
            leaks = [leak for version in (before, after) if version.package.__name__ != "linarena"
                     for leak in leaked_references(version.package.__name__)]
            if leaks:
                raise SystemExit("a copied version uses this checkout's linarena:\n"
                                 + "\n".join(leaks))
            write_csv_atomic(rows, path, columns=COLUMNS)
    record([path], command_line(__file__, argv))
    print()
    print(ratio_table(rows))
    top = max(args.lengths)
    ratios = median_ratios(rows, top)
    if ratios:
        print(f"N={top}: median ratio over variants {statistics.median(ratios.values()):.3f} "
              f"(from {min(ratios.values()):.3f} to {max(ratios.values()):.3f})")
    print(f"{len(rows)} rows in {(time.perf_counter() - started) / 60:.1f} min -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
