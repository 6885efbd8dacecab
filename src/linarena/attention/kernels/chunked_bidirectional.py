"""Bidirectional linear attention, chunked, with a backward pass that recomputes the features.

The keys are summarised in one augmented state S~ = sum_j phi(k_j) [w_j v_j, w_j]^T of shape
(m, d_v + 1): its first d_v columns are S and its last column is the normaliser z (the usual
"append a column of ones to v"). One matmul phi(q) S~ then gives numerator and denominator
together, and the backward pass needs one matmul per gradient instead of a matmul plus a
matrix-vector product. See common.py for the notation (key weights w_j, log-scales).

Chunking keeps each elementwise pass in cache and its buffers small; not storing phi(q) and
phi(k) saves two (batch, heads, length, num_features) tensors per layer. A map without an
analytic backward takes the same sums through autograd instead (_by_autograd), which stores phi
but needs nothing from the map beyond its forward, and traces in one torch.compile graph.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from linarena.attention.buffers import rows, write_into
from linarena.attention.feature_map import FeatureMap
from linarena.attention.kernels.common import (
    FeatureFn,
    bind_context,
    masked_log_scale,
    plain_weights,
)


def _augmented_values(buffer: Tensor, v: Tensor, weights: Tensor | None) -> Tensor:
    """[w_j v_j, w_j] for the c keys of a chunk, written into buffer[:, :, :c].

    buffer: (batch, heads, >= c, d_v + 1); v: (batch, heads, c, d_v); weights: (batch, heads
    or 1, c) or None (all 1). Returns the view (batch, heads, c, d_v + 1).
    """
    values = buffer[:, :, : v.shape[2]]
    if weights is None:
        values[..., :-1].copy_(v)
        values[..., -1].fill_(1.0)
    else:
        write_into(values[..., :-1], torch.mul, v, weights[..., None])
        values[..., -1].copy_(weights)
    return values


def _chunk_bounds(length: int, chunk_size: int) -> list[tuple[int, int]]:
    """(start, end) of each chunk. Written over the chunk count rather than range(0, length, ..)
    so that torch.compile specialises on the number of chunks, not on the exact length: one
    graph serves every length with the same chunk count."""
    count = (length + chunk_size - 1) // chunk_size
    return [(i * chunk_size, torch.sym_min((i + 1) * chunk_size, length)) for i in range(count)]


class BidirectionalLinearAttention(torch.autograd.Function):
    """See chunked_bidirectional."""

    @staticmethod
    def forward(ctx, q, k, v, mask, features, vjp, eps, chunk_size):
        batch, heads, length, d_v = v.shape
        bounds = _chunk_bounds(length, chunk_size)
        positions = torch.arange(length, device=q.device)
        buffer = v.new_empty(batch, heads, min(chunk_size, length), d_v + 1)
        # Per-chunk buffers are reused, not reallocated: a fresh multi-MB tensor per chunk costs
        # page faults when the allocator hands memory back to the OS between chunks.
        phi_buffer = None  # the first chunk's phi, once known (m is the map's business)
        state, top = None, None  # state: (b, h, m, d_v + 1) = [S | z]
        for s, e in bounds:
            mask_c = None if mask is None else mask[:, s:e]
            phi_k, log_scale = features(
                k[:, :, s:e], positions[s:e], False, rows(phi_buffer, e - s)
            )
            phi_buffer = phi_k if phi_buffer is None else phi_buffer
            if log_scale is None:
                weights = plain_weights(mask_c, phi_k.dtype)
            else:
                # Online maximum, as in flash attention: rescale what was summed so far.
                log_scale = masked_log_scale(log_scale, mask_c)
                new_top = log_scale.amax(dim=-1)
                if top is not None:
                    new_top = torch.maximum(top, new_top)
                    state.mul_(torch.exp(top - new_top)[..., None, None])
                top = new_top
                weights = torch.exp(log_scale - top[..., None])
            update = phi_k.transpose(-1, -2) @ _augmented_values(buffer, v[:, :, s:e], weights)
            state = update if state is None else state.add_(update)

        out, den = torch.empty_like(v), v.new_empty(batch, heads, length)
        for s, e in bounds:
            phi_q, _ = features(q[:, :, s:e], positions[s:e], True, rows(phi_buffer, e - s))
            num_den = phi_q @ state  # (b, h, c, d_v + 1): numerators, then the normaliser
            write_into(den[:, :, s:e], torch.add, num_den[..., -1], eps)
            write_into(out[:, :, s:e], torch.div, num_den[..., :-1], den[:, :, s:e, None])

        ctx.save_for_backward(q, k, v, mask, state, top, den, out)
        ctx.features, ctx.vjp, ctx.bounds = features, vjp, bounds
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, mask, state, top, den, out = ctx.saved_tensors
        features, vjp, bounds = ctx.features, ctx.vjp, ctx.bounds
        positions = torch.arange(q.shape[2], device=q.device)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        grad_state = torch.zeros_like(state)
        batch, heads, chunk, _ = q[:, :, : bounds[0][1]].shape
        buffer = v.new_empty(batch, heads, chunk, v.shape[-1] + 1)
        grad_phi_buffer = q.new_empty(batch, heads, chunk, state.shape[-2])
        phi_buffer = torch.empty_like(grad_phi_buffer)

        for s, e in bounds:
            x = q[:, :, s:e].detach()
            phi_q, _ = features(x, positions[s:e], True, rows(phi_buffer, e - s))
            # d loss / d [numerators, normaliser] of the chunk's queries.
            grad_num_den = buffer[:, :, : e - s]
            g = write_into(
                grad_num_den[..., :-1], torch.div, grad_out[:, :, s:e], den[:, :, s:e, None]
            )
            write_into(grad_num_den[..., -1], torch.sum, g * out[:, :, s:e], -1).neg_()
            grad_phi_q = write_into(
                rows(grad_phi_buffer, e - s), torch.matmul, grad_num_den, state.transpose(-1, -2)
            )
            grad_state += phi_q.detach().transpose(-1, -2) @ grad_num_den
            vjp(x, positions[s:e], phi_q, grad_phi_q, None, grad_q[:, :, s:e])

        for s, e in bounds:
            mask_c = None if mask is None else mask[:, s:e]
            x = k[:, :, s:e].detach()
            phi_k, log_scale = features(x, positions[s:e], False, rows(phi_buffer, e - s))
            if log_scale is None:
                weights = plain_weights(mask_c, phi_k.dtype)
            else:
                weights = torch.exp(masked_log_scale(log_scale.detach(), mask_c) - top[..., None])
            v_c = v[:, :, s:e]
            grad_phi_k = write_into(
                rows(grad_phi_buffer, e - s), torch.matmul,
                _augmented_values(buffer, v_c, weights), grad_state.transpose(-1, -2),
            )
            if log_scale is None:  # d loss / d (w_j v_j), straight into grad_v, then * w_j
                grad_wv = write_into(
                    grad_v[:, :, s:e], torch.matmul, phi_k.detach(), grad_state[..., :-1]
                )
                if weights is not None:
                    grad_wv.mul_(weights[..., None])
                grad_log_scale = None
            else:  # w_j = exp(log_scale_j - top) also has a gradient: d w_j / d log_scale_j = w_j
                grad_wv_w = phi_k.detach() @ grad_state  # d loss / d [w_j v_j, w_j]
                grad_wv = grad_wv_w[..., :-1]
                write_into(grad_v[:, :, s:e], torch.mul, grad_wv, weights[..., None])
                grad_weights = (grad_wv * v_c).sum(dim=-1) + grad_wv_w[..., -1]
                grad_log_scale = grad_weights * weights
            vjp(x, positions[s:e], phi_k, grad_phi_k, grad_log_scale, grad_k[:, :, s:e])
        return grad_q, grad_k, grad_v, None, None, None, None, None


def _by_autograd(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, features: FeatureFn, eps: float,
    chunk_size: int,
) -> Tensor:
    """The same chunked sums for a map without an analytic backward, differentiated by
    autograd through the map (which keeps each chunk's phi for the backward pass)."""
    length = q.shape[2]
    positions = torch.arange(length, device=q.device)
    bounds = _chunk_bounds(length, chunk_size)
    state, top = None, None  # state: (b, h, m, d_v + 1) = [S | z]
    for s, e in bounds:
        mask_c, v_c = None if mask is None else mask[:, s:e], v[:, :, s:e]
        phi_k, log_scale = features(k[:, :, s:e], positions[s:e], False)
        if log_scale is None:
            weights = plain_weights(mask_c, v.dtype)
        else:
            log_scale = masked_log_scale(log_scale, mask_c)
            new_top = log_scale.detach().amax(dim=-1)
            if top is not None:
                new_top = torch.maximum(top, new_top)
                state = state * torch.exp(top - new_top)[..., None, None]
            top = new_top
            weights = torch.exp(log_scale - top[..., None])
        ones = v_c.new_ones(*v_c.shape[:3], 1)
        values = torch.cat([v_c, ones], dim=-1)
        values = values if weights is None else values * weights[..., None]
        update = phi_k.transpose(-1, -2) @ values
        state = update if state is None else state + update
    outs = []
    for s, e in bounds:
        num_den = features(q[:, :, s:e], positions[s:e], True)[0] @ state
        outs.append(num_den[..., :-1] / (num_den[..., -1:] + eps))
    return torch.cat(outs, dim=2)


def chunked_bidirectional(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, feature_map: FeatureMap,
    context: Any, eps: float, chunk_size: int,
) -> Tensor:
    """Bidirectional linear attention over chunks of `chunk_size` tokens.

    With the map's analytic backward (feature_map.vjp), a custom backward recomputes the
    features instead of storing them; without one, autograd differentiates through the map.
    q, k: (batch, heads, n, d); v: (batch, heads, n, d_v); mask: bool (batch, n) or None;
    context: feature_map.context(...) of this call. Returns (batch, heads, n, d_v).
    """
    features = bind_context(feature_map, context)
    vjp = feature_map.vjp(context)
    if vjp is None:
        return _by_autograd(q, k, v, mask, features, eps, chunk_size)
    return BidirectionalLinearAttention.apply(q, k, v, mask, features, vjp, eps, chunk_size)
