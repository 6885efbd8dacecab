"""The intra-chunk part of gated linear attention and its gradient, exact and without overflow:
    out_i = sum_{j <= i} (q_i * k_j * D_ij) . v_j   (j < i when strict),
D_ij = exp(cum_i - cum_j), over the tokens of one chunk. Shapes (b, h, chunks, c, .); cum is
None (no gate), (b, h, chunks, c, 1) (per head) or (b, h, chunks, c, k_dim) (per feature).

Without a gate or with one per head, D is a (c, c) matrix: scores = (q k^T) * D.

Per-feature gates would need a (c, c, k_dim) tensor. Instead the chunk is split in halves,
recursively (secondary chunking, Yang et al., ICML 2024, sec. 4, applied at every level): for a
block of 2h tokens, each query i of the second half and key j of the first half share the
reference r, the last token of the first half, and D_ij = exp(cum_i - cum_r) exp(cum_r - cum_j),
both exponents <= 0 (so nothing overflows, however strong the gates): their scores are one
(h, h) matrix product of rescaled q and k. Every pair j < i of different leaves (blocks of LEAF
tokens) is in exactly one such quadrant, at the level where i and j first fall in different
halves. Inside a leaf the pairs (i, i - offset) are summed elementwise, one offset at a time,
with their own D_ij (exponent <= 0); the diagonal j = i has D = 1. A chunk whose size is no power
of two is padded at its end with zero tokens of log gate 0 (their running sum of the gates stays
at the last token's), which change nothing before them.
Cost: a rescaled copy of q and k per level and (LEAF - 1) / 2 elementwise passes over q and k
for the leaves; never a tensor of c x c x k_dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from linarena.attention.engine.recurrence import causal_tril

# Tokens of the hierarchy's smallest blocks, whose pairs are summed one offset at a time: a
# batched matrix product of blocks this small is slower than the elementwise sums (measured at
# 16K tokens, k_dim 64: leaves of 4 beat 1, 2, 8 and 16).
LEAF = 4


def _decay_matrix(cum: Tensor | None, strict: bool, size: int, like: Tensor) -> Tensor:
    """D (b, h, chunks, c, c) for one gate per head, or the causal 0/1 mask (c, c) without."""
    visible = causal_tril(size, strict, like.device)
    if cum is None:
        return visible.to(like.dtype)
    return torch.exp(torch.where(visible, cum - cum.transpose(-1, -2), -torch.inf))


def _padded(x: Tensor, size: int) -> Tensor:
    """x (..., c, d) with zero rows appended up to `size` tokens."""
    return F.pad(x, (0, 0, 0, size - x.shape[-2])) if size > x.shape[-2] else x


def _padded_cum(cum: Tensor, size: int) -> Tensor:
    """The running sums of the log gates (..., c, g) continued flat up to `size` tokens: the
    padding's gates are 0, so its sums are the last token's. (Zeros would restart the sum, and
    exp(0 - cum_r) of a padded query overflows once cum_r < -88 in float32: 0 * inf is NaN in
    every real key's gradient.)"""
    if size <= cum.shape[-2]:
        return cum
    last = cum[..., -1:, :]
    return torch.cat([cum, last.expand(*last.shape[:-2], size - cum.shape[-2], -1)], dim=-2)


def _late_early(x: Tensor, half: int) -> tuple[Tensor, Tensor]:
    """Views (b, h, chunks, blocks, half, .) of the second and first halves of blocks of
    2 * half tokens."""
    x = x.unflatten(-2, (-1, 2, half))
    return x[..., 1, :, :], x[..., 0, :, :]


def _quadrants(q: Tensor, k: Tensor, cum: Tensor, half: int):
    """At the level of blocks of 2 * half tokens: the second halves' queries, the first
    halves' keys, and exp(cum_i - cum_r), exp(cum_r - cum_j) for them (r: the last token of the
    first half), each (b, h, chunks, blocks, half, .)."""
    (q_late, _), (_, k_early) = _late_early(q, half), _late_early(k, half)
    cum_late, cum_early = _late_early(cum, half)
    ref = cum_early[..., -1:, :]
    return q_late, k_early, torch.exp(cum_late - ref), torch.exp(ref - cum_early)


def _levels(size: int) -> list[int]:
    """Half-block sizes of the hierarchy for a chunk of `size` tokens (a power of two), down to
    the leaves."""
    return [half for half in (size >> level for level in range(1, size.bit_length()))
            if half >= min(LEAF, size)]


def _pairs(x: Tensor, leaf: int, offset: int) -> tuple[Tensor, Tensor]:
    """Views of the tokens i and j = i - offset of the pairs inside the leaves (blocks of
    `leaf` tokens): (b, h, chunks, leaves, leaf - offset, .) each."""
    x = x.unflatten(-2, (-1, leaf))
    return x[..., offset:, :], x[..., :leaf - offset, :]


def intra_chunk(q: Tensor, k: Tensor, v: Tensor, cum: Tensor | None, strict: bool) -> Tensor:
    """The unscaled intra-chunk outputs (b, h, chunks, c, v_dim)."""
    chunk = q.shape[-2]
    if cum is None or cum.shape[-1] == 1:
        return ((q @ k.transpose(-1, -2)) * _decay_matrix(cum, strict, chunk, q)) @ v
    size = 1 << (chunk - 1).bit_length()
    q, k, v = (_padded(x, size) for x in (q, k, v))
    cum = _padded_cum(cum, size)
    out = torch.zeros_like(v) if strict else (q * k).sum(dim=-1, keepdim=True) * v
    for half in _levels(size):
        q_late, k_early, q_decay, k_decay = _quadrants(q, k, cum, half)
        out_late, _ = _late_early(out, half)
        _, v_early = _late_early(v, half)
        out_late += ((q_late * q_decay) @ (k_early * k_decay).transpose(-1, -2)) @ v_early
    leaf = min(LEAF, size)
    for offset in range(1, leaf):
        (q_i, _), (_, k_j), (_, v_j), (out_i, _) = (_pairs(x, leaf, offset) for x in (q, k, v, out))
        cum_i, cum_j = _pairs(cum, leaf, offset)
        out_i += (q_i * k_j * torch.exp(cum_i - cum_j)).sum(dim=-1, keepdim=True) * v_j
    return out[..., :chunk, :]


def intra_chunk_backward(q: Tensor, k: Tensor, v: Tensor, cum: Tensor | None, strict: bool,
                         grad_out: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of sum(grad_out * intra_chunk(q, k, v, cum, strict)) by q, k and v, each the
    shape of its input; the gradient by cum follows from them (see gated_engine)."""
    chunk = q.shape[-2]
    if cum is None or cum.shape[-1] == 1:
        decay = _decay_matrix(cum, strict, chunk, q)
        scores = (q @ k.transpose(-1, -2)) * decay
        grad_scores = (grad_out @ v.transpose(-1, -2)) * decay
        return (grad_scores @ k, grad_scores.transpose(-1, -2) @ q,
                scores.transpose(-1, -2) @ grad_out)
    size = 1 << (chunk - 1).bit_length()
    q, k, v, grad_out = (_padded(x, size) for x in (q, k, v, grad_out))
    cum = _padded_cum(cum, size)
    if strict:
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    else:
        grad_diag = (grad_out * v).sum(dim=-1, keepdim=True)
        dq, dk = grad_diag * k, grad_diag * q
        dv = (q * k).sum(dim=-1, keepdim=True) * grad_out
    for half in _levels(size):
        q_late, k_early, q_decay, k_decay = _quadrants(q, k, cum, half)
        q_scaled, k_scaled = q_late * q_decay, k_early * k_decay
        do_late, _ = _late_early(grad_out, half)
        _, v_early = _late_early(v, half)
        dq_late, _ = _late_early(dq, half)
        _, dk_early = _late_early(dk, half)
        _, dv_early = _late_early(dv, half)
        scores = q_scaled @ k_scaled.transpose(-1, -2)
        grad_scores = do_late @ v_early.transpose(-1, -2)
        dv_early += scores.transpose(-1, -2) @ do_late
        dq_late += (grad_scores @ k_scaled) * q_decay
        dk_early += (grad_scores.transpose(-1, -2) @ q_scaled) * k_decay
    leaf = min(LEAF, size)
    for offset in range(1, leaf):
        (q_i, _), (_, k_j), (_, v_j), (do_i, _) = (_pairs(x, leaf, offset)
                                                  for x in (q, k, v, grad_out))
        (dq_i, _), (_, dk_j), (_, dv_j) = (_pairs(x, leaf, offset) for x in (dq, dk, dv))
        cum_i, cum_j = _pairs(cum, leaf, offset)
        decay = torch.exp(cum_i - cum_j)
        k_decayed = k_j * decay
        grad_score = (do_i * v_j).sum(dim=-1, keepdim=True)
        dv_j += (q_i * k_decayed).sum(dim=-1, keepdim=True) * do_i
        dq_i += grad_score * k_decayed
        dk_j += grad_score * q_i * decay
    return dq[..., :chunk, :], dk[..., :chunk, :], dv[..., :chunk, :]
