"""The Gated DeltaNet layer (Yang, Kautz, Hatamizadeh 2025, "Gated Delta Networks: Improving
Mamba2 with Delta Rule"), whole, with the defaults of flash-linear-attention 0.6.0's
fla.layers.GatedDeltaNet: DeltaNet's layer (linarena.attention.layers.deltanet) with Mamba-2's
per-head decay gate before each delta update, values twice as wide and an output gate."""

from __future__ import annotations

import torch
from torch import Tensor

from linarena.attention.layers.deltanet import DeltaNetLayer
from linarena.attention.recurrent.mamba2 import HeadGate
from linarena.attention.rotation import Rotation


class GatedDeltaNetLayer(DeltaNetLayer):
    """x (batch, n, d_model) -> (batch, n, d_model), DeltaNetLayer's computation with

        S_t = alpha_t S_{t-1} + k_t (beta_t (v_t - alpha_t S_{t-1}^T k_t))^T,
        alpha_t = exp(-exp(A_log) softplus(x_t W_a + dt_bias)) per head (Mamba-2's gate),
        y = (RMSNorm(o) * silu(x W_g)) W_o (use_gate, the default).

    Defaults as fla.layers.GatedDeltaNet (0.6.0): expand_v = 2 (head_v_dim = 2 head_dim),
    short convs of 4 taps with silu on q, k, v, q and k L2-normalised, beta = sigmoid(x W_b),
    use_gate=True (the gated RMSNorm, eps 1e-5), A ~ U(0, 16) and dt_bias = softplus^-1(dt),
    dt log-uniform in [1e-3, 0.1], no biases. The paper's head_dim 256 (6 heads at d_model
    2048, so num_heads * head_dim = 0.75 d_model) cannot fit d_model 16-256: here head_dim
    defaults to d_model / num_heads (key width d_model, value width 2 d_model); set head_dim
    for another width (e.g. 0.75 d_model / num_heads for the paper's proportions). Bidirectional,
    padding, dtypes, backend, rotary and the state as DeltaNetLayer.

    Parameters at d_model=128, num_heads=4 (head_dim 32, head_v_dim 64): q/k 2 * 128^2 =
    32,768, v/g/o 3 * 128 * 256 = 98,304, a/b projections 1,024, A_log and dt_bias 8, convs
    (128 + 128 + 256) * 4 = 2,048, norm 64: 134,216; the block it replaces
    (attention=gated_deltanet: q/k/v/out projections plus GatedDeltaNetAttention's beta, gate
    and norm) has 65,536 + 1,064 = 66,600.

    Args:
        d_model, num_heads, causal, backend, rotary: see AttentionLayer.
        head_dim: q and k features per head (None: d_model // num_heads).
        expand_v: head_v_dim / head_dim.
        use_gate, conv_size, norm_eps: see DeltaNetLayer (use_gate defaults to True here).
    """

    def __init__(self, d_model: int, num_heads: int, causal: bool, backend: str = "auto",
                 rotary: Rotation | None = None, *, head_dim: int | None = None,
                 expand_v: float = 2.0, use_gate: bool = True, conv_size: int = 4,
                 norm_eps: float = 1e-5) -> None:
        super().__init__(d_model, num_heads, causal, backend, rotary, use_gate=use_gate,
                         conv_size=conv_size, norm_eps=norm_eps, head_k_dim=head_dim,
                         expand_v=expand_v)
        self.gate = HeadGate(d_model, num_heads)
        with torch.no_grad():  # fla and the paper's code draw A from U(0, 16), HeadGate U(1, 16)
            self.gate.A_log.copy_(torch.empty(num_heads).uniform_(0.0, 16.0).log())

    def log_gate(self, x: Tensor) -> Tensor:
        """log alpha (batch, heads, n) from x (batch, n, d_model)."""
        return self.gate(x)[1]
