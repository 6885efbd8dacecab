"""Mamba-2's state space duality (SSD, Dao and Gu 2024) as an attention core: one gate per head
and token, dt = softplus(x w + dt_bias), log gate = dt * A."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from linarena.attention.recurrent.core import Recurrence, RecurrentAttention, head_projection
from linarena.attention.rotation import Rotation


class HeadGate(nn.Module):
    """Mamba-2's per-head gate: dt = softplus(x w + dt_bias), A = -exp(A_log), log gate dt * A.

    Initialised as in Mamba-2: dt_bias the inverse softplus of dt drawn log-uniformly in
    [dt_min, dt_max], A drawn uniformly in [1, 16].
    """

    def __init__(self, d_model: int, num_heads: int, dt_min: float = 1e-3,
                 dt_max: float = 0.1) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.dt_proj = nn.Linear(d_model, num_heads, bias=False)
        dt = torch.exp(torch.empty(num_heads).uniform_(math.log(dt_min), math.log(dt_max)))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.empty(num_heads).uniform_(1.0, 16.0)))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x: (batch, n, d_model) -> dt and the log gate dt * A, each (batch, heads, n)."""
        dt = F.softplus(head_projection(x, self.dt_proj) + self.dt_bias.to(x.dtype)[:, None])
        return dt, -torch.exp(self.A_log.to(x.dtype))[:, None] * dt


class Mamba2Attention(RecurrentAttention):
    """S_t = exp(dt_t A) S_{t-1} + k_t (dt_t v_t)^T, o_t = RMSNorm(S_t^T q_t): SSD with C = q,
    B = k and x = v (the block's projections), no scale on C . B (as in SSD).

    Not here, from the Mamba-2 block: the D skip (D x), the silu(z) output gate, the causal
    conv on x, B and C (model.short_conv adds a conv before the block's projections), and the
    input expansion (here v_dim = head_dim).

    Args:
        head_dim, causal: as every attention core.
        d_model, num_heads: the model's width (of x) and heads (model.d_model, model.num_heads).
        output_norm: "rms" (Mamba-2's norm before the output projection), or another
            linarena.attention.recurrent.output_norm kind.
        backend, rotary: see RecurrentAttention.
    """

    def __init__(self, head_dim: int, causal: bool = False, *, d_model: int, num_heads: int,
                 output_norm: str = "rms", backend: str = "auto",
                 rotary: Rotation | None = None) -> None:
        super().__init__(head_dim, causal, output_norm, num_heads, backend, rotary, d_model)
        self.gate = HeadGate(d_model, num_heads)

    def recurrence(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor | None) -> Recurrence:
        dt, log_gate = self.gate(x)
        return Recurrence(q, k, v * dt[..., None], log_gate, None, 1.0)
