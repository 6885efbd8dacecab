"""The generic checks of a core (q, k, v -> out; tests/attention/test_attention_*.py), each a
function of the variant's name returning a certificate row: float64 exactness against the
quadratic (or token-by-token) reference, padding (outputs, and gradients under NaN padding),
causal leakage, step() and continued states against the whole sequence, autocast at a long
length, and gradcheck. Shapes and tolerances are those of the tests."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch

from linarena.arena.checks import (
    SKIP,
    Row,
    autocast_row,
    gradcheck_row,
    long_checks,
    max_error,
    measured,
    mode,
)
from linarena.arena.reference import (
    HEAD_DIM,
    build,
    features,
    float64_tolerance,
    inputs,
    padding_mask,
    quadratic_reference,
)
from linarena.attention.variants import is_linear


def exact(name: str, conf_dir: Path, causal: bool) -> Row:
    """Float64 output against the quadratic reference, padded (lengths 37 and 23)."""
    q, k, v = inputs()
    mask = padding_mask([37, 23], 37)
    attn = build(name, causal, conf_dir=conf_dir)
    out, expected = attn(q, k, v, mask), quadratic_reference(attn, q, k, v, mask)
    real = mask[:, None, :, None].expand_as(out)
    return measured(f"float64 reference ({mode(causal)})", max_error(out[real], expected[real]),
                    float64_tolerance(expected[real], 37 * features(attn, HEAD_DIM)),
                    "max |out - quadratic reference| over real tokens, float64, 37 tokens")


def padding(name: str, conf_dir: Path, causal: bool) -> Row:
    """Junk padding (scale 50) leaves the real outputs those of the bare sequence."""
    q, k, v = inputs(batch=1, length=20)
    attn = build(name, causal, conf_dir=conf_dir)
    bare = attn(q, k, v)
    junk = inputs(batch=1, length=11, seed=1, scale=50.0)
    padded = [torch.cat([t, j], dim=2) for t, j in zip((q, k, v), junk, strict=True)]
    out = attn(*padded, mask=padding_mask([20], 31))
    error = max_error(out[:, :, :20], bare) if torch.isfinite(out).all() else float("inf")
    return measured(f"padding ({mode(causal)})", error,
                    float64_tolerance(bare, 31 * features(attn, HEAD_DIM)),
                    "20 real tokens + 11 of junk (x50): max |padded - bare| over real tokens")


def padding_gradients(name: str, conf_dir: Path, causal: bool) -> Row:
    """NaN at the padded positions of q, k, v changes no gradient (inputs, parameters)."""
    attn = build(name, causal, conf_dir=conf_dir).double()
    mask = padding_mask([12, 7], 12)
    clean = [t.masked_fill(~mask[:, None, :, None], 0.0) for t in inputs(length=12)]
    poisoned = [t.masked_fill(~mask[:, None, :, None], float("nan")) for t in clean]
    expected, got = (_gradients(attn, tensors, mask) for tensors in (clean, poisoned))
    error = max((max_error(g, e) for g, e in zip(got, expected, strict=True)), default=0.0)
    tolerance = max((float64_tolerance(e, 12 * features(attn, HEAD_DIM)) for e in expected),
                    default=0.0)
    return measured(f"NaN padding, gradients ({mode(causal)})", error, tolerance,
                    "max |gradient - gradient with zero padding|, inputs and parameters")


def _gradients(attn, tensors, mask) -> list[torch.Tensor]:
    tensors = [t.detach().requires_grad_(True) for t in tensors]
    params = [p for p in attn.parameters() if p.requires_grad]
    out = attn(*tensors, mask)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(9),
                          dtype=out.dtype)
    real = mask[:, None, :, None].expand_as(out)
    grads = torch.autograd.grad((out[real] * weights[real]).sum(), tensors + params,
                                allow_unused=True)
    return [g for g in grads if g is not None]


def causal_leakage(name: str, conf_dir: Path) -> Row:
    """Changing the tokens after t (to values x30) leaves every output up to t bit-identical."""
    q, k, v = inputs(batch=2, length=40, dtype=torch.float32)
    attn = build(name, causal=True, chunk_size=16, conf_dir=conf_dir)
    before = attn(q, k, v)
    t = 21  # inside a chunk, so intra-chunk masking is exercised
    changed = [x.clone() for x in (q, k, v)]
    for x in changed:
        x[:, :, t + 1:] = 30.0 * torch.randn_like(x[:, :, t + 1:])
    after = attn(*changed)
    if torch.equal(before[:, :, t + 1:], after[:, :, t + 1:]):
        return measured("causal leakage", float("nan"), 0.0,
                        "the outputs after t did not change either: the check saw nothing")
    return measured("causal leakage", max_error(after[:, :, :t + 1], before[:, :, :t + 1]), 0.0,
                    "max |change| of outputs up to t = 21 when tokens after it change (x30)")


def step(name: str, conf_dir: Path) -> Row:
    """step() token by token gives the parallel causal outputs (float64, 30 tokens)."""
    if not is_linear(name, conf_dir):
        return Row("step()", SKIP, None, None, "quadratic attention: a KV cache, no fixed state")
    q, k, v = inputs(batch=2, length=30, scale=2.0)
    attn = build(name, causal=True, max_length=30, conf_dir=conf_dir)
    parallel, state, steps = attn(q, k, v), None, []
    for i in range(30):
        out, state = attn.step(q[:, :, i], k[:, :, i], v[:, :, i], state)
        steps.append(out)
    return measured("step()", max_error(torch.stack(steps, dim=2), parallel),
                    float64_tolerance(parallel, 30 * features(attn, HEAD_DIM)),
                    "max |step-by-step - parallel causal|, float64, 30 tokens")


def continued_state(name: str, conf_dir: Path) -> Row:
    """A sequence split at 13, the second part started from the first's state, gives the
    outputs of the whole."""
    if not is_linear(name, conf_dir):
        return Row("continued state", SKIP, None, None,
                   "quadratic attention: a KV cache, no fixed state")
    q, k, v = inputs(length=30, scale=2.0)
    attn = build(name, causal=True, max_length=30, conf_dir=conf_dir)
    whole = attn(q, k, v)
    first, state = attn(q[:, :, :13], k[:, :, :13], v[:, :, :13], return_state=True)
    second = attn(q[:, :, 13:], k[:, :, 13:], v[:, :, 13:], initial_state=state)
    return measured("continued state", max_error(torch.cat([first, second], dim=2), whole),
                    float64_tolerance(whole, 30 * features(attn, HEAD_DIM)),
                    "max |two segments (split at 13) - whole|, float64")


def autocast_long(name: str, conf_dir: Path, causal: bool, length: int) -> Row:
    """bf16 autocast at `length` tokens, |q|, |k| about 30: finite, and within 2e-2 (max) and
    3e-3 (mean) of float32, relative to the output's magnitude (the test's bounds)."""
    g = torch.Generator().manual_seed(0)
    shape = (1, 2, length, 64)
    q, k = (4.0 * torch.randn(shape, generator=g) for _ in range(2))
    v = torch.randn(shape, generator=g)
    attn = build(name, causal, head_dim=64, max_length=length, chunk_size=None, heads=2,
                 conf_dir=conf_dir)
    q, k, v = (x.to(torch.bfloat16) for x in (q, k, v))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attn(q, k, v)
    exact_out = attn(q.float(), k.float(), v.float())  # the same (rounded) inputs
    return autocast_row(length, causal, out, exact_out)


def gradcheck(name: str, conf_dir: Path, causal: bool) -> Row:
    """torch.autograd.gradcheck in float64, padded, along random directions (fast mode)."""
    q, k, v = (x.requires_grad_(True) for x in inputs(batch=2, heads=1, length=11))
    mask = padding_mask([11, 7], 11)
    attn = build(name, causal, max_length=16, chunk_size=4, heads=1, conf_dir=conf_dir)
    return gradcheck_row(causal, lambda a, b, c: attn(a, b, c, mask), (q, k, v),
                         "float64 Jacobian", "padded")


def core_checks(long_length: int) -> list[tuple[str, object]]:
    """(check name, function(name, conf_dir) -> Row) of every generic core check."""
    found: list[tuple[str, object]] = []
    for causal in (False, True):
        found += [(f"float64 reference ({mode(causal)})", partial(exact, causal=causal)),
                  (f"padding ({mode(causal)})", partial(padding, causal=causal)),
                  (f"NaN padding, gradients ({mode(causal)})",
                   partial(padding_gradients, causal=causal))]
    found += [("causal leakage", causal_leakage), ("step()", step),
              ("continued state", continued_state)]
    return found + long_checks(autocast_long, gradcheck, long_length)

