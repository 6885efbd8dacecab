"""Two versions of the attention code in one process: does a refactor change the numbers or the
speed? (scripts/maintainer/code_versions_benchmark.py runs it.)

The two versions are imported side by side by linarena.analysis.package_copy. Each variant of
conf/attention/ is built from both versions with the same seed, and the weights are copied
across (state_dict) when their names and shapes match. Both get the same inputs and the same
output gradient: their outputs and gradients (inputs' and parameters') are compared, then their
forward+backward calls are timed alternately, before, after, after, before, ..., so that both
see the same drift of a shared machine; medians of each, and the ratio after / before (> 1: the
after code is slower).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable

import torch
from torch import nn

from linarena.analysis.package_copy import Version
from linarena.analysis.timing import elapsed

COLUMNS = [
    "variant", "kind", "length", "before_commit", "after_commit", "before_ms", "after_ms",
    "ratio", "pair_ratio_q25", "pair_ratio_q75", "verdict", "repeats", "identical",
    "max_abs_diff_out", "max_abs_diff_grad", "weights", "batch", "heads", "head_dim", "causal",
    "dtype", "device", "threads", "omp_wait_policy", "cpu",
]


# -- one variant, built by both --------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Shape:
    """The attention benchmark's shapes: q, k, v (batch, heads, length, head_dim); a whole
    layer's x (batch, length, heads * head_dim)."""

    batch: int
    heads: int
    head_dim: int
    causal: bool

    @property
    def d_model(self) -> int:
        return self.heads * self.head_dim


def variant_names(version: Version) -> list[str]:
    return version.module("attention.variants").variant_names(version.conf_dir)


def is_layer(version: Version, module: nn.Module) -> bool:
    return isinstance(module, version.module("attention.layers").AttentionLayer)


def build(version: Version, name: str, shape: Shape, max_length: int, seed: int) -> nn.Module:
    """`attention=<name>` of `version` as a model builds it (cores get head_dim; a layer sizes
    itself), its weights drawn after torch.manual_seed(seed)."""
    variants = version.module("attention.variants")
    model = {"max_length": max_length, "d_model": shape.d_model, "num_heads": shape.heads}
    factory = variants.load_variant(name, model, version.conf_dir)
    torch.manual_seed(seed)
    build_attention = version.module("attention.layers").build_attention
    return build_attention(factory, shape.head_dim, causal=shape.causal).train()


def share_weights(source: nn.Module, target: nn.Module) -> str:
    """Give `target` the weights of `source` (load_state_dict) when both have the same entries
    of the same shapes; says what was done: "none" (no weights), "same from the seed" (already
    equal), "copied", or why they could not be ("seed only: ...")."""
    a, b = source.state_dict(), target.state_dict()
    if a.keys() != b.keys():
        only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
        return f"seed only: names differ (after only {only_a}; before only {only_b})"
    shapes = [key for key in a if isinstance(a[key], torch.Tensor)
              and (not isinstance(b[key], torch.Tensor) or a[key].shape != b[key].shape)]
    if shapes:
        return f"seed only: shapes differ ({shapes})"
    if not a:
        return "none"
    same = all(torch.equal(a[key], b[key]) if isinstance(a[key], torch.Tensor)
               else a[key] == b[key] for key in a)
    target.load_state_dict(a)
    return "same from the seed" if same else "copied"


@dataclasses.dataclass
class Case:
    """One version's module at one length: its inputs (leaves whose gradients are compared),
    the keyword inputs it reads without gradient (a gated core's token), the output gradient."""

    module: nn.Module
    inputs: dict[str, torch.Tensor]
    keywords: dict[str, torch.Tensor]
    grad_out: torch.Tensor | None = None

    def forward_backward(self) -> torch.Tensor:
        """One forward+backward (the inputs' gradients set to None first, as zero_grad does;
        the parameters' accumulate, as in the attention benchmark); returns the output."""
        for tensor in self.inputs.values():
            tensor.grad = None
        out = self.module(*self.inputs.values(), **self.keywords)
        if self.grad_out is None:  # the first call: the output's shape is known now
            generator = torch.Generator().manual_seed(1)
            self.grad_out = torch.randn(out.shape, generator=generator, dtype=out.dtype)
        out.backward(self.grad_out)
        return out

    def gradients(self) -> dict[str, torch.Tensor]:
        grads = {f"input {key}": tensor.grad for key, tensor in self.inputs.items()}
        grads |= {f"weight {key}": param.grad for key, param in self.module.named_parameters()}
        return {key: grad for key, grad in grads.items() if grad is not None}


