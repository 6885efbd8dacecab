"""One token of causal linear attention, the recurrent form (notation in common.py)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from linarena.attention.feature_map import FeatureMap
from linarena.attention.kernels.common import LinearAttentionState, bind_context


def recurrent_step(
    q: Tensor, k: Tensor, v: Tensor, state: LinearAttentionState | None,
    feature_map: FeatureMap, context: Any, eps: float,
) -> tuple[Tensor, LinearAttentionState]:
    """One token of causal linear attention (the RNN view): O(1) work per token.

    q, k: (batch, heads, d); v: (batch, heads, d_v); state None before the first token.
    Returns the output (batch, heads, d_v) and the state after this token.
    """
    features = bind_context(feature_map, context)
    position = torch.tensor([0 if state is None else state.position], device=q.device)
    phi_q, _ = features(q[:, :, None], position, True)
    phi_k, log_scale = features(k[:, :, None], position, False)
    if state is None:
        state = LinearAttentionState.zeros(q, phi_q.shape[-1], v.shape[-1])
    state = state.absorb(phi_k, log_scale, v[:, :, None])
    num = phi_q @ state.kv  # (b, h, 1, d_v)
    den = phi_q @ state.z.unsqueeze(-1)
    return (num / (den + eps))[:, :, 0], state
