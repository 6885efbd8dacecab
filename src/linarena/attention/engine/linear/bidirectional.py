"""Bidirectional linear attention by chunks of tokens, with the feature map applied per chunk and
a hand-written backward that recomputes it (notation in common.py).

The keys are summarised in one augmented state S~ = sum_j phi(k_j) [w_j v_j, w_j]^T of shape
(m, d_v + 1): its first d_v columns are S and its last column is the normaliser z (the usual
"append a column of ones to v"). One matmul phi(q) S~ then gives numerator and denominator
together, and the backward pass needs one matmul per gradient: 6 matmuls of n x m x (d_v + 1)
per head in all, the cost floor of the algorithm.

Everything runs a chunk of tokens at a time (CHUNK_FLOATS features, engine/common.py): the map,
its derivative, the weights and the division each pass over a chunk that stays in cache, the
matmuls are cache-sized, and no tensor of the sequence's length is made but the output, its
denominators and the gradients. The backward pass recomputes phi(q) and phi(k) per chunk instead
of keeping them, and the chunk-sized tensors live in buffers reused from chunk to chunk
(attention/buffers.py). (Whole-length features and intermediates cost a pass through memory per
elementwise op, and page faults for every fresh buffer: 1.6x slower at 16K tokens.)
"""

from __future__ import annotations

import torch
from torch import Tensor

from linarena.attention.buffers import Scratch, write_into
from linarena.attention.engine.common import chunk_bounds, tokens_per_chunk
from linarena.attention.engine.linear.common import (
    add_product,
    eps_slope,
    eps_term,
    masked_log_scale,
    plain_weights,
)
from linarena.attention.features import ChunkFeatures, ParamGrads


def _values(scratch: Scratch, v: Tensor, weights: Tensor | None) -> Tensor:
    """[w_j v_j, w_j]: (batch, heads, c, d_v + 1) from v (batch, heads, c, d_v) and weights
    (batch, heads or 1, c) or None (all 1), in a reused buffer."""
    values = scratch("augmented", v, *v.shape[:-1], v.shape[-1] + 1)
    if weights is None:
        values[..., :-1].copy_(v)
        values[..., -1].fill_(1.0)
    else:
        write_into(values[..., :-1], torch.mul, v, weights[..., None])
        values[..., -1].copy_(weights)
    return values


def _key_weights(log_scale: Tensor | None, mask: Tensor | None, top: Tensor | None,
                 dtype: torch.dtype) -> Tensor | None:
    """w_j of a chunk's keys: the mask (or None) without log-scales, else exp(log_scale - top)."""
    if log_scale is None:
        return plain_weights(mask, dtype)
    return torch.exp(masked_log_scale(log_scale, mask) - top)


