"""Causal linear attention by chunks, on features (notation in common.py)."""

from __future__ import annotations

import torch
from torch import Tensor

from linarena.attention.kernels.common import (
    LinearAttentionState,
    eps_term,
    masked_log_scale,
    normalised,
)


def _split(x: Tensor | None, chunk_size: int, dim: int, count: int) -> list:
    # split(), not slicing in a loop: each slice's backward would allocate a full-length gradient.
    return [None] * count if x is None else list(x.split(chunk_size, dim=dim))


def chunked_causal(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, query_log_scale: Tensor | None,
    key_log_scale: Tensor | None, mask: Tensor | None, eps: float, chunk_size: int,
    state: LinearAttentionState,
) -> tuple[Tensor, LinearAttentionState]:
    """Causal linear attention by chunks: exact quadratic attention inside each chunk of C tokens,
    plus the carried state (S, z) of all earlier chunks, starting from `state` (the state after
    the tokens before these). Memory is O(n C + (n / C) m d_v) for autograd, never a per-token
    m x d_v state.

    phi_q, phi_k: (batch, heads, n, m); v: (batch, heads, n, d_v); log-scales (batch, heads, n)
    or None; mask: bool (batch, n) or None. Returns (out (batch, heads, n, d_v), the state after
    the n tokens).
    """
    count = -(-phi_q.shape[2] // chunk_size)
    causal_mask = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=v.device).tril()
    chunks = zip(
        *(_split(x, chunk_size, 2, count) for x in (phi_q, phi_k, v)),
        *(_split(x, chunk_size, 2, count) for x in (query_log_scale, key_log_scale)),
        _split(mask, chunk_size, 1, count),
        strict=True,
    )
    outs = []
    for phi_q_c, phi_k_c, v_c, lq_c, lk_c, mask_c in chunks:
        tril = causal_mask[: phi_q_c.shape[2], : phi_q_c.shape[2]]
        scores = phi_q_c @ phi_k_c.transpose(-1, -2)  # (b, h, c, c)
        if lk_c is None:
            allowed = tril if mask_c is None else tril & mask_c[:, None, None, :]
            scores = scores * allowed
            past, running = 1.0, None
        else:
            # Running maximum over keys <= i: the stabiliser of query i sees no later key.
            lk_c = masked_log_scale(lk_c, mask_c)
            running = torch.cummax(lk_c.detach(), dim=-1).values
            running = torch.maximum(running, state.top[..., None])
            gap = (lk_c[..., None, :] - running[..., :, None]).masked_fill(~tril, -torch.inf)
            scores = scores * torch.exp(gap)
            past = torch.exp(state.top[..., None] - running)[..., None]  # (b, h, c, 1)
        num = scores @ v_c + (phi_q_c @ state.kv) * past
        den = scores.sum(dim=-1, keepdim=True) + (phi_q_c @ state.z.unsqueeze(-1)) * past
        outs.append(normalised(num, den, eps_term(eps, lq_c, running, v)))
        state = state.absorb(phi_k_c, lk_c, v_c, mask_c)
    return torch.cat(outs, dim=2), state
