"""The Gated Linear Attention layer (Yang et al. 2024, "Gated Linear Attention Transformers with
Hardware-Efficient Training"), whole, with the defaults of flash-linear-attention 0.6.0's
fla.layers.GatedLinearAttention; and the layer shape it shares with RetNet's multi-scale
retention (retnet.py): q, k, v and output-gate projections around a gated recurrence, a
per-head RMSNorm times swish of the gate, an output projection."""

from __future__ import annotations

import math

from torch import Tensor, nn

from linarena.attention.layers.base import AttentionLayer, LayerCall
from linarena.attention.layers.norm import GatedRMSNorm
from linarena.attention.recurrent.core import linear, per_head
from linarena.attention.recurrent.lean import log_sigmoid_gate
from linarena.attention.rotation import Rotation, rotate_from


def expanded_width(d_model: int, expand: float, num_heads: int, what: str, name: str) -> int:
    """round(d_model * expand), refused unless it is an integer multiple of num_heads."""
    width = round(d_model * expand)
    if width < num_heads or not math.isclose(width, d_model * expand) or width % num_heads:
        raise ValueError(f"{name}: {what} = d_model * expand ({d_model} * {expand}) must be an "
                         f"integer multiple of num_heads ({num_heads}).")
    return width


class GatedProjectionLayer(AttentionLayer):
    """x -> o_proj(GatedRMSNorm(recurrence(q, k, v, gates), g)): q, k = x W_q, x W_k (key_dim
    = d_model * expand_k), v, g = x W_v, x W_g (value_dim = d_model * expand_v), split into
    num_heads heads; S_t = diag(exp(log_gate_t)) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t /
    sqrt(head_k_dim) per head (bidirectional: plus the same recurrence run backwards,
    linarena.attention.engine.gated_linear_attention). A subclass gives the log gates and may
    rotate q and k (`rotate`).

    Dtypes as RecurrentAttention: the q, k, v, g and output projections run in the caller's
    dtype and autocast (where the block's projections run); the gates, rotation, recurrence and
    norm in float32 (float64 for float64 inputs) with autocast off; the output is cast to x's
    dtype. Padded tokens (mask False) are zeroed before the projections and the recurrence skips
    them. The state (LayerState.tensors["recurrent"]) is (batch, heads, head_k_dim, head_v_dim).
    """

    fla_kernel = True

    def __init__(self, d_model: int, num_heads: int, causal: bool, backend: str,
                 rotary: Rotation | None, expand_k: float, expand_v: float,
                 norm_eps: float) -> None:
        super().__init__(d_model, num_heads, causal, backend, rotary)
        name = type(self).__name__
        self.key_dim = expanded_width(d_model, expand_k, num_heads, "key_dim", name)
        self.value_dim = expanded_width(d_model, expand_v, num_heads, "value_dim", name)
        self.head_k_dim = self.key_dim // num_heads
        self.head_v_dim = self.value_dim // num_heads
        self.q_proj = nn.Linear(d_model, self.key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, self.key_dim, bias=False)
        self.v_proj = nn.Linear(d_model, self.value_dim, bias=False)
        self.g_proj = nn.Linear(d_model, self.value_dim, bias=False)
        self.o_proj = nn.Linear(self.value_dim, d_model, bias=False)
        self.g_norm = GatedRMSNorm(self.head_v_dim, norm_eps)

    def log_gate(self, x: Tensor) -> Tensor:
        """x (batch, n, d_model), in the compute dtype -> log gates <= 0, (batch, heads, n) or
        (batch, heads, n, head_k_dim)."""
        raise NotImplementedError

    def rotate(self, q: Tensor, k: Tensor, start: int) -> tuple[Tensor, Tensor]:
        """q, k (batch, heads, n, head_k_dim) of positions start .. start + n - 1, as the
        recurrence sees them: rotated by the model's rotary if it has one."""
        return rotate_from(self.rotary, q, k, start)

    def project(self, x: Tensor, call: LayerCall) -> dict:
        q, k, v, gate = (call.linear(x, proj).to(call.dtype) for proj in (
            self.q_proj, self.k_proj, self.v_proj, self.g_proj))
        q, k = self.rotate(per_head(q, self.num_heads), per_head(k, self.num_heads),
                           call.position)
        return {"q": q, "k": k, "v": per_head(v, self.num_heads),
                "log_gate": self.log_gate(x.to(call.dtype)), "gate": gate}

    def output(self, o: Tensor, parts: dict, call: LayerCall) -> Tensor:
        gate = parts["gate"].unflatten(-1, (self.num_heads, self.head_v_dim))
        return call.linear(self.g_norm(o.transpose(1, 2), gate).flatten(2), self.o_proj)

    def state_shapes(self, batch: int) -> dict[str, dict[str, int]]:
        return {"recurrent": {"batch": batch, "heads": self.num_heads, "k_dim": self.head_k_dim,
                              "v_dim": self.head_v_dim}}

    def made_by(self) -> str:
        return (f"{type(self).__name__}(d_model={self.d_model}, num_heads={self.num_heads}, "
                f"key_dim={self.key_dim}, value_dim={self.value_dim})")


