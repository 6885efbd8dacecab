"""DeltaNet (Yang et al. 2024): the state is rewritten by the delta rule, beta from the token."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from linarena.attention.recurrent.core import Recurrence, RecurrentAttention, head_projection
from linarena.attention.recurrent.lean import silu_l2_normalise
from linarena.attention.recurrent.output_norm import EPS
from linarena.attention.rotation import Rotation


class DeltaNetAttention(RecurrentAttention):
    """S_t = S_{t-1} + k_t (beta_t (v_t - S_{t-1}^T k_t))^T with q, k = L2norm(silu(.)) and
    beta_t = sigmoid(x_t w_beta) per head; o_t = RMSNorm(S_t^T q_t / sqrt(head_dim)).

    Not here, from the DeltaNet layer: its short conv on q, k and v (model.short_conv adds one
    before the block's projections) and the output gate.

    Args:
        head_dim, causal: as every attention core.
        d_model, num_heads: the model's width (of x) and heads (model.d_model, model.num_heads).
        output_norm: "rms" (DeltaNet), "group" or "none" ("denominator" is not defined for the
            delta rule).
        backend, rotary: see RecurrentAttention.
    """

    delta_rule = True

    def __init__(self, head_dim: int, causal: bool = False, *, d_model: int, num_heads: int,
                 output_norm: str = "rms", backend: str = "auto",
                 rotary: Rotation | None = None) -> None:
        super().__init__(head_dim, causal, output_norm, num_heads, backend, rotary, d_model)
        self.beta_proj = nn.Linear(d_model, num_heads, bias=False)

    def log_gate(self, x: Tensor) -> Tensor | None:
        """The decay of the state before each update: none in DeltaNet."""
        return None

    def recurrence(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor | None) -> Recurrence:
        # silu, then x / sqrt(|x|^2 + eps) (eps inside the root, as fla's l2norm)
        q, k = silu_l2_normalise(q, EPS), silu_l2_normalise(k, EPS)
        beta = torch.sigmoid(head_projection(x, self.beta_proj))
        return Recurrence(q, k, v, self.log_gate(x), beta, None)
