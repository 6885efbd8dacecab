"""The DeltaNet layer (Yang, Wang, Shen, Panda, Kim 2024, "Parallelizing Linear Transformers with
the Delta Rule over Sequence Length"), whole, with the defaults of flash-linear-attention
0.6.0's fla.layers.DeltaNet: its projections, short convolutions, output norm and projection
around the delta rule (linarena.attention.engine.delta_rule)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from linarena.attention.layers.base import AttentionLayer, LayerCall
from linarena.attention.layers.conv import CausalConv
from linarena.attention.layers.norm import GatedRMSNorm
from linarena.attention.recurrent.core import head_projection, linear, per_head
from linarena.attention.rotation import Rotation, rotate_from

CONVS = ("q", "k", "v")
L2_EPS = 1e-6  # fla's l2norm: x / sqrt(|x|^2 + eps)


def l2_normalise(x: Tensor) -> Tensor:
    """x / sqrt(|x|^2 + L2_EPS) over the last dimension, as fla's l2norm."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + L2_EPS)


class DeltaNetLayer(AttentionLayer):
    """x (batch, n, d_model) -> (batch, n, d_model):

        q, k, v = silu(conv_q(x W_q)), silu(conv_k(x W_k)), silu(conv_v(x W_v)) (per head),
        q, k <- q / ||q||, k / ||k||;  beta_t = sigmoid(x_t W_b) (one per head),
        S_t = S_{t-1} + k_t (beta_t (v_t - S_{t-1}^T k_t))^T,  o_t = S_t^T q_t / sqrt(head_k_dim),
        y = (RMSNorm(o) [* silu(x W_g) with use_gate]) W_o, RMSNorm per head (eps norm_eps).

    Defaults as fla.layers.DeltaNet (0.6.0): expand_k = expand_v = 1 (head_k_dim = head_v_dim =
    d_model / num_heads), short convs of 4 taps without bias, use_gate=False (then a plain
    RMSNorm), no biases. Bidirectional (causal=False, for LRA): the delta rule runs forwards
    and backwards (linarena.attention.engine.delta_rule), while the short convolutions stay causal,
    as published. Padded tokens are zeroed before the projections, so they reach no real output
    and no gradient; right padding is needed for return_state (the conv caches).

    Dtypes as the recurrent cores: float64 stays float64, anything else is computed in float32
    with autocast off and the output cast back. backend: "fla" (or "auto" on CUDA with fla
    installed, causal calls) hands q, k, v and beta to fla's kernels in the dtype autocast
    would have given the projections (their delta-rule kernels take bf16 / fp16 only), else the
    input's dtype. rotary: rotates the normalised q, k before the recurrence.

    State (causal): the recurrent state (batch, heads, head_k_dim, head_v_dim) and each conv's
    last conv_size - 1 inputs, (batch, channels, conv_size - 1).

    Parameters at d_model=128, num_heads=4: q/k/v/o 4 * 128^2 = 65,536, b_proj 512, convs
    3 * 128 * 4 = 1,536, norm 32: 67,616 (use_gate: + 16,384 = 84,000); the block it replaces
    (attention=deltanet: q/k/v/out projections plus DeltaNetAttention's beta_proj and norm)
    has 65,536 + 544 = 66,080.

    Args:
        d_model, num_heads, causal, backend, rotary: see AttentionLayer.
        use_gate: output gate silu(x W_g) on the normed output (fla: use_gate, default False).
        conv_size: taps of the short convolutions on q, k, v.
        norm_eps: epsilon of the output RMSNorm (fla's norm_eps).
        head_k_dim: q and k features per head (None: d_model // num_heads, fla's expand_k=1).
        expand_v: head_v_dim / head_k_dim (fla's expand_v / expand_k).
    """

    fla_kernel = True
    own_short_conv = True
    recurrence = "delta"

    def __init__(self, d_model: int, num_heads: int, causal: bool, backend: str = "auto",
                 rotary: Rotation | None = None, *, use_gate: bool = False, conv_size: int = 4,
                 norm_eps: float = 1e-5, head_k_dim: int | None = None,
                 expand_v: float = 1.0) -> None:
        super().__init__(d_model, num_heads, causal, backend, rotary)
        self.head_k_dim = head_k_dim or d_model // num_heads
        self.head_v_dim = int(self.head_k_dim * expand_v)
        if self.head_k_dim < 1 or self.head_v_dim != self.head_k_dim * expand_v:
            raise ValueError(f"{type(self).__name__}: head_k_dim ({self.head_k_dim}) must be "
                             f">= 1 and head_k_dim * expand_v ({expand_v}) an integer.")
        key_dim, value_dim = num_heads * self.head_k_dim, num_heads * self.head_v_dim
        self.use_gate = use_gate
        self.conv_size = conv_size
        self.q_proj = nn.Linear(d_model, key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, key_dim, bias=False)
        self.v_proj = nn.Linear(d_model, value_dim, bias=False)
        self.b_proj = nn.Linear(d_model, num_heads, bias=False)
        self.convs = nn.ModuleDict({name: CausalConv(width, conv_size) for name, width
                                    in zip(CONVS, (key_dim, key_dim, value_dim), strict=True)})
        self.g_proj = nn.Linear(d_model, value_dim, bias=False) if use_gate else None
        self.o_norm = GatedRMSNorm(self.head_v_dim, norm_eps)
        self.o_proj = nn.Linear(value_dim, d_model, bias=False)

    def log_gate(self, x: Tensor) -> Tensor | None:
        """The decay before each update, (batch, heads, n) log values: none in DeltaNet."""
        return None

    def project(self, x: Tensor, call: LayerCall) -> dict:
        h = x.to(call.dtype)
        q, k, v = (per_head(call.conv(f"conv_{name}", self.convs[name], linear(h, proj)),
                            self.num_heads)
                   for name, proj in zip(CONVS, (self.q_proj, self.k_proj, self.v_proj),
                                         strict=True))
        q, k = rotate_from(self.rotary, l2_normalise(q), l2_normalise(k), call.position)
        return {"q": q, "k": k, "v": v, "beta": torch.sigmoid(head_projection(h, self.b_proj)),
                "log_gate": self.log_gate(h), "h": h}

    def output(self, o: Tensor, parts: dict, call: LayerCall) -> Tensor:
        o = o.transpose(1, 2)  # (batch, n, heads, head_v_dim)
        gate = None if self.g_proj is None else linear(parts["h"], self.g_proj).view_as(o)
        return linear(self.o_norm(o, gate).flatten(2), self.o_proj)

    def state_shapes(self, batch: int) -> dict[str, dict[str, int]]:
        """The heads' recurrent states (head_k_dim x head_v_dim each) and the three
        convolutions' last conv_size - 1 inputs, whatever the length."""
        heads, taps = self.num_heads, self.conv_size - 1
        widths = {"q": self.head_k_dim, "k": self.head_k_dim, "v": self.head_v_dim}
        convs = {f"conv_{name}": {"batch": batch, "channels": heads * widths[name],
                                  "taps": taps} for name in CONVS}
        return {**convs, "recurrent": {"batch": batch, "heads": heads,
                                       "k_dim": self.head_k_dim, "v_dim": self.head_v_dim}}

    def made_by(self) -> str:
        return (f"{type(self).__name__}(d_model={self.d_model}, num_heads={self.num_heads}, "
                f"head_k_dim={self.head_k_dim}, head_v_dim={self.head_v_dim}, "
                f"conv_size={self.conv_size})")

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, causal={self.causal}, "
                f"head_k_dim={self.head_k_dim}, head_v_dim={self.head_v_dim}, "
                f"use_gate={self.use_gate}, conv_size={self.conv_size}")
