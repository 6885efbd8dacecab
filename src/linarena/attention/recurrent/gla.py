"""Gated linear attention (GLA, Yang et al. 2024): a decay per key feature from the token."""

from __future__ import annotations

from torch import Tensor, nn

from linarena.attention.recurrent.core import Recurrence, RecurrentAttention, linear, per_head
from linarena.attention.recurrent.lean import log_sigmoid_gate
from linarena.attention.rotation import Rotation


class GLAAttention(RecurrentAttention):
    """S_t = diag(alpha_t) S_{t-1} + k_t v_t^T with log alpha_t = logsigmoid(x_t W1 W2 + b) /
    gate_normaliser (W1: d_model x gate_rank, low rank), one gate per head and key feature;
    o_t = RMSNorm(S_t^T q_t / sqrt(head_dim)).

    Not here, from the GLA layer: the swish output gate, and k_dim = d_model / 2 (expand_k 0.5;
    here k_dim = v_dim = head_dim, as the block's projections give).

    Args:
        head_dim, causal: as every attention core.
        d_model, num_heads: the model's width (of x) and heads (model.d_model, model.num_heads).
        gate_rank: the low rank of the gate projection (16 in GLA).
        gate_normaliser: the temperature dividing the log gate (16 in GLA), so that gates start
            near 1 (slow forgetting).
        output_norm: "rms" (GLA), or another linarena.attention.recurrent.output_norm kind.
        backend, rotary: see RecurrentAttention.
    """

    def __init__(
        self, head_dim: int, causal: bool = False, *, d_model: int, num_heads: int,
        gate_rank: int = 16, gate_normaliser: float = 16.0, output_norm: str = "rms",
        backend: str = "auto", rotary: Rotation | None = None,
    ) -> None:
        super().__init__(head_dim, causal, output_norm, num_heads, backend, rotary, d_model)
        if gate_rank < 1 or gate_normaliser <= 0:
            raise ValueError(f"GLA: gate_rank must be >= 1 and gate_normaliser > 0, got "
                             f"{gate_rank} and {gate_normaliser}.")
        self.gate_normaliser = gate_normaliser
        self.gate_down = nn.Linear(d_model, gate_rank, bias=False)
        self.gate_up = nn.Linear(gate_rank, num_heads * head_dim)

    def recurrence(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor | None) -> Recurrence:
        logits = linear(linear(x, self.gate_down), self.gate_up)
        log_gate = log_sigmoid_gate(logits, self.gate_normaliser)
        return Recurrence(q, k, v, per_head(log_gate, self.num_heads), None, None)