class GLALayer(GatedProjectionLayer):
    """The GLA layer: a decay per head, token and key feature from the token,
    log alpha_t = logsigmoid(x_t W_1 W_2 + b) / gate_normaliser (W_1: d_model x gate_rank, low
    rank), S_t = diag(alpha_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t / sqrt(head_k_dim),
    out = W_o (RMSNorm(o_t) * swish(x_t W_g)) (GatedProjectionLayer).

    Defaults of the paper and fla.layers.GatedLinearAttention: expand_k 0.5, expand_v 1, gate
    rank 16, normaliser 16, norm eps 1e-5, no feature map, no clamp of the log gates, no short
    convolution (fla's optional use_short_conv, feature_map, clamp_min and num_kv_heads are not
    offered here; model.short_conv adds a convolution before the layer).

    Parameters, with the defaults: 4 d_model^2 (q, k: d_model x key_dim; v, g, o: d_model x
    value_dim) + gate_rank (d_model + key_dim) + key_dim (the gate) + head_v_dim (the norm). At
    d_model 128, 4 heads: 68,704, against 69,792 for the block it replaces (4 d_model^2 =
    65,536 projections + GLAAttention's 4,256 for its gates and norm).
    State: heads x (d_model / 2 / heads) x (d_model / heads) = d_model^2 / (2 heads) numbers.

    Bidirectional (causal=False): the same gated recurrence run both ways (no kernel change).
    rotary (model.positions=rope) rotates q and k before the recurrence, as in GLAAttention.

    Args:
        d_model, num_heads, causal, backend, rotary: see AttentionLayer.
        expand_k, expand_v: key_dim = d_model * expand_k, value_dim = d_model * expand_v.
        gate_rank: the low rank of the gate projection.
        gate_normaliser: divides logsigmoid of the gate logits, so gates start near 1.
        norm_eps: eps of the per-head RMSNorm.
    """

    def __init__(self, d_model: int, num_heads: int, causal: bool = False,
                 backend: str = "auto", rotary: Rotation | None = None, *,
                 expand_k: float = 0.5, expand_v: float = 1.0, gate_rank: int = 16,
                 gate_normaliser: float = 16.0, norm_eps: float = 1e-5) -> None:
        super().__init__(d_model, num_heads, causal, backend, rotary, expand_k, expand_v,
                         norm_eps)
        if gate_rank < 1 or gate_normaliser <= 0:
            raise ValueError(f"GLALayer: gate_rank must be >= 1 and gate_normaliser > 0, got "
                             f"{gate_rank} and {gate_normaliser}.")
        self.gate_normaliser = gate_normaliser
        self.gate_down = nn.Linear(d_model, gate_rank, bias=False)
        self.gate_up = nn.Linear(gate_rank, self.key_dim)

    def log_gate(self, x: Tensor) -> Tensor:
        logits = linear(linear(x, self.gate_down), self.gate_up)
        return per_head(log_sigmoid_gate(logits, self.gate_normaliser), self.num_heads)
