"""float64 references for gated linear attention (and, given a beta, the delta rule:
delta/naive.py), written from the papers' equations and sharing no code with the ops: no
chunks, no cumulative sums, no masks (padding is tested against the unpadded sequence).

Shapes: q, k (batch, heads, n, k_dim); v (batch, heads, n, v_dim); log_gate None,
(batch, heads, n) or (batch, heads, n, k_dim); beta (batch, heads, n).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _per_feature(log_gate: Tensor | None, q: Tensor) -> Tensor:
    """Log gates as (batch, heads, n, k_dim): zeros for None, a per-head gate repeated."""
    if log_gate is None:
        return torch.zeros_like(q)
    return log_gate.double()[..., None].expand_as(q) if log_gate.dim() == 3 else log_gate.double()


def decay_matrix(log_gate: Tensor | None, q: Tensor) -> Tensor:
    """D (batch, heads, n, n, k_dim): D_ij = exp(sum of g_l for min(i, j) < l <= max(i, j)),
    the sum taken literally with an (n, n, n) indicator."""
    g = _per_feature(log_gate, q)
    n = q.shape[2]
    i, j, step = torch.meshgrid(torch.arange(n), torch.arange(n), torch.arange(n), indexing="ij")
    between = ((torch.minimum(i, j) < step) & (step <= torch.maximum(i, j))).double()
    return torch.exp(torch.einsum("ijl,bhlk->bhijk", between, g))


def gla_quadratic(q, k, v, log_gate=None, *, causal: bool, scale: float | None = None) -> Tensor:
    """o_i = scale * sum_j (q_i * k_j * D_ij) . v_j over j <= i (causal) or all j."""
    q, k, v = q.double(), k.double(), v.double()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    weights = torch.einsum("bhik,bhjk,bhijk->bhij", q, k, decay_matrix(log_gate, q))
    if causal:
        n = q.shape[2]
        weights = weights * torch.ones(n, n, dtype=torch.float64).tril()
    return scale * weights @ v


def _absorb(state: Tensor, k_t: Tensor, v_t: Tensor, beta_t: Tensor | None) -> Tensor:
    """S += k_t u_t^T with u_t = v_t (additive) or beta_t (v_t - S^T k_t) (delta rule)."""
    if beta_t is None:
        u = v_t
    else:
        u = beta_t[..., None] * (v_t - torch.einsum("bhkv,bhk->bhv", state, k_t))
    return state + k_t[..., :, None] * u[..., None, :]


def recurrence(q, k, v, log_gate=None, beta=None, *, causal: bool, scale: float | None = None,
               initial_state: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Token by token: S_t = diag(exp(g_t)) S_{t-1}, then the additive update (beta None) or the
    delta update, o_t = scale * S_t^T q_t. Bidirectional: plus scale * B_i^T q_i, B_i the
    backward recurrence's state at i before absorbing token i (stepping back from l+1 to l
    decays by exp(g_{l+1})). Returns (out, final causal state)."""
    q, k, v = q.double(), k.double(), v.double()
    beta = None if beta is None else beta.double()
    g = _per_feature(log_gate, q)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    batch, heads, n, k_dim = q.shape
    zero = torch.zeros(batch, heads, k_dim, v.shape[-1], dtype=torch.float64)
    state = zero.clone() if initial_state is None else initial_state.double()
    out = torch.zeros(batch, heads, n, v.shape[-1], dtype=torch.float64)
    for t in range(n):
        state = torch.exp(g[:, :, t])[..., None] * state
        state = _absorb(state, k[:, :, t], v[:, :, t], None if beta is None else beta[:, :, t])
        out[:, :, t] = scale * torch.einsum("bhkv,bhk->bhv", state, q[:, :, t])
    final = state
    if not causal:
        back = zero.clone()
        for i in reversed(range(n)):
            if i < n - 1:
                back = torch.exp(g[:, :, i + 1])[..., None] * back
            out[:, :, i] += scale * torch.einsum("bhkv,bhk->bhv", back, q[:, :, i])
            back = _absorb(back, k[:, :, i], v[:, :, i], None if beta is None else beta[:, :, i])
    return out, final
