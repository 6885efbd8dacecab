"""Causal linear attention by chunks, on features (notation in common.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from linarena.attention.kernels.common import (
    LinearAttentionState,
    eps_term,
    lowest,
    masked_log_scale,
)


def _pad_to_chunks(phi_q, phi_k, v, query_log_scale, key_log_scale, mask, pad: int) -> tuple:
    """Pad the length to whole chunks: padded keys have phi = 0 (and the lowest log-scale, so
    they never win a maximum) and add nothing; padded queries are cut from the output."""
    phi_q, phi_k, v = (F.pad(x, (0, 0, 0, pad)) for x in (phi_q, phi_k, v))
    if query_log_scale is not None:
        query_log_scale = F.pad(query_log_scale, (0, pad))
    if key_log_scale is not None:
        key_log_scale = F.pad(key_log_scale, (0, pad), value=lowest(key_log_scale.dtype))
    if mask is not None:
        mask = F.pad(mask, (0, pad), value=False)
    return phi_q, phi_k, v, query_log_scale, key_log_scale, mask


def _values(v: Tensor) -> Tensor:
    """[v, 1]: (batch, heads, c, d_v + 1), so that one matmul gives numerator and denominator."""
    return torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)


class _ChunkedCausal(torch.autograd.Function):
    """See chunked_causal(). The backward is the forward's scan run in reverse, with the
    gradient of the carried state carried backwards; each chunk's gradients are written into
    one full-length buffer, where autograd would keep every chunk's and concatenate them."""

    @staticmethod
    def forward(ctx, phi_q, phi_k, v, log_scale, start, running, tops, eps_t, size, scaled):
        batch, heads, length, _ = phi_q.shape
        tril = torch.ones(size, size, dtype=torch.bool, device=v.device).tril()
        values_all = _values(v)
        out = v.new_empty(batch, heads, length, v.shape[-1])
        den = v.new_empty(batch, heads, length)
        states, gates, scores = [], [], []
        state = start
        for c, lo in enumerate(range(0, length, size)):
            hi = lo + size
            phi_q_c, phi_k_c, lk, run = phi_q[:, :, lo:hi], phi_k[:, :, lo:hi], log_scale[
                :, :, lo:hi], running[:, :, lo:hi]
            values = values_all[:, :, lo:hi]
            gate = torch.exp((lk[..., None, :] - run[..., :, None]).masked_fill(~tril, -torch.inf))
            score = (phi_q_c @ phi_k_c.transpose(-1, -2)) * gate  # (b, h, C, C)
            from_state = phi_q_c @ state
            if scaled:
                from_state = from_state * torch.exp(tops[..., c, None] - run)[..., None]
            num_den = score @ values + from_state
            den_c = num_den[..., -1] + (eps_t[:, :, lo:hi] if isinstance(eps_t, Tensor) else eps_t)
            den_c = torch.where(den_c == 0, 1.0, den_c)  # every term 0: num too, the output 0
            out[:, :, lo:hi] = num_den[..., :-1] / den_c[..., None]
            den[:, :, lo:hi] = den_c
            states.append(state)
            gates.append(gate)
            scores.append(score)
            if scaled:
                weights = torch.exp(lk - tops[..., c + 1, None])  # relative to the chunk's end
                values = values * weights[..., None]
                state = state * torch.exp(tops[..., c] - tops[..., c + 1])[..., None, None]
            state = state + phi_k_c.transpose(-1, -2) @ values
        ctx.save_for_backward(phi_q, phi_k, values_all, log_scale, running, tops, den, out,
                              torch.stack(states), torch.stack(gates), torch.stack(scores))
        ctx.size, ctx.eps_is_tensor, ctx.scaled = size, isinstance(eps_t, Tensor), scaled
        return out, state

    @staticmethod
    def backward(ctx, grad_out, grad_state):
        phi_q, phi_k, values_all, log_scale, running, tops, den, out, states, gates, scores = (
            ctx.saved_tensors)
        size, length, scaled = ctx.size, phi_q.shape[2], ctx.scaled
        grad_phi_q, grad_phi_k, grad_v = (torch.empty_like(x) for x in (phi_q, phi_k, out))
        grad_log_scale = torch.empty_like(log_scale) if scaled else None
        grad_den = den.new_empty(den.shape)
        for c in reversed(range(length // size)):
            lo, hi = c * size, (c + 1) * size
            phi_q_c, phi_k_c, lk = phi_q[:, :, lo:hi], phi_k[:, :, lo:hi], log_scale[:, :, lo:hi]
            values = values_all[:, :, lo:hi]
            den_c = den[:, :, lo:hi, None]
            grad_num = grad_out[:, :, lo:hi] / den_c
            grad_den_c = -(grad_num * out[:, :, lo:hi]).sum(dim=-1, keepdim=True)
            grad_num_den = torch.cat([grad_num, grad_den_c], dim=-1)  # (b, h, C, d_v + 1)
            grad_den[:, :, lo:hi] = grad_den_c[..., 0]
            # Inside the chunk: num_den = (P * gate) @ values with P = phi_q phi_k^T.
            grad_score = grad_num_den @ values.transpose(-1, -2)
            grad_p = grad_score * gates[c]
            grad_values = scores[c].transpose(-1, -2) @ grad_num_den
            # From the carried state: num_den += (phi_q S) * past.
            grad_qs = grad_num_den
            if scaled:
                grad_qs = grad_qs * torch.exp(tops[..., c, None] - running[:, :, lo:hi])[..., None]
            grad_phi_q[:, :, lo:hi] = grad_p @ phi_k_c + grad_qs @ states[c].transpose(-1, -2)
            # The state update S' = S * decay + phi_k^T (values * weights), with grad_state = dS'.
            grad_weighted = phi_k_c @ grad_state  # d loss / d (values * weights)
            if scaled:
                weights = torch.exp(lk - tops[..., c + 1, None])[..., None]
                weighted = values * weights
                grad_values = grad_values + grad_weighted * weights
                # d gate_ij / d lk_j = gate_ij and d weights_j / d lk_j = weights_j.
                grad_log_scale[:, :, lo:hi] = ((grad_score * scores[c]).sum(dim=-2)
                                               + (grad_weighted * weighted).sum(dim=-1))
            else:
                weighted = values
                grad_values = grad_values + grad_weighted
            grad_phi_k[:, :, lo:hi] = (grad_p.transpose(-1, -2) @ phi_q_c
                                       + weighted @ grad_state.transpose(-1, -2))
            grad_v[:, :, lo:hi] = grad_values[..., :-1]
            if scaled:
                grad_state = grad_state * torch.exp(tops[..., c] - tops[..., c + 1])[..., None, None]
            grad_state = grad_state + phi_q_c.transpose(-1, -2) @ grad_qs
        return (grad_phi_q, grad_phi_k, grad_v, grad_log_scale, grad_state, None, None,
                grad_den if ctx.eps_is_tensor else None, None, None)


def chunked_causal(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, query_log_scale: Tensor | None,
    key_log_scale: Tensor | None, mask: Tensor | None, eps: float, chunk_size: int,
    state: LinearAttentionState,
) -> tuple[Tensor, LinearAttentionState]:
    """Causal linear attention by chunks: exact quadratic attention inside each chunk of C tokens,
    plus the carried state (S, z) of all earlier chunks, starting from `state` (the state after
    the tokens before these). Memory is O(n C + (n / C) m d_v) for autograd, never a per-token
    m x d_v state.

    All chunks are computed at once on (b, h, n / C, C, ...) views of the full-length tensors;
    only the carried state is a scan over chunks. Views, not a split into chunks: the backward of
    a split concatenates the m-wide feature gradients, which costs more than the attention.
    S and z travel together as one (m, d_v + 1) matrix: z is S of a column of ones.

    phi_q, phi_k: (batch, heads, n, m); v: (batch, heads, n, d_v); log-scales (batch, heads, n)
    or None; mask: bool (batch, n) or None. Returns (out (batch, heads, n, d_v), the state after
    the n tokens).
    """
    length = phi_q.shape[2]
    size = min(chunk_size, length)
    pad = -length % size
    if pad:
        phi_q, phi_k, v, query_log_scale, key_log_scale, mask = _pad_to_chunks(
            phi_q, phi_k, v, query_log_scale, key_log_scale, mask, pad
        )
    if key_log_scale is None:
        # Log-scale 0 (the lowest for padded keys) and stabilisers 0: every weight is exactly
        # 1 or 0, the plain kernel.
        log_scale = masked_log_scale(v.new_zeros(v.shape[:-1]), mask)
        running, top = torch.zeros_like(log_scale), None
        tops = v.new_zeros(*v.shape[:2], v.shape[2] // size + 1)
    else:
        log_scale = masked_log_scale(key_log_scale, mask)
        chunks = log_scale.detach().unflatten(2, (-1, size))  # (b, h, K, C)
        # tops[..., c]: the stabiliser of the state before chunk c (the last: after all chunks).
        tops = torch.cat([state.top[..., None], chunks.amax(dim=-1)], dim=-1)
        tops = torch.cummax(tops, dim=-1).values
        # Running maximum over keys <= i: the stabiliser of query i sees no later key.
        running = torch.maximum(torch.cummax(chunks, dim=-1).values, tops[..., :-1, None])
        running = top = running.flatten(2)
    eps_t = eps_term(eps, query_log_scale, top, v)
    start = torch.cat([state.kv, state.z[..., None]], dim=-1)
    out, final = _ChunkedCausal.apply(phi_q, phi_k, v, log_scale, start, running, tops,
                                      eps_t, size, key_log_scale is not None or mask is not None)
    top = state.top if key_log_scale is None else tops[..., -1]
    state = LinearAttentionState(final[..., :-1], final[..., -1], top, state.position + length,
                                 state.feature_map)
    return out[:, :, :length], state
