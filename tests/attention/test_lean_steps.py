"""The memory-lean pointwise steps of the recurrent cores (recurrent/lean.py): the same values
and gradients as the plain formulas autograd differentiates, in float64 (gates near 1
included), and what they keep for the backward pass is one tensor of the input's size (the
input, or the output the recurrence keeps anyway) plus a per-row statistic."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from linarena.attention.recurrent.lean import log_sigmoid_gate, rms_norm, silu_l2_normalise

EPS = 1e-6


def plain_rms(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight


def plain_silu_l2(x):
    s = F.silu(x)
    return s * torch.rsqrt(s.pow(2).sum(-1, keepdim=True) + EPS)


def plain_gate(logits):
    return F.logsigmoid(logits) / 16.0


CASES = {
    "rms_norm": (lambda x, w: rms_norm(x, w, EPS), plain_rms),
    "silu_l2_normalise": (lambda x, w: silu_l2_normalise(x, EPS), lambda x, w: plain_silu_l2(x)),
    "log_sigmoid_gate": (lambda x, w: log_sigmoid_gate(x, 16.0), lambda x, w: plain_gate(x)),
}


@pytest.mark.parametrize("name", CASES)
def test_values_and_gradients_are_the_plain_formulas(name: str) -> None:
    lean, plain = CASES[name]
    generator = torch.Generator().manual_seed(0)
    x = 3 * torch.randn(2, 3, 7, 8, generator=generator, dtype=torch.float64)
    x[0, 0, 0] = torch.linspace(20, 35, 8)  # logits whose gate is 1 to within 1e-9 .. 1e-15
    x.requires_grad_()
    weight = torch.randn(8, generator=generator, dtype=torch.float64).requires_grad_()
    grad = torch.randn(2, 3, 7, 8, generator=generator, dtype=torch.float64)
    expected = plain(x, weight)
    expected_grads = torch.autograd.grad(expected, (x, weight), grad, allow_unused=True)
    actual = lean(x, weight)
    actual_grads = torch.autograd.grad(actual, (x, weight), grad, allow_unused=True)
    # a few pointwise operations and sums of 8 terms in float64: rounding ~1e-15 of values ~10
    torch.testing.assert_close(actual, expected, atol=1e-12, rtol=0)
    for a, e in zip(actual_grads, expected_grads, strict=True):
        if e is None:
            assert a is None or not a.abs().any()
        else:
            torch.testing.assert_close(a, e, atol=1e-12, rtol=0)
    assert torch.autograd.gradcheck(lambda t: lean(t, weight), (x[:1, :1, :3],))


@pytest.mark.parametrize("name", CASES)
def test_only_the_input_and_row_statistics_are_kept(name: str) -> None:
    lean, _ = CASES[name]
    x = torch.randn(1, 2, 64, 16, requires_grad=True)
    weight = torch.ones(16, requires_grad=True)
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        lean(x, weight)
    full = [t for t in kept if t.numel() == x.numel()]
    # the input, or (the log gate) the output, which the recurrence keeps anyway
    assert len(full) == 1 and (full[0].data_ptr() == x.data_ptr()) != (name == "log_sigmoid_gate")
    assert sum(t.numel() for t in kept) <= x.numel() + x.numel() // 16 + 16


def test_the_gate_gradient_keeps_its_precision_where_the_gate_is_near_one() -> None:
    """sigmoid(-z) ~ 1e-15 at z = 35: the gradient from the kept gate must not cancel to 0."""
    logits = torch.linspace(20, 35, 16, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(log_sigmoid_gate(logits, 16.0).sum(), logits)
    torch.testing.assert_close(grad, torch.sigmoid(-logits.detach()) / 16.0, rtol=1e-10, atol=0)
