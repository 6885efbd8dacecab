"""The delta rule's float64 reference, a plain token loop (shares no code with the op):

    S_t = exp(g_t) S_{t-1},  S_t += k_t (beta_t (v_t - S_t^T k_t))^T,  o_t = scale * S_t^T q_t.

Shapes as delta_rule's: q, k (batch, heads, n, k_dim); v (batch, heads, n, v_dim); beta
(batch, heads, n); log_gate None or (batch, heads, n). The loop is gated/naive.py's recurrence,
whose update is the delta rule when it is given a beta.
"""

from __future__ import annotations

from torch import Tensor

from linarena.attention.engine.gated.naive import recurrence


def naive_delta_rule(q, k, v, beta, log_gate=None, *, causal: bool, scale: float | None = None,
                     initial_state: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(out, final causal state) in float64; bidirectional as gated/naive.py's recurrence."""
    return recurrence(q, k, v, log_gate, beta, causal=causal, scale=scale,
                      initial_state=initial_state)


__all__ = ["naive_delta_rule", "recurrence"]