class _Bidirectional(torch.autograd.Function):
    """See bidirectional(). Inputs after eps: the chunk length, then the map's trainable
    parameters (ChunkFeatures.params), which get gradients."""

    @staticmethod
    def forward(ctx, q, k, v, mask, features, eps, size, *params):
        batch, heads, length, d_v = v.shape
        bounds = chunk_bounds(length, size)
        scratch = Scratch()
        state, top = None, None  # state (b, h, m, d_v + 1) = [S | z]; top (b, h, 1) or None
        for lo, hi in bounds:
            phi, log_scale = features(k[:, :, lo:hi], lo, hi, False)
            mask_c = None if mask is None else mask[:, lo:hi]
            if log_scale is not None:
                # Online maximum, as in flash attention: rescale what was summed so far.
                new_top = masked_log_scale(log_scale, mask_c).amax(dim=-1, keepdim=True)
                if top is not None:
                    new_top = torch.maximum(top, new_top)
                    state.mul_(torch.exp(top - new_top)[..., None])
                top = new_top
            weights = _key_weights(log_scale, mask_c, top, v.dtype)
            values = _values(scratch, v[:, :, lo:hi], weights)
            state = add_product(state, phi.transpose(-1, -2), values)

        out, den = torch.empty_like(v), v.new_empty(batch, heads, length)
        for lo, hi in bounds:
            phi, log_scale = features(q[:, :, lo:hi], lo, hi, True)
            # (b, h, c, d_v + 1): numerators, then the denominator
            num_den = write_into(scratch("augmented", v, batch, heads, hi - lo, d_v + 1),
                                 torch.matmul, phi, state)
            den_c = write_into(den[:, :, lo:hi], torch.add, num_den[..., -1],
                               eps_term(eps, log_scale, top, v))
            den_c.masked_fill_(den_c == 0, 1.0)  # every term 0: num is 0 too, the output 0
            write_into(out[:, :, lo:hi], torch.div, num_den[..., :-1], den_c[..., None])
        ctx.save_for_backward(q, k, v, mask, state, top, den, out)
        ctx.features, ctx.eps, ctx.bounds = features, eps, bounds
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, mask, state, top, den, out = ctx.saved_tensors
        features, eps, bounds = ctx.features, ctx.eps, ctx.bounds
        grad_q, grad_k, grad_v = (torch.empty_like(x) for x in (q, k, v))
        grad_state = None
        scratch, grad_params = Scratch(), ParamGrads(features.params)
        batch, heads, _, d_v = v.shape
        for lo, hi in bounds:  # queries: out = num / den, [num | den] = phi(q) S~
            phi, log_scale, pullback = features.recompute(q[:, :, lo:hi].detach(), lo, hi, True)
            grad_num_den = scratch("augmented", v, batch, heads, hi - lo, d_v + 1)
            g = write_into(grad_num_den[..., :-1], torch.div, grad_out[:, :, lo:hi],
                           den[:, :, lo:hi, None])
            grad_den = write_into(grad_num_den[..., -1], torch.linalg.vecdot, g,
                                  out[:, :, lo:hi]).neg_()
            rows = grad_q[:, :, lo:hi]
            grad_phi = write_into(_grad_phi(scratch, phi, rows), torch.matmul, grad_num_den,
                                  state.transpose(-1, -2))
            grad_state = add_product(grad_state, phi.transpose(-1, -2), grad_num_den)
            slope = eps_slope(eps_term(eps, log_scale, top, v), log_scale, v)
            grad_x, grads = pullback(grad_phi, None if slope is None else grad_den * slope)
            _store(rows, grad_x)
            grad_params.add(grads)

        for lo, hi in bounds:  # keys: S~ = sum_j phi(k_j) [w_j v_j, w_j]^T
            phi, log_scale, pullback = features.recompute(k[:, :, lo:hi].detach(), lo, hi, False)
            mask_c = None if mask is None else mask[:, lo:hi]
            weights = _key_weights(log_scale, mask_c, top, v.dtype)
            v_c = v[:, :, lo:hi]
            rows = grad_k[:, :, lo:hi]
            grad_phi = write_into(_grad_phi(scratch, phi, rows), torch.matmul,
                                  _values(scratch, v_c, weights), grad_state.transpose(-1, -2))
            grad_log_scale = None
            if log_scale is None:  # d loss / d (w_j v_j) straight into grad_v, then * w_j
                grad_wv = write_into(grad_v[:, :, lo:hi], torch.matmul, phi, grad_state[..., :-1])
                if weights is not None:
                    grad_wv.mul_(weights[..., None])
            else:  # w_j = exp(log_scale_j - top): d w_j / d log_scale_j = w_j
                grad_values = write_into(scratch("grad_values", v, batch, heads, hi - lo, d_v + 1),
                                         torch.matmul, phi, grad_state)  # d / d [w_j v_j, w_j]
                write_into(grad_v[:, :, lo:hi], torch.mul, grad_values[..., :-1],
                           weights[..., None])
                grad_log_scale = (torch.linalg.vecdot(grad_values[..., :-1], v_c)
                                  + grad_values[..., -1]) * weights
            grad_x, grads = pullback(grad_phi, grad_log_scale)
            _store(rows, grad_x)
            grad_params.add(grads)
        return grad_q, grad_k, grad_v, None, None, None, None, *grad_params.result()


def _grad_phi(scratch: Scratch, phi: Tensor, rows: Tensor) -> Tensor:
    """Where d loss / d phi of a chunk goes: straight into the rows of d loss / d x when phi is
    as wide as x (a vjp that works in place, as elu+1's, then leaves nothing to copy), else into
    a buffer."""
    return rows if phi.shape == rows.shape else scratch("grad_phi", phi, *phi.shape)


def _store(rows: Tensor, grad_x: Tensor) -> None:
    """Put a chunk's d loss / d x into the gradient's rows, unless the vjp left it there."""
    if grad_x is not rows:
        rows.copy_(grad_x)


def bidirectional(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, features: ChunkFeatures, eps: float,
) -> Tensor:
    """Every query attends to every real key.

    q, k: (batch, heads, n, head_dim), the map's inputs; v: (batch, heads, n, d_v); mask: bool
    (batch, n) or None (padded q, k, v already zeroed); features: the map of this call, applied
    per chunk. Returns (batch, heads, n, d_v).
    """
    size = tokens_per_chunk(q, features.num_features(q.shape[-1]))
    return _Bidirectional.apply(q, k, v, mask, features, eps, size, *features.params)
