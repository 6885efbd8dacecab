"""Bidirectional linear attention on features (notation in common.py), with a hand-written
backward.

The keys are summarised in one augmented state S~ = sum_j phi(k_j) [w_j v_j, w_j]^T of shape
(m, d_v + 1): its first d_v columns are S and its last column is the normaliser z (the usual
"append a column of ones to v"). One matmul phi(q) S~ then gives numerator and denominator
together, and the backward pass needs one matmul per gradient and a few passes over
(n, d_v)-sized tensors, where autograd would add several (slices, the division's rule).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from linarena.attention.kernels.common import (
    EPS_EXPONENT_CAP,
    eps_term,
    masked_log_scale,
    plain_weights,
)


def _values(v: Tensor, weights: Tensor | None) -> Tensor:
    """[w_j v_j, w_j]: (batch, heads, n, d_v + 1) from v (batch, heads, n, d_v) and weights
    (batch, heads or 1, n) or None (all 1)."""
    values = v.new_empty(*v.shape[:-1], v.shape[-1] + 1)
    if weights is None:
        values[..., :-1].copy_(v)
        values[..., -1].fill_(1.0)
    else:
        values[..., :-1].copy_(v * weights[..., None])
        values[..., -1].copy_(weights)
    return values


class _Bidirectional(torch.autograd.Function):
    """See bidirectional()."""

    @staticmethod
    def forward(ctx, phi_q, phi_k, v, query_log_scale, key_log_scale, mask, eps):
        top = None
        if key_log_scale is None:
            weights = plain_weights(mask, v.dtype)
        else:
            log_scale = masked_log_scale(key_log_scale, mask)
            top = log_scale.amax(dim=-1, keepdim=True)  # (b, h, 1), a constant stabiliser
            weights = torch.exp(log_scale - top)
        state = phi_k.transpose(-1, -2) @ _values(v, weights)  # (b, h, m, d_v + 1) = [S | z]
        num_den = phi_q @ state
        eps_t = eps_term(eps, query_log_scale, top, v)
        den = num_den[..., -1] + eps_t
        den = torch.where(den == 0, 1.0, den)  # every term 0: num is 0 too, the output 0
        out = num_den[..., :-1] / den[..., None]
        # d eps_t / d query_log_scale = -eps_t, 0 where eps_term capped the exponent.
        eps_slope = None
        if isinstance(eps_t, Tensor) and query_log_scale is not None:
            eps_slope = torch.where(eps_t < 0.5 * math.exp(EPS_EXPONENT_CAP[v.dtype]), -eps_t, 0.0)
        ctx.save_for_backward(phi_q, phi_k, v, weights, state, den, out, eps_slope)
        ctx.has_key_scale = key_log_scale is not None
        return out

    @staticmethod
    def backward(ctx, grad_out):
        phi_q, phi_k, v, weights, state, den, out, eps_slope = ctx.saved_tensors
        grad_num_den = v.new_empty(*v.shape[:-1], v.shape[-1] + 1)
        g = grad_num_den[..., :-1].copy_(grad_out / den[..., None])
        grad_den = grad_num_den[..., -1].copy_(-(g * out).sum(dim=-1))
        grad_phi_q = grad_num_den @ state.transpose(-1, -2)
        grad_state = phi_q.transpose(-1, -2) @ grad_num_den
        grad_phi_k = _values(v, weights) @ grad_state.transpose(-1, -2)
        grad_values = phi_k @ grad_state  # d loss / d [w_j v_j, w_j]
        grad_v = grad_values[..., :-1]
        if weights is not None:
            grad_v = grad_v * weights[..., None]
        grad_key_log_scale = None
        if ctx.has_key_scale:  # w_j = exp(log_scale_j - top): d w_j / d log_scale_j = w_j
            grad_weights = (grad_values[..., :-1] * v).sum(dim=-1) + grad_values[..., -1]
            grad_key_log_scale = grad_weights * weights
        grad_query_log_scale = None if eps_slope is None else grad_den * eps_slope
        return (grad_phi_q, grad_phi_k, grad_v, grad_query_log_scale, grad_key_log_scale,
                None, None)


def bidirectional(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, query_log_scale: Tensor | None,
    key_log_scale: Tensor | None, mask: Tensor | None, eps: float,
) -> Tensor:
    """Every query attends to every real key.

    phi_q, phi_k: (batch, heads, n, m); v: (batch, heads, n, d_v); log-scales (batch, heads, n)
    or None; mask: bool (batch, n) or None. Returns (batch, heads, n, d_v).
    """
    return _Bidirectional.apply(phi_q, phi_k, v, query_log_scale, key_log_scale, mask, eps)
