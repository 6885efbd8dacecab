"""Time attention variants, forward and forward+backward, against sequence length.

    python scripts/benchmark_attention.py                      # every variant, CPU, fp32
    python scripts/benchmark_attention.py --attentions elu,taylor --lengths 256,1024
    python scripts/benchmark_attention.py --device cuda --dtype bf16

The variants are the files of conf/attention/, built with their training settings. Bidirectional
runs also time two reference implementations in the same run, so every speed claim is a ratio
measured side by side: einsum_elu (a straightforward einsum implementation of elu+1 attention)
and performer_pytorch (FastAttention from `performer-pytorch`, if installed: `pip install -e
".[bench]"`). The variants of one length are timed round-robin (median of --repeats calls
each), so a machine whose speed drifts cannot favour one of them. Prints a table and writes a
CSV (--out, default outputs/benchmarks/benchmark_attention.csv in the repository):
peak_memory_mb is the most memory one forward+backward holds at once beyond its inputs and their
gradients (CPU and CUDA), and backend the code each variant ran (--backend: auto, torch or fla, as
`attention.backend` in training; a variant that cannot honour it is skipped with the reason).
Bidirectional runs with `performer` also measure its approximation error against exact softmax
attention, on random and on clustered inputs at several q, k scales, against performer-pytorch with
the same projections (<out>_performer_error.csv; see linarena.analysis.performer_error).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from linarena.analysis.bench_args import (
    OUTPUT_DIR,
    add_timing_arguments,
    check_device,
    check_out,
    flat_lengths,
    lengths_arg,
    positive_int,
)
from linarena.analysis.bench_runner import run_round_robin, write_csv_atomic
from linarena.analysis.performer_error import approximation_errors, error_table
from linarena.analysis.provenance import REPO_ROOT, command_line, record
from linarena.analysis.timing import peak_allocated_mb
from linarena.attention.engine.backend import BACKENDS
from linarena.attention.variants import (
    check_variant_names,
    is_layer,
    is_linear,
    load_variant,
    variant_names,
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
BASELINE = "softmax"
SCRIPT = REPO_ROOT / "scripts" / "benchmark_attention.py"  # what runs main()


def einsum_elu(q, k, v, eps: float = 1e-6):
    """The textbook elu+1 linear attention: what the linarena kernel is compared against."""
    q, k = F.elu(q) + 1, F.elu(k) + 1
    kv = torch.einsum("bhnd,bhne->bhde", k, v)
    normaliser = 1 / (torch.einsum("bhnd,bhd->bhn", q, k.sum(dim=2)) + eps)
    return torch.einsum("bhnd,bhde,bhn->bhne", q, kv, normaliser)


def build_variants(args) -> tuple[dict[str, Callable], dict[str, bool]]:
    """The modules to time (name -> callable) and whether each one's cost is linear."""
    torch.manual_seed(0)  # Performer's seedless projection, learned maps
    # The model keys the variant files interpolate (the gated variants size their projections
    # of the token by d_model and num_heads).
    model = {"max_length": max(args.lengths), "d_model": args.heads * args.head_dim,
             "num_heads": args.heads}
    variants: dict[str, Callable] = {}
    for name in args.variants:
        try:
            variants[name] = load_variant(name, model)(head_dim=args.head_dim, causal=args.causal,
                                                       backend=args.backend)
        except ValueError as error:  # e.g. backend=fla for a variant fla has no kernel for
            print(f"skipping {name}: {error}")
    if not variants:
        raise SystemExit(f"no variant can run with --backend {args.backend}; see above.")
    linear = {name: is_linear(name) for name in variants}
    if not args.causal and args.references:
        variants["einsum_elu"], linear["einsum_elu"] = einsum_elu, True
        try:
            from performer_pytorch import FastAttention

            performer = variants.get("performer")
            features = performer.num_features if performer is not None else 256
            variants["performer_pytorch"] = FastAttention(dim_heads=args.head_dim,
                                                          nb_features=features)
            linear["performer_pytorch"] = True
        except ImportError:
            print("performer-pytorch not installed: skipping that reference "
                  "(pip install -e '.[bench]')")
    return {name: (m.to(args.device) if isinstance(m, torch.nn.Module) else m)
            for name, m in variants.items()}, linear


def prepare(fn, length: int, args) -> tuple[Callable, Callable, float]:
    """A forward and a forward+backward call of `fn` on inputs of its own at `length`, warmed
    up, and the memory one forward+backward holds at once beyond its inputs and their
    gradients, in MB (analysis.timing.peak_allocated_mb, on CPU and CUDA alike)."""
    shape = (args.batch, args.heads, length, args.head_dim)
    q, k, v = (torch.randn(shape, device=args.device, requires_grad=True) for _ in range(3))
    # A core that computes gates from the token (reads_token) gets one, as in the model.
    token = ({"x": torch.randn(args.batch, length, args.heads * args.head_dim,
                               device=args.device)}
             if getattr(fn, "reads_token", False) else {})
    autocast = torch.autocast(args.device.type, dtype=DTYPES[args.dtype],
                              enabled=args.dtype != "fp32")

    def forward():
        with torch.no_grad(), autocast:
            fn(q, k, v, **token)

    def run_forward_backward():
        with autocast:
            out = fn(q, k, v, **token)
        out.float().sum().backward()

    def forward_backward():
        for x in (q, k, v):  # as zero_grad(set_to_none=True) does: no accumulation pass
            x.grad = None
        run_forward_backward()

    for _ in range(max(args.warmup - 1, 0)):
        forward()
        forward_backward()
    forward()
    forward_backward()
    # Measured with the gradients' storage already there (accumulated into), so that the
    # figure is what the attention itself needs, the same for every variant's inputs.
    peak_mb = peak_allocated_mb(run_forward_backward, args.device)
    return forward, forward_backward, peak_mb


