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


def _values(v: Tensor) -> Tensor:
    """[v, 1]: (batch, heads, c, d_v + 1), so that one matmul gives numerator and denominator."""
    return torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)


def _chunks(length: int, size: int) -> list[tuple[int, int, int]]:
    """(start, end, width) of each chunk of `size` tokens, the last one possibly shorter."""
    return [(lo, min(lo + size, length), min(size, length - lo)) for lo in range(0, length, size)]


class _ChunkedCausal(torch.autograd.Function):
    """See chunked_causal(). The backward is the forward's scan run in reverse, with the
    gradient of the carried state carried backwards; each chunk's gradients are written into
    one full-length buffer, where autograd would keep every chunk's and concatenate them.

    Inputs: phi_q, phi_k (b, h, n, m); v (b, h, n, d_v); log_scale (b, h, n), the keys'
    log-scales with padded keys at the lowest float (0 for a map without log-scales); start
    (b, h, m, d_v + 1), the incoming [S | z]; running (b, h, n), each query's stabiliser; tops
    (b, h, K + 1), the state's stabiliser before each chunk and after the last; eps_t, eps_term's
    value for each query; size, the chunk size C; weighted, whether keys carry weights
    (log-scales or padding): without, every weight and stabiliser factor is exactly 1 and its
    multiplication is skipped. Returns out (b, h, n, d_v) and the outgoing [S | z].
    """

    @staticmethod
    def forward(ctx, phi_q, phi_k, v, log_scale, start, running, tops, eps_t, size, weighted):
        batch, heads, length, _ = phi_q.shape
        later = torch.ones(size, size, dtype=torch.bool, device=v.device).triu(1)
        values_all = _values(v)
        out = v.new_empty(batch, heads, length, v.shape[-1])
        den = v.new_empty(batch, heads, length)
        # Row i of chunk c's (C, C) gate and score matrices is row lo + i here.
        gates, scores = (v.new_empty(batch, heads, length, size) for _ in range(2))
        states = []
        state = start
        for c, (lo, hi, width) in enumerate(_chunks(length, size)):
            phi_q_c, phi_k_c, lk, run = (x[:, :, lo:hi] for x in (phi_q, phi_k, log_scale, running))
            values = values_all[:, :, lo:hi]
            gap = lk[..., None, :] - run[..., :, None]
            gap = gap.masked_fill(later[:width, :width], -torch.inf)
            gate = torch.exp(gap)
            score = (phi_q_c @ phi_k_c.transpose(-1, -2)) * gate
            gates[:, :, lo:hi, :width], scores[:, :, lo:hi, :width] = gate, score
            from_state = phi_q_c @ state
            if weighted:
                from_state = from_state * torch.exp(tops[..., c, None] - run)[..., None]
            num_den = score @ values + from_state
            den_c = num_den[..., -1] + (eps_t[:, :, lo:hi] if isinstance(eps_t, Tensor) else eps_t)
            den_c = torch.where(den_c == 0, 1.0, den_c)  # every term 0: num too, the output 0
            out[:, :, lo:hi] = num_den[..., :-1] / den_c[..., None]
            den[:, :, lo:hi] = den_c
            states.append(state)
            if weighted:
                weights = torch.exp(lk - tops[..., c + 1, None])  # relative to the chunk's end
                values = values * weights[..., None]
                state = state * torch.exp(tops[..., c] - tops[..., c + 1])[..., None, None]
            state = state + phi_k_c.transpose(-1, -2) @ values
        ctx.save_for_backward(phi_q, phi_k, values_all, log_scale, running, tops, den, out,
                              torch.stack(states), gates, scores)
        ctx.size, ctx.eps_is_tensor, ctx.weighted = size, isinstance(eps_t, Tensor), weighted
        return out, state

    @staticmethod
    def backward(ctx, grad_out, grad_state):
        phi_q, phi_k, values_all, log_scale, running, tops, den, out, states, gates, scores = (
            ctx.saved_tensors)
        weighted = ctx.weighted
        grad_phi_q, grad_phi_k, grad_v = (torch.empty_like(x) for x in (phi_q, phi_k, out))
        grad_log_scale = torch.empty_like(log_scale) if weighted else None
        grad_den = den.new_empty(den.shape)
        for c, (lo, hi, width) in reversed(list(enumerate(_chunks(phi_q.shape[2], ctx.size)))):
            gate, score = gates[:, :, lo:hi, :width], scores[:, :, lo:hi, :width]
            phi_q_c, phi_k_c, lk = phi_q[:, :, lo:hi], phi_k[:, :, lo:hi], log_scale[:, :, lo:hi]
            values = values_all[:, :, lo:hi]
            den_c = den[:, :, lo:hi, None]
            grad_num = grad_out[:, :, lo:hi] / den_c
            grad_den_c = -(grad_num * out[:, :, lo:hi]).sum(dim=-1, keepdim=True)
            grad_num_den = torch.cat([grad_num, grad_den_c], dim=-1)  # (b, h, C, d_v + 1)
            grad_den[:, :, lo:hi] = grad_den_c[..., 0]
            # Inside the chunk: num_den = (P * gate) @ values with P = phi_q phi_k^T.
            grad_score = grad_num_den @ values.transpose(-1, -2)
            grad_p = grad_score * gate
            grad_values = score.transpose(-1, -2) @ grad_num_den
            # From the carried state: num_den += (phi_q S) * past.
            grad_qs = grad_num_den
            if weighted:
                grad_qs = grad_qs * torch.exp(tops[..., c, None] - running[:, :, lo:hi])[..., None]
            grad_phi_q[:, :, lo:hi] = grad_p @ phi_k_c + grad_qs @ states[c].transpose(-1, -2)
            # The state update S' = S * decay + phi_k^T (values * weights), with grad_state = dS'.
            grad_key_values = phi_k_c @ grad_state  # d loss / d (values * weights)
            if weighted:
                weights = torch.exp(lk - tops[..., c + 1, None])[..., None]
                key_values = values * weights
                grad_values = grad_values + grad_key_values * weights
                # d gate_ij / d lk_j = gate_ij and d weights_j / d lk_j = weights_j.
                grad_log_scale[:, :, lo:hi] = ((grad_score * score).sum(dim=-2)
                                               + (grad_key_values * key_values).sum(dim=-1))
            else:
                key_values = values
                grad_values = grad_values + grad_key_values
            grad_phi_k[:, :, lo:hi] = (grad_p.transpose(-1, -2) @ phi_q_c
                                       + key_values @ grad_state.transpose(-1, -2))
            grad_v[:, :, lo:hi] = grad_values[..., :-1]
            if weighted:
                decay = torch.exp(tops[..., c] - tops[..., c + 1])
                grad_state = grad_state * decay[..., None, None]
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

    S and z travel together as one (m, d_v + 1) matrix: z is S of a column of ones. The
    stabilisers (the running maxima of the key log-scales) are computed for all chunks first, on
    (batch, heads, n) tensors; then one scan over the chunks, with a hand-written backward.

    phi_q, phi_k: (batch, heads, n, m); v: (batch, heads, n, d_v); log-scales (batch, heads, n)
    or None; mask: bool (batch, n) or None. Returns (out (batch, heads, n, d_v), the state after
    the n tokens).
    """
    length = phi_q.shape[2]
    size = min(chunk_size, length)
    count = -(-length // size)
    if key_log_scale is None:
        # Log-scale 0 (the lowest for padded keys) and stabilisers 0: every weight is exactly
        # 1 or 0, the plain kernel.
        log_scale = masked_log_scale(v.new_zeros(v.shape[:-1]), mask)
        running, top = torch.zeros_like(log_scale), None
        tops = v.new_zeros(*v.shape[:2], count + 1)
    else:
        log_scale = masked_log_scale(key_log_scale, mask)
        # (b, h, K, C): the last chunk filled up with keys that never win a maximum.
        chunks = F.pad(log_scale.detach(), (0, count * size - length), value=lowest(v.dtype))
        chunks = chunks.unflatten(2, (count, size))
        # tops[..., c]: the stabiliser of the state before chunk c (the last: after all chunks).
        tops = torch.cat([state.top[..., None], chunks.amax(dim=-1)], dim=-1)
        tops = torch.cummax(tops, dim=-1).values
        # Running maximum over keys <= i: the stabiliser of query i sees no later key.
        running = torch.maximum(torch.cummax(chunks, dim=-1).values, tops[..., :-1, None])
        running = top = running.flatten(2)[..., :length]
    eps_t = eps_term(eps, query_log_scale, top, v)
    start = torch.cat([state.kv, state.z[..., None]], dim=-1)
    weighted = key_log_scale is not None or mask is not None
    out, final = _ChunkedCausal.apply(phi_q, phi_k, v, log_scale, start, running, tops, eps_t,
                                      size, weighted)
    top = state.top if key_log_scale is None else tops[..., -1]
    state = LinearAttentionState(final[..., :-1], final[..., -1], top, state.position + length,
                                 state.feature_map)
    return out, state