def make_cases(modules: tuple[nn.Module, nn.Module], layer: bool, shape: Shape, length: int,
               seed: int) -> tuple[Case, Case]:
    """The same random inputs (own copies) for both modules: q, k, v for a core (and the token
    x for one that reads it, without gradient, as the attention benchmark gives it), x for a
    whole layer."""
    generator = torch.Generator().manual_seed(seed + length)
    x = torch.randn(shape.batch, length, shape.d_model, generator=generator)
    if layer:
        named, token = {"x": x}, {}
    else:
        size = (shape.batch, shape.heads, length, shape.head_dim)
        named = {key: torch.randn(size, generator=generator) for key in "qkv"}
        token = {"x": x} if getattr(modules[1], "reads_token", False) else {}

    def case(module: nn.Module) -> Case:
        inputs = {key: tensor.clone().requires_grad_() for key, tensor in named.items()}
        return Case(module, inputs, {key: t.clone() for key, t in token.items()})

    return case(modules[0]), case(modules[1])


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest |a - b| (inf for another shape; NaN in one place only counts as inf)."""
    if a.shape != b.shape:
        return math.inf
    if a.numel() == 0:
        return 0.0
    a, b = a.detach().double(), b.detach().double()
    both_nan = a.isnan() & b.isnan()
    diff = (a - b).abs().masked_fill(both_nan, 0.0).nan_to_num(nan=math.inf)
    return diff.max().item()


def compare_calls(before: Case, after: Case) -> dict:
    """The first forward+backward of each (same weights, same inputs): identical (outputs and
    every gradient bit for bit), max_abs_diff_out, max_abs_diff_grad (over the inputs' and the
    weights' gradients; inf when one has a gradient the other has not). The weights'
    gradients are cleared first: they hold this call's alone."""
    for case in (before, after):
        case.module.zero_grad(set_to_none=True)
    out_b, out_a = before.forward_backward(), after.forward_backward()
    grads_b, grads_a = before.gradients(), after.gradients()
    diff_out = max_abs_diff(out_b, out_a)
    if grads_b.keys() != grads_a.keys():
        diff_grad = math.inf
    else:
        diff_grad = max((max_abs_diff(grads_b[key], grads_a[key]) for key in grads_a),
                        default=0.0)
    identical = (torch.equal(out_b, out_a) and grads_b.keys() == grads_a.keys()
                 and all(torch.equal(grads_b[key], grads_a[key]) for key in grads_a))
    return {"identical": identical, "max_abs_diff_out": diff_out, "max_abs_diff_grad": diff_grad}


# -- timing ------------------------------------------------------------------------------------

ORDER = "BAAB"  # before, after, after, before: a drift over a round favours neither


def alternate_times(before: Callable[[], object], after: Callable[[], object], repeats: int,
                    device: torch.device | str = "cpu") -> tuple[list[float], list[float]]:
    """Seconds of `repeats` calls of each, in the order before, after, after, before, before,
    after, ...: (before's, after's), in call order."""
    times: dict[str, list[float]] = {"B": [], "A": []}
    for index in range(2 * repeats):
        label = ORDER[index % len(ORDER)]
        times[label].append(elapsed(before if label == "B" else after, device))
    return times["B"], times["A"]


def pair_ratios(before_s: list[float], after_s: list[float]) -> list[float]:
    """after / before of the calls made next to each other (the i-th of each)."""
    return [a / b for b, a in zip(before_s, after_s, strict=True)]


def quantile(values: list[float], q: float) -> float:
    """The q-quantile, linear between order statistics (as numpy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def timing_fields(before_s: list[float], after_s: list[float], tolerance: float) -> dict:
    """before_ms, after_ms (medians), ratio (after / before of the medians), the quartiles of
    the pair ratios, and the verdict: "within noise" when |ratio - 1| <= tolerance or the pair
    ratios' interquartile range holds 1, else "slower" or "faster"."""
    before_ms = 1e3 * statistics.median(before_s)
    after_ms = 1e3 * statistics.median(after_s)
    ratio = after_ms / before_ms
    pairs = pair_ratios(before_s, after_s)
    q25, q75 = quantile(pairs, 0.25), quantile(pairs, 0.75)
    if abs(ratio - 1) <= tolerance or q25 <= 1 <= q75:
        verdict = "within noise"
    else:
        verdict = "slower" if ratio > 1 else "faster"
    return {"before_ms": before_ms, "after_ms": after_ms, "ratio": ratio,
            "pair_ratio_q25": q25, "pair_ratio_q75": q75, "verdict": verdict,
            "repeats": len(before_s)}


def repeats_for(call_s: float, repeats: int, min_seconds: float, max_repeats: int) -> int:
    """At least `repeats` timed calls per version, more (up to `max_repeats`) for a short call,
    so that the timed calls of both versions last at least `min_seconds`."""
    wanted = math.ceil(min_seconds / (2 * max(call_s, 1e-9)))
    return max(repeats, min(wanted, max_repeats))


# -- the table ---------------------------------------------------------------------------------

def ratio_table(rows: list[dict]) -> str:
    """One line per variant: after/before at each length (the verdict's mark: + slower,
    - faster, blank within noise; "skipped" for a length not measured), and whether outputs and
    gradients were identical (else the largest difference)."""
    lengths = sorted({row["length"] for row in rows})
    variants = list(dict.fromkeys(row["variant"] for row in rows))
    by = {(row["variant"], row["length"]): row for row in rows}
    marks = {"slower": "+", "faster": "-", "within noise": " "}
    width = max([len("variant"), *map(len, variants)])
    head = f"{'variant':<{width}} " + " ".join(f"{f'N={n}':>9}" for n in lengths)
    lines = [head + "  numerics (after vs before)"]
    for name in variants:
        cells, numerics = [], []
        for n in lengths:
            row = by.get((name, n))
            if row is None or str(row["verdict"]).startswith("skipped"):
                cells.append(f"{'' if row is None else 'skipped':>9}")
                continue
            cells.append(f"{row['ratio']:>8.3f}{marks.get(row['verdict'], '?')}")
            if not row["identical"]:
                numerics.append(f"N={n}: out {row['max_abs_diff_out']:.2g}, "
                                f"grad {row['max_abs_diff_grad']:.2g}")
        lines.append(f"{name:<{width}} " + " ".join(cells) + "  "
                     + ("; ".join(numerics) if numerics else "identical"))
    lines.append("ratio = median after / median before (fwd+bwd); + slower, - faster "
                 "beyond noise")
    return "\n".join(lines)


def median_ratios(rows: list[dict], length: int) -> dict[str, float]:
    """variant -> ratio at `length` (variants measured there only)."""
    return {row["variant"]: row["ratio"] for row in rows
            if row["length"] == length and not math.isnan(row["ratio"])}