def summarise(rows: list[dict], args) -> list[str]:
    """Ratios from this one run, for the variants measured here only."""
    ms = {(r["variant"], r["length"]): r["fwd_bwd_ms"] for r in rows if r["status"] == "ok"}
    lines = []
    for length in args.lengths:
        for ours, reference in (("elu", "einsum_elu"), ("performer", "performer_pytorch")):
            if (ours, length) in ms and (reference, length) in ms:
                lines.append(f"{ours} vs {reference}, fwd+bwd, N={length}: "
                             f"{speed_ratio(ms[reference, length], ms[ours, length])}")
    for name in args.variants:
        measured = [n for n in args.lengths if (name, n) in ms and (BASELINE, n) in ms]
        if name == BASELINE or not measured:
            continue
        faster = [n for n in measured if ms[name, n] < ms[BASELINE, n]]
        # Crossover: the shortest length from which the variant is faster at every longer one.
        cross = next((n for n in measured if all(m in faster for m in measured if m >= n)), None)
        lines.append(f"{name} faster than {BASELINE} (fwd+bwd) from N={cross}" if cross
                     else f"{name} not faster than {BASELINE} at any measured length")
        top = max(measured)
        lines.append(f"  at N={top}: {BASELINE}/{name} time ratio "
                     f"{ms[BASELINE, top] / ms[name, top]:.2f}")
    return lines


def speed_ratio(reference_ms: float, ours_ms: float) -> str:
    """How much faster or slower ours is than the reference, as a factor >= 1."""
    if ours_ms <= reference_ms:
        return f"{reference_ms / ours_ms:.2f}x faster"
    return f"{ours_ms / reference_ms:.2f}x slower"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=lengths_arg, nargs="+",
                        default=[[256, 512, 1024, 2048, 4096, 8192, 16384]],
                        help="sequence lengths: 256 512 or 256,512")
    parser.add_argument("--attentions", "--variants", dest="variants", nargs="+",
                        default=[name for name in variant_names() if not is_layer(name)],
                        help="names of conf/attention/*.yaml, elu taylor or elu,taylor "
                             "(default: every core; whole layers are timed by "
                             "scripts/benchmark_model.py); --variants is the older name")
    parser.add_argument("--no-references", dest="references", action="store_false",
                        help="do not time einsum_elu and performer_pytorch")
    parser.add_argument("--batch", type=positive_int, default=1)
    parser.add_argument("--heads", type=positive_int, default=8)
    parser.add_argument("--head-dim", type=positive_int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="attention.backend of every variant "
                             "(linarena.attention.engine.backend)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32",
                        help="fp32, or bf16/fp16 autocast (GPU)")
    add_timing_arguments(
        parser, warmup=(2, "untimed calls first (at least 1 is made)"),
        repeats=(7, "timed calls per variant, round-robin over the variants"),
        max_seconds=(30.0, "skip a case whose predicted fwd+bwd time exceeds this"))
    parser.add_argument("--error-scales", type=float, nargs="*", default=[0.25, 0.5, 1.0],
                        help="q, k scales of the Performer approximation-error table (none: skip)")
    parser.add_argument("--out", type=Path, default=OUTPUT_DIR / "benchmark_attention.csv",
                        help="CSV to write (default: outputs/benchmarks/ in the repository)")
    args = parser.parse_args(argv)
    args.lengths = flat_lengths(args.lengths)
    names = [name for item in args.variants for name in item.split(",") if name]
    try:
        args.variants = check_variant_names(names)
    except ValueError as error:
        parser.error(f"--attentions: {error}")
    layers = [name for name in args.variants if is_layer(name)]
    if layers:
        parser.error(f"--attentions: {layers} are whole layers (x -> x, with their own "
                     "projections), not cores on q, k, v: time them in the model with "
                     "scripts/benchmark_model.py --attentions " + ",".join(layers))
    args.device = check_device(parser, args.device)
    args.out = check_out(parser, args.out)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"device={args.device} dtype={args.dtype} batch={args.batch} heads={args.heads} "
          f"head_dim={args.head_dim} causal={args.causal} threads={torch.get_num_threads()}")
    variants, linear = build_variants(args)
    fields = {"causal": args.causal, "batch": args.batch, "heads": args.heads,
              "head_dim": args.head_dim, "device": str(args.device), "dtype": args.dtype}
    rows = run_round_robin(linear, args.lengths, lambda name, n: prepare(variants[name], n, args),
                           args.repeats, args.device, args.max_seconds, fields)
    for row in rows:  # the references are plain PyTorch
        row["backend"] = getattr(variants[row["variant"]], "backend_used", None) or "torch"
    write_csv_atomic(rows, args.out, columns=list(rows[0]))
    command = command_line(SCRIPT, argv)
    record([args.out], command)
    print("\n".join(["", *summarise(rows, args), f"CSV: {args.out}"]))
    if "performer" in variants and not args.causal and args.error_scales:
        length = min(args.lengths, key=lambda n: abs(n - 4096))
        error_rows = approximation_errors(
            variants["performer"], length, args.heads, args.error_scales, args.device,
            with_performer_pytorch="performer_pytorch" in variants,
        )
        error_path = args.out.with_name(f"{args.out.stem}_performer_error.csv")
        write_csv_atomic(error_rows, error_path, columns=list(error_rows[0]))
        record([error_path], command)
        print("\n".join(["", *error_table(error_rows), f"CSV: {error_path}"]))
