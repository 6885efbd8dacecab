"""Shared attention-test helpers: the variants of conf/attention/, inputs, and a float64
quadratic reference that computes phi with each map's own feature function.

A new file in conf/attention/ gets every generic attention test with no test edited.
"""

from __future__ import annotations

import math

import torch
from attention_reference import allowed_pairs
from torch import Tensor, nn

from linarena.attention import LinearAttention
from linarena.attention.variants import is_linear, load_variant, variant_names

HEAD_DIM = 16
VARIANTS = variant_names()
LINEAR_VARIANTS = [name for name in VARIANTS if is_linear(name)]


def build(name: str, causal: bool, head_dim: int = HEAD_DIM, max_length: int = 64,
          chunk_size: int | None = 8, seed: int = 0) -> nn.Module:
    """The module `attention=<name>` builds in training, with small causal chunks (so short
    inputs span several) and the global seed set (Performer's seedless draw, learned maps)."""
    factory = load_variant(name, {"max_length": max_length})
    torch.manual_seed(seed)
    if is_linear(name) and chunk_size is not None:
        return factory(head_dim=head_dim, causal=causal, chunk_size=chunk_size)
    return factory(head_dim=head_dim, causal=causal)


def inputs(batch=2, heads=3, length=37, dtype=torch.float64, seed=0, scale=1.0,
           head_dim=HEAD_DIM) -> list[Tensor]:
    """q, k, v of shape (batch, heads, length, head_dim)."""
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(batch, heads, length, head_dim, generator=g, dtype=dtype)
            for _ in range(3)]


# Unit roundoff of float64 (2^-53).
UNIT_ROUNDOFF_64 = torch.finfo(torch.float64).eps / 2


def assert_close_float64(actual: Tensor, expected: Tensor, terms: int) -> None:
    """Two float64 computations of one quantity agree to what rounding allows.

    Each element is a sum of at most `terms` products (attention: length x features, through
    two matrix products). A computed sum of n products x_i y_i is within n u sum|x_i y_i| of the
    exact value (u = 2^-53; Higham, Accuracy and Stability of Numerical Algorithms, sec. 3.1),
    wherever the BLAS puts its partial sums: blocking, vector width and thread count move a
    result inside that interval, so two results differ by at most twice that. sum|x_i y_i| is
    bounded here, normwise, by the largest magnitude in `expected` (the terms are of the order of
    the tensor's entries); a factor 16 covers the few operations around the sums (normaliser,
    division, chunk-state updates). An implementation error is orders of magnitude larger.
    """
    scale = expected.abs().max().item()
    atol = 2 * 16 * terms * UNIT_ROUNDOFF_64 * max(scale, 1.0)
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol)


def padding_mask(lengths: list[int], length: int) -> Tensor:
    """bool (batch, length), True for the first lengths[b] tokens (right padding)."""
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]


def quadratic_reference(attn: nn.Module, q, k, v, mask=None) -> Tensor:
    """Plain quadratic attention in float64: softmax for an exact module; for a
    LinearAttention, weights phi(q_i) . phi(k_j) with phi from its map's own features (true
    features: phi * exp(log_scale) for queries and keys, no stabiliser), normalised with the
    module's eps."""
    q, k, v = q.double(), k.double(), v.double()
    batch, _, length, _ = q.shape
    allowed = allowed_pairs(mask, batch, length, attn.causal)
    if not isinstance(attn, LinearAttention):
        scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~allowed, -math.inf)
        return torch.softmax(scores, dim=-1) @ v
    feature_map, positions = attn.feature_map, torch.arange(length)
    context = feature_map.context(mask, batch, length, q.device)
    phi_q, query_log_scale = feature_map.features(q, positions, context, True)
    phi_k, log_scale = feature_map.features(k, positions, context, False)
    if query_log_scale is not None:
        phi_q = phi_q * torch.exp(query_log_scale)[..., None]
    if log_scale is not None:
        phi_k = phi_k * torch.exp(log_scale)[..., None]
    weights = (phi_q @ phi_k.transpose(-1, -2)) * allowed
    return weights @ v / (weights.sum(-1, keepdim=True) + attn.eps)
