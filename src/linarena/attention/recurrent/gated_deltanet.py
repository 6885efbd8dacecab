"""Gated DeltaNet (Yang, Kautz and Hatamizadeh 2025): Mamba-2's per-head gate, then the delta
rule."""

from __future__ import annotations

from torch import Tensor

from linarena.attention.recurrent.deltanet import DeltaNetAttention
from linarena.attention.recurrent.mamba2 import HeadGate
from linarena.attention.rotation import Rotation


class GatedDeltaNetAttention(DeltaNetAttention):
    """S_t = alpha_t S_{t-1}, then the delta update of DeltaNet with beta_t;
    alpha_t = exp(dt_t A) per head as in Mamba-2 (HeadGate), beta_t = sigmoid(x_t w_beta);
    q, k = L2norm(silu(.)); o_t = RMSNorm(S_t^T q_t / sqrt(head_dim)).

    Not here, from the Gated DeltaNet layer: the short conv on q, k and v (model.short_conv)
    and the silu output gate.

    Args: as DeltaNetAttention.
    """

    def __init__(self, head_dim: int, causal: bool = False, *, d_model: int, num_heads: int,
                 output_norm: str = "rms", backend: str = "auto",
                 rotary: Rotation | None = None) -> None:
        super().__init__(head_dim, causal, d_model=d_model, num_heads=num_heads,
                         output_norm=output_norm, backend=backend, rotary=rotary)
        self.gate = HeadGate(d_model, num_heads)

    def log_gate(self, x: Tensor) -> Tensor:
        return self.gate(x)[1]
