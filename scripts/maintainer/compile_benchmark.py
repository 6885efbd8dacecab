"""Does torch.compile (Inductor) speed up the attention cores on this machine? (It is offered
as a backend only where it gives a measured gain.)

Per core and mode, in one process: the median fwd+bwd time of `--repeats` calls of the eager
module and of torch.compile(module, backend="inductor") after one untimed call (which compiles;
its time is the first_call_s column), B=1, H=8, d=64, fp32, at --length tokens.

    python scripts/maintainer/compile_benchmark.py --out docs/results/compile_benchmark.csv
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch

from linarena.analysis.provenance import command_line, record
from linarena.attention.variants import check_variant_names, is_layer, load_variant
from linarena.files import write_atomic

HEADS, HEAD_DIM = 8, 64


def fwd_bwd_ms(call: Callable, inputs: tuple[torch.Tensor, ...], repeats: int) -> list[float]:
    """The time of each of `repeats` forward + backward calls, in ms."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call(*inputs).sum().backward()
        times.append(1000 * (time.perf_counter() - start))
        for tensor in inputs:
            tensor.grad = None
    return times


def measure(name: str, causal: bool, length: int, repeats: int) -> dict:
    """One row: eager and Inductor medians, their ratio, the compiling call's time."""
    factory = load_variant(name, {"max_length": length, "num_heads": HEADS,
                                  "d_model": HEADS * HEAD_DIM})
    torch.manual_seed(0)
    attn = factory(head_dim=HEAD_DIM, causal=causal)
    generator = torch.Generator().manual_seed(0)
    inputs = tuple(torch.randn(1, HEADS, length, HEAD_DIM, generator=generator)
                   .requires_grad_(True) for _ in range(3))
    fwd_bwd_ms(attn, inputs, 1)  # warm-up
    eager = statistics.median(fwd_bwd_ms(attn, inputs, repeats))
    torch._dynamo.reset()
    compiled = torch.compile(attn, backend="inductor")
    first = fwd_bwd_ms(compiled, inputs, 1)[0] / 1000
    inductor = statistics.median(fwd_bwd_ms(compiled, inputs, repeats))
    return {"attention": name, "causal": causal, "length": length, "eager_ms": eager,
            "inductor_ms": inductor, "speedup": eager / inductor, "first_call_s": first,
            "threads": torch.get_num_threads(), "torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attentions", nargs="+", default=["elu", "retnet"],
                        help="cores of conf/attention/ (default: a feature map, a recurrence)")
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path,
                        default=Path("outputs/benchmarks/compile_benchmark.csv"))
    args = parser.parse_args(argv)
    try:
        names = check_variant_names(args.attentions)
    except ValueError as error:
        print(f"compile_benchmark.py: error: {error}", file=sys.stderr)
        return 2
    layers = [name for name in names if is_layer(name)]
    if layers:
        print(f"compile_benchmark.py: error: {layers} are whole layers; this times cores on "
              "q, k, v", file=sys.stderr)
        return 2
    rows = []
    for name in names:
        for causal in (False, True):
            rows.append(measure(name, causal, args.length, args.repeats))
            row = rows[-1]
            print(f"{name} causal={causal}: eager {row['eager_ms']:.0f} ms, inductor "
                  f"{row['inductor_ms']:.0f} ms (x{row['speedup']:.2f}), compiling call "
                  f"{row['first_call_s']:.0f} s", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows)
    write_atomic(args.out, lambda file: table.to_csv(file, index=False))
    record([args.out], command_line(__file__, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
