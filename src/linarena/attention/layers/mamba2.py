"""The Mamba-2 block as a whole layer (Dao and Gu 2024, "Transformers are SSMs: Generalized Models
and Efficient Algorithms Through Structured State Space Duality"), with the defaults of
flash-linear-attention 0.6.0's fla.layers.Mamba2, its head and state sizes derived from the
model's width and heads."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from linarena.attention.layers.base import AttentionLayer, LayerCall
from linarena.attention.layers.conv import CausalConv
from linarena.attention.layers.gla import expanded_width
from linarena.attention.recurrent.core import per_head
from linarena.attention.rotation import Rotation, rotate_from
from linarena.attention.validation import zero_padding


def inverse_softplus_dt(num_heads: int, dt_min: float, dt_max: float, floor: float) -> Tensor:
    """Mamba's dt_bias initialisation: dt drawn log-uniformly in [dt_min, dt_max] (at least
    `floor`) per head, returned as softplus^-1(dt), so softplus(dt_bias) starts at dt."""
    log_dt = torch.rand(num_heads) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
    dt = torch.exp(log_dt).clamp(min=floor)
    return dt + torch.log(-torch.expm1(-dt))


class Mamba2Layer(AttentionLayer):
    """[z, xBC, dt] = x W_in; xBC = silu(causal_conv(xBC)) = [x', B, C]; per head h and token t
    dt_t = softplus(dt_t + dt_bias_h), S_t = exp(dt_t A_h) S_{t-1} + B_t (dt_t x'_t)^T,
    y_t = S_t^T C_t + D_h x'_t (A_h = -exp(A_log_h); B, C shared by the heads, n_groups 1);
    out = W_out (RMSNorm(y * silu(z)) * weight), the norm over all inner features.

    Defaults of fla.layers.Mamba2 (and Mamba-2): expand 2, short convolution of 4 taps with a
    bias over x', B and C, silu, no bias on the projections, A initialised uniformly in
    [1, 16], dt in [0.001, 0.1] (floor 1e-4), D = 1 per head, norm eps 1e-5, norm after the
    gate. The paper fixes head_dim 64 and state_size 128, which do not fit our widths: here the
    model's num_heads split the inner width, head_dim = expand * d_model / num_heads, and
    state_size defaults to 2 * head_dim (the paper's ratio); at d_model 128 and 4 heads these are
    the paper's 64 and 128. n_groups > 1 and dt limits are not offered.

    Bidirectional (causal=False): the SSD recurrence runs both ways (linarena.attention.engine);
    the short convolution stays causal (it mixes the last conv_size tokens, as in the paper).
    rotary (model.positions=rope) rotates C and B (the q and k the recurrence sees) per head.

    Dtypes as RecurrentAttention: in_proj and out_proj run in the caller's dtype and autocast;
    the convolution, gates, recurrence and norm in float32 (float64 for float64 inputs) with
    autocast off; the output is cast to x's dtype. Padded tokens (mask False) are zeroed before
    the projection (the convolution reads a zero there; a hole inside a row stays a position),
    skipped by the recurrence, and their outputs are 0; return_state needs right padding.
    State: LayerState.tensors "recurrent" (batch, heads, state_size, head_dim) and "conv"
    (batch, inner + 2 state_size, conv_size - 1), the convolution's last inputs.

    Parameters (inner = expand d_model, N = state_size, K = conv_size): in_proj d_model (2 inner
    + 2 N + heads), conv (inner + 2 N)(K + 1), dt_bias, A_log, D 3 heads, norm inner, out_proj
    inner d_model. At d_model 128, 4 heads: 134,412, against 66,088 for the block it replaces
    (4 d_model^2 = 65,536 projections + Mamba2Attention's 552). State at d_model 128, 4 heads:
    4 x 128 x 64 + 512 x 3 = 34,304 numbers.

    Args:
        d_model, num_heads, causal, backend, rotary: see AttentionLayer.
        expand: inner width = expand * d_model.
        state_size: N, the state's size per head and value feature (None: 2 * head_dim).
        conv_size: taps of the short convolution.
        dt_min, dt_max, dt_init_floor: the range of dt at initialisation.
        norm_eps: eps of the gated RMSNorm.
    """

    fla_kernel = True
    own_short_conv = True

    def __init__(self, d_model: int, num_heads: int, causal: bool = False,
                 backend: str = "auto", rotary: Rotation | None = None, *, expand: float = 2,
                 state_size: int | None = None, conv_size: int = 4, dt_min: float = 1e-3,
                 dt_max: float = 0.1, dt_init_floor: float = 1e-4, norm_eps: float = 1e-5
                 ) -> None:
        super().__init__(d_model, num_heads, causal, backend, rotary)
        self.inner = expanded_width(d_model, expand, num_heads, "the inner width", "Mamba2Layer")
        self.head_dim = self.inner // num_heads
        self.ssm_size = 2 * self.head_dim if state_size is None else state_size
        if self.ssm_size < 1:
            raise ValueError(f"Mamba2Layer: state_size must be >= 1, got {state_size}.")
        self.conv_dim = self.inner + 2 * self.ssm_size
        self.in_proj = nn.Linear(d_model, self.inner + self.conv_dim + num_heads, bias=False)
        self.conv = CausalConv(self.conv_dim, conv_size, bias=True, activation="silu")
        self.dt_bias = nn.Parameter(inverse_softplus_dt(num_heads, dt_min, dt_max,
                                                        dt_init_floor))
        self.A_log = nn.Parameter(torch.log(torch.empty(num_heads).uniform_(1.0, 16.0)))
        self.D = nn.Parameter(torch.ones(num_heads))
        self.norm_weight = nn.Parameter(torch.ones(self.inner))
        self.norm_eps = norm_eps
        self.out_proj = nn.Linear(self.inner, d_model, bias=False)

    def project(self, x: Tensor, call: LayerCall) -> dict:
        z, xbc, dt = call.linear(x, self.in_proj).to(call.dtype).split(
            [self.inner, self.conv_dim, self.num_heads], dim=-1)
        values, b, c = call.conv("conv", self.conv, xbc).split(
            [self.inner, self.ssm_size, self.ssm_size], dim=-1)
        dt = F.softplus(dt + self.dt_bias.to(call.dtype)).transpose(1, 2)  # (batch, heads, n)
        values = per_head(values, self.num_heads)
        shared = (*dt.shape, self.ssm_size)
        q, k = rotate_from(self.rotary, c[:, None].expand(shared), b[:, None].expand(shared),
                           call.position)
        return {"q": q, "k": k, "v": values * dt[..., None], "scale": 1.0, "values": values,
                "log_gate": -torch.exp(self.A_log.to(call.dtype))[:, None] * dt, "z": z}

    def output(self, y: Tensor, parts: dict, call: LayerCall) -> Tensor:
        y = y + self.D.to(call.dtype)[:, None, None] * parts["values"]
        y = y.transpose(1, 2).flatten(2) * F.silu(parts["z"])
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.norm_eps)
        return call.linear(zero_padding(y * self.norm_weight.to(call.dtype), call.mask),
                           self.out_proj)

    def state_shapes(self, batch: int) -> dict[str, dict[str, int]]:
        """heads x state_size x head_dim (the SSM states) and the convolution's last
        conv_size - 1 inputs of its inner + 2 state_size channels, whatever the length."""
        return {"recurrent": {"batch": batch, "heads": self.num_heads,
                              "state_size": self.ssm_size, "head_dim": self.head_dim},
                "conv": {"batch": batch, "channels": self.conv_dim,
                         "taps": self.conv.kernel_size - 1}}

    def made_by(self) -> str:
        return (f"Mamba2Layer(d_model={self.d_model}, num_heads={self.num_heads}, "
                f"inner={self.inner}, state_size={self.ssm_size}, "
                f"conv_size={self.conv.kernel_size})")
