"""Time every attention variant, forward and forward+backward, against sequence length.

    python scripts/benchmark_attention.py                      # CPU, fp32, lengths 256..16384
    python scripts/benchmark_attention.py --device cuda --dtype bf16

Besides the four linarena modules it times two reference implementations in the same run, so
every speed claim is a ratio measured side by side:
  - einsum_elu: a straightforward einsum implementation of elu+1 attention;
  - performer_pytorch: FastAttention from the `performer-pytorch` package (if installed,
    `pip install -e ".[bench]"`).
The variants of one length are timed round-robin (median of --repeats calls each), so a
machine whose speed drifts cannot favour one of them. Prints a table and writes a CSV (default
results/benchmark_attention.csv; on CUDA, peak_memory_mb is what one forward+backward allocates
beyond its inputs). Bidirectional runs
also measure both Performers' approximation error against exact softmax attention, on random
and on clustered inputs at several q, k scales, with the same projections
(<out>_performer_error.csv; see linarena.analysis.performer_error).
"""

from __future__ import annotations

import argparse
import csv
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from linarena.analysis.performer_error import approximation_errors, error_table
from linarena.analysis.timing import interleaved_medians, is_out_of_memory
from linarena.attention import (
    CosformerAttention,
    EluAttention,
    PerformerAttention,
    SoftmaxAttention,
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
LINEAR = ("elu", "performer", "cosformer")


def einsum_elu(q, k, v, eps: float = 1e-6):
    """The textbook elu+1 linear attention: what the linarena kernel is compared against."""
    q, k = F.elu(q) + 1, F.elu(k) + 1
    kv = torch.einsum("bhnd,bhne->bhde", k, v)
    normaliser = 1 / (torch.einsum("bhnd,bhd->bhn", q, k.sum(dim=2)) + eps)
    return torch.einsum("bhnd,bhde,bhn->bhne", q, kv, normaliser)


def build_variants(args) -> dict[str, Callable]:
    d, causal, max_len = args.head_dim, args.causal, max(args.lengths)
    variants = {
        "softmax": SoftmaxAttention(d, causal=causal),
        "elu": EluAttention(d, causal=causal),
        "performer": PerformerAttention(d, causal=causal, num_features=args.num_features, seed=0),
        "cosformer": CosformerAttention(d, causal=causal, max_length=max_len),
    }
    if not causal:
        variants["einsum_elu"] = einsum_elu
        try:
            from performer_pytorch import FastAttention

            variants["performer_pytorch"] = FastAttention(dim_heads=d, nb_features=args.num_features)
        except ImportError:
            print("performer-pytorch not installed: skipping that reference (pip install -e '.[bench]')")
    return {
        name: (m.to(args.device) if isinstance(m, torch.nn.Module) else m)
        for name, m in variants.items()
        if name in args.variants or name in ("einsum_elu", "performer_pytorch")
    }


def prepare(fn, length: int, args) -> tuple[Callable, Callable]:
    """A forward and a forward+backward call of `fn` on inputs of its own at `length`."""
    shape = (args.batch, args.heads, length, args.head_dim)
    q, k, v = (torch.randn(shape, device=args.device, requires_grad=True) for _ in range(3))
    autocast = torch.autocast(args.device.type, dtype=DTYPES[args.dtype],
                              enabled=args.dtype != "fp32")

    def forward():
        with torch.no_grad(), autocast:
            fn(q, k, v)

    def forward_backward():
        for x in (q, k, v):  # as zero_grad(set_to_none=True) does: no accumulation pass
            x.grad = None
        with autocast:
            out = fn(q, k, v)
        out.float().sum().backward()

    return forward, forward_backward


def warm_up(forward: Callable, forward_backward: Callable, args) -> float:
    """Run the warm-up calls; return the CUDA memory one forward+backward needs beyond what was
    allocated before it (its inputs excluded), in MB, or NaN off CUDA."""
    for _ in range(max(args.warmup - 1, 0)):
        forward()
        forward_backward()
    forward()
    if args.device.type != "cuda":
        forward_backward()
        return math.nan
    torch.cuda.synchronize(args.device)
    before = torch.cuda.memory_allocated(args.device)
    torch.cuda.reset_peak_memory_stats(args.device)
    forward_backward()
    return (torch.cuda.max_memory_allocated(args.device) - before) / 2**20


def run(variants: dict[str, Callable], args) -> list[dict]:
    """Every variant at every length. The variants of one length are timed round-robin
    (interleaved_medians), so the ratios between them come from the same moments."""
    rows, last_ms = [], {}
    for length in args.lengths:
        cases, length_rows = {}, {}
        for name, fn in variants.items():
            row = {"variant": name, "causal": args.causal, "length": length, "batch": args.batch,
                   "heads": args.heads, "head_dim": args.head_dim, "device": str(args.device),
                   "dtype": args.dtype, "fwd_ms": math.nan, "fwd_bwd_ms": math.nan,
                   "peak_memory_mb": math.nan, "status": "ok"}
            length_rows[name] = row
            growth = 4 if name == "softmax" else 2  # lengths double: quadratic vs linear
            if name in last_ms and last_ms[name] * growth / 1e3 > args.max_seconds:
                row["status"] = f"skipped (predicted > {args.max_seconds}s)"
                continue
            try:
                cases[name] = prepare(fn, length, args)
                row["peak_memory_mb"] = warm_up(*cases[name], args)
            except (RuntimeError, MemoryError) as error:
                if not is_out_of_memory(error):
                    raise
                row["status"], last_ms[name] = "oom", math.inf
                cases.pop(name, None)
        calls = {(name, what): call for name, (forward, forward_backward) in cases.items()
                 for what, call in (("fwd_ms", forward), ("fwd_bwd_ms", forward_backward))}
        for (name, what), seconds in interleaved_medians(calls, args.repeats, args.device).items():
            length_rows[name][what] = 1e3 * seconds
        for name, row in length_rows.items():
            if row["status"] == "ok":
                last_ms[name] = row["fwd_bwd_ms"]
            print(f"{name:>18} N={length:>6}  fwd {row['fwd_ms']:9.2f} ms  "
                  f"fwd+bwd {row['fwd_bwd_ms']:9.2f} ms  {row['status']}", flush=True)
        rows.extend(length_rows.values())
        del cases, calls
        if args.device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def summarise(rows: list[dict], variants: dict, args) -> list[str]:
    """The ratios the README quotes, all from this one run."""
    ms = {(r["variant"], r["length"]): r["fwd_bwd_ms"] for r in rows if r["status"] == "ok"}
    lines = []
    for length in args.lengths:
        if ("einsum_elu", length) in ms and ("elu", length) in ms:
            lines.append(f"elu vs einsum_elu, fwd+bwd, N={length}: "
                         f"{ms['einsum_elu', length] / ms['elu', length]:.2f}x faster")
        if ("performer_pytorch", length) in ms and ("performer", length) in ms:
            lines.append(f"performer vs performer_pytorch, fwd+bwd, N={length}: "
                         f"{ms['performer_pytorch', length] / ms['performer', length]:.2f}x faster")
    for name in LINEAR:
        measured = [n for n in args.lengths if (name, n) in ms and ("softmax", n) in ms]
        faster = [n for n in measured if ms[name, n] < ms["softmax", n]]
        # Crossover: the shortest length from which the variant is faster at every longer one.
        cross = next((n for n in measured if all(m in faster for m in measured if m >= n)), None)
        lines.append(f"{name} faster than softmax (fwd+bwd) from N={cross}" if cross
                     else f"{name} not faster than softmax at any measured length")
        top = max(measured, default=None)
        if top:
            lines.append(f"  at N={top}: softmax/{name} time ratio {ms['softmax', top] / ms[name, top]:.2f}")
    return lines


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--lengths", type=int, nargs="+",
                        default=[256, 512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--variants", nargs="+", default=["softmax", *LINEAR])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--num-features", type=int, default=256)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32",
                        help="fp32, or bf16/fp16 autocast (GPU)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls first (at least 1)")
    parser.add_argument("--repeats", type=int, default=7,
                        help="timed calls per variant, round-robin over the variants")
    parser.add_argument("--max-seconds", type=float, default=30.0,
                        help="skip a case whose predicted fwd+bwd time exceeds this")
    parser.add_argument("--error-scales", type=float, nargs="*", default=[0.25, 0.5, 1.0],
                        help="q, k scales of the Performer approximation-error table (none: skip)")
    parser.add_argument("--out", type=Path, default=Path("results/benchmark_attention.csv"))
    args = parser.parse_args(argv)
    args.device = torch.device(args.device)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"device={args.device} dtype={args.dtype} batch={args.batch} heads={args.heads} "
          f"head_dim={args.head_dim} causal={args.causal} threads={torch.get_num_threads()}")
    variants = build_variants(args)
    rows = run(variants, args)
    write_csv(args.out, rows)
    print("\n".join(["", *summarise(rows, variants, args), f"CSV: {args.out}"]))
    if "performer" in variants and not args.causal and args.error_scales:
        length = min(args.lengths, key=lambda n: abs(n - 4096))
        error_rows = approximation_errors(
            variants["performer"], length, args.heads, args.error_scales, args.device,
            with_performer_pytorch="performer_pytorch" in variants,
        )
        error_path = args.out.with_name(f"{args.out.stem}_performer_error.csv")
        write_csv(error_path, error_rows)
        print("\n".join(["", *error_table(error_rows), f"CSV: {error_path}"]))


if __name__ == "__main__":
    main()
