"""One token of causal linear attention, the recurrent form (notation in common.py)."""

from __future__ import annotations

from torch import Tensor

from linarena.attention.engine.linear.common import LinearAttentionState, eps_term, normalised
from linarena.attention.features import ChunkFeatures


def recurrent_step(
    q: Tensor, k: Tensor, v: Tensor, features: ChunkFeatures, state: LinearAttentionState,
    eps: float,
) -> tuple[Tensor, LinearAttentionState]:
    """One token of causal linear attention (the RNN view): O(1) work per token.

    q, k: (batch, heads, 1, head_dim); v: (batch, heads, 1, d_v); features: the map at this
    token's position (differentiated by autograd: one token has nothing to recompute). Returns
    the output (batch, heads, 1, d_v) and the state after this token.
    """
    phi_q, query_log_scale = features(q, 0, 1, True)
    phi_k, key_log_scale = features(k, 0, 1, False)
    state = state.absorb(phi_k, key_log_scale, v)
    num = phi_q @ state.kv  # (b, h, 1, d_v)
    den = phi_q @ state.z.unsqueeze(-1)
    top = None if key_log_scale is None else state.top[..., None]
    return normalised(num, den, eps_term(eps, query_log_scale, top, v)), state
