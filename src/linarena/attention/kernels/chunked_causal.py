"""Causal linear attention by chunks (notation in common.py)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from linarena.attention.feature_map import FeatureMap
from linarena.attention.kernels.common import (
    LinearAttentionState,
    bind_context,
    masked_log_scale,
)


def chunked_causal(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, feature_map: FeatureMap,
    context: Any, eps: float, chunk_size: int,
) -> Tensor:
    """Causal linear attention by chunks: exact quadratic attention inside each chunk of C tokens,
    plus the carried state (S, z) of all earlier chunks. Memory is O(n C + (n / C) m d_v) for
    autograd, never a per-token m x d_v state. Gradients by autograd through the map.

    q, k: (batch, heads, n, d); v: (batch, heads, n, d_v); mask: bool (batch, n) or None;
    context: feature_map.context(...) of this call. Returns (batch, heads, n, d_v).
    """
    features = bind_context(feature_map, context)
    positions = torch.arange(q.shape[2], device=q.device)
    causal_mask = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    # split(), not slicing in a loop: each slice's backward would allocate a full-length gradient.
    chunks = [x.split(chunk_size, dim=2) for x in (q, k, v)]
    mask_chunks = [None] * len(chunks[0]) if mask is None else mask.split(chunk_size, dim=1)
    state = None
    outs = []
    for q_c, k_c, v_c, mask_c, pos in zip(
        *chunks, mask_chunks, positions.split(chunk_size), strict=True
    ):
        tril = causal_mask[: q_c.shape[2], : q_c.shape[2]]
        phi_q, _ = features(q_c, pos, True)
        phi_k, log_scale = features(k_c, pos, False)
        if state is None:
            state = LinearAttentionState.zeros(q, phi_q.shape[-1], v.shape[-1])
        scores = phi_q @ phi_k.transpose(-1, -2)  # (b, h, c, c)
        if log_scale is None:
            allowed = tril if mask_c is None else tril & mask_c[:, None, None, :]
            scores = scores * allowed
            past = 1.0
        else:
            # Running maximum over keys <= i: the stabiliser of query i sees no later key.
            log_scale = masked_log_scale(log_scale, mask_c)
            running = torch.cummax(log_scale.detach(), dim=-1).values
            running = torch.maximum(running, state.top[..., None])
            gap = (log_scale[..., None, :] - running[..., :, None]).masked_fill(~tril, -torch.inf)
            scores = scores * torch.exp(gap)
            past = torch.exp(state.top[..., None] - running)[..., None]  # (b, h, c, 1)
        num = scores @ v_c + (phi_q @ state.kv) * past
        den = scores.sum(dim=-1, keepdim=True) + (phi_q @ state.z.unsqueeze(-1)) * past
        outs.append(num / (den + eps))
        state = state.absorb(phi_k, log_scale, v_c, mask_c)
    return torch.cat(outs, dim=2)
