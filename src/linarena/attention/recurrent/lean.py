"""Pointwise steps of the recurrent cores that keep only their input for the backward pass.

Written as plain tensor code, autograd keeps every intermediate of these steps for the backward
pass: an RMS norm keeps its input and its normalised output, silu + L2 norm keeps the silu
output as well as its input, logsigmoid keeps a buffer as large as its input. Each is a
(batch, heads, n, head_dim) tensor, as large as q, so a fwd+bwd of DeltaNet kept four more of
them than its recurrence needs. These Functions save the input (and a per-row statistic of size
n), or the output where the recurrence keeps it anyway, and recompute the rest in backward,
which costs a few pointwise passes.

The formulas are the plain ones (tests/attention/test_lean_steps.py checks them against autograd
of the plain code in float64, gradients included).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.nn import functional as F


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return x * rstd * weight

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        x, weight, rstd = ctx.saved_tensors
        normalised = x * rstd
        grad_weight = (grad * normalised).reshape(-1, x.shape[-1]).sum(0)
        u = grad * weight
        # d/dx_j of w_i x_i r, r = (mean(x^2) + eps)^(-1/2): r u_j - r^3 x_j mean(u . x)
        grad_x = rstd * (u - normalised * (u * normalised).mean(-1, keepdim=True))
        return grad_x, grad_weight, None


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x (..., d) / sqrt(mean(x^2) + eps) * weight (d,), in x's dtype; keeps x for backward."""
    return _RMSNorm.apply(x, weight.to(x.dtype), eps)


class _SiluL2Normalise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, eps: float) -> Tensor:
        s = F.silu(x)
        rnorm = torch.rsqrt(s.pow(2).sum(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, rnorm)
        return s * rnorm

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        x, rnorm = ctx.saved_tensors
        sigmoid = torch.sigmoid(x)
        s = x * sigmoid
        y = s * rnorm
        # y = s r, r = (|s|^2 + eps)^(-1/2): ds = r (g - y (g . y)); silu' = sig (1 + x (1 - sig))
        grad_s = rnorm * (grad - y * (grad * y).sum(-1, keepdim=True))
        return grad_s * sigmoid * (1 + x * (1 - sigmoid)), None


def silu_l2_normalise(x: Tensor, eps: float) -> Tensor:
    """silu(x) / sqrt(|silu(x)|^2 + eps) over the last dimension; keeps x for backward."""
    return _SiluL2Normalise.apply(x, eps)


class _LogSigmoidGate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, normaliser: float) -> Tensor:
        gate = F.logsigmoid(logits) / normaliser
        # The output, not the logits: the recurrence keeps the gate anyway (same storage).
        ctx.save_for_backward(gate)
        ctx.normaliser = normaliser
        return gate

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (gate,) = ctx.saved_tensors
        # d logsigmoid(z) / dz = sigmoid(-z) = 1 - exp(logsigmoid(z)); expm1 keeps its precision
        # where the gate is near 1 (sigmoid(-z) tiny), where 1 - exp(.) would cancel.
        return grad * -torch.expm1(gate * ctx.normaliser) / ctx.normaliser, None


def log_sigmoid_gate(logits: Tensor, normaliser: float) -> Tensor:
    """logsigmoid(logits) / normaliser (GLA's log gate, <= 0); keeps only its output, which
    the recurrence keeps too, for backward."""
    return _LogSigmoidGate.apply(logits, normaliser)
