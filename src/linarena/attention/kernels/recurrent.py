"""One token of causal linear attention, the recurrent form (notation in common.py)."""

from __future__ import annotations

from torch import Tensor

from linarena.attention.kernels.common import LinearAttentionState, eps_term, normalised


def recurrent_step(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, query_log_scale: Tensor | None,
    key_log_scale: Tensor | None, state: LinearAttentionState, eps: float,
) -> tuple[Tensor, LinearAttentionState]:
    """One token of causal linear attention (the RNN view): O(1) work per token.

    phi_q, phi_k: (batch, heads, 1, m); v: (batch, heads, 1, d_v); log-scales (batch, heads, 1)
    or None. Returns the output (batch, heads, 1, d_v) and the state after this token.
    """
    state = state.absorb(phi_k, key_log_scale, v)
    num = phi_q @ state.kv  # (b, h, 1, d_v)
    den = phi_q @ state.z.unsqueeze(-1)
    top = None if key_log_scale is None else state.top[..., None]
    return normalised(num, den, eps_term(eps, query_log_scale, top, v)), state
