"""One token of causal gated linear attention, the recurrent form: O(1) small ops per token."""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor

from linarena.attention.engine.recurrence import OpInputs, run_step


def _update(token: OpInputs, state: Tensor, gated: bool) -> Tensor:
    """S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T for state (batch, heads, k_dim, v_dim)."""
    if gated:  # log_gate (batch, heads, 1, 1 or k_dim): one decay per row of S
        state = torch.exp(token.log_gate).transpose(-1, -2) * state
    return state + token.k.transpose(-1, -2) @ token.v


def gated_linear_attention_step(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor | None = None, *,
    scale: float | None = None, mask: Tensor | None = None, initial_state: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """gated_linear_attention(..., causal=True, return_state=True) on one token, in closed form:
    S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = scale * S_t^T q_t.

    q, k: (batch, heads, 1, k_dim); v: (batch, heads, 1, v_dim); log_gate: None (no decay),
    (batch, heads, 1) (one gate per head) or (batch, heads, 1, k_dim) (one per key feature);
    scale: defaults to k_dim ** -0.5; mask: bool (batch, 1), False for a padded token, which
    leaves the state as it was and outputs 0; initial_state: S_{t-1} (batch, heads, k_dim,
    v_dim), zeros if None. Checks, padding and dtypes as the op's: float64 inputs are computed
    in float64, anything else in float32 with autocast off. Returns out (batch, heads, 1, v_dim)
    in v's dtype and S_t (batch, heads, k_dim, v_dim) in the compute dtype.
    """
    return run_step("gated_linear_attention_step", partial(_update, gated=log_gate is not None),
                    q, k, v, log_gate, None, per_feature_gate=True, scale=scale, mask=mask,
                    initial_state=initial_state)
