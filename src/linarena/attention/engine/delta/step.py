"""One token of the causal (gated) delta rule, the recurrent form: O(1) small ops per token."""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor

from linarena.attention.engine.recurrence import OpInputs, run_step


def _update(token: OpInputs, state: Tensor, gated: bool) -> Tensor:
    """S = exp(g_t) S_{t-1}; u_t = beta_t (v_t - S^T k_t); S_t = S + k_t u_t^T for state
    (batch, heads, k_dim, v_dim)."""
    if gated:  # log_gate (batch, heads, 1, 1): one decay per head
        state = torch.exp(token.log_gate) * state
    update = token.beta[..., None] * (token.v - token.k @ state)  # (batch, heads, 1, v_dim)
    return state + token.k.transpose(-1, -2) @ update


def delta_rule_step(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_gate: Tensor | None = None, *,
    scale: float | None = None, mask: Tensor | None = None, initial_state: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """delta_rule(..., causal=True, return_state=True) on one token, in closed form:
    S = exp(g_t) S_{t-1}; u_t = beta_t (v_t - S^T k_t); S_t = S + k_t u_t^T;
    o_t = scale * S_t^T q_t.

    q, k: (batch, heads, 1, k_dim); v: (batch, heads, 1, v_dim); beta: (batch, heads, 1) in
    [0, 1]; log_gate: None (DeltaNet) or (batch, heads, 1) (Gated DeltaNet); scale: defaults to
    k_dim ** -0.5; mask: bool (batch, 1), False for a padded token, which leaves the state as it
    was and outputs 0; initial_state: S_{t-1} (batch, heads, k_dim, v_dim), zeros if None.
    Checks, padding and dtypes as the op's: float64 inputs are computed in float64, anything
    else in float32 with autocast off. Returns out (batch, heads, 1, v_dim) in v's dtype and S_t
    (batch, heads, k_dim, v_dim) in the compute dtype.
    """
    return run_step("delta_rule_step", partial(_update, gated=log_gate is not None),
                    q, k, v, log_gate, beta, per_feature_gate=False, scale=scale, mask=mask,
                    initial_state=initial_state)
