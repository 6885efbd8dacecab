"""Based (Arora et al. 2024, "Simple linear attention language models balance the
recall-throughput tradeoff") as one token mixer: its gated short convolution (BaseConv), its
Taylor linear attention (as fla.layers.BasedLinearAttention computes it) and its sliding-window
softmax attention, each with its own projections as published.

The paper's model is a stack in which these are separate layers, each with its own norm,
residual and MLP (the released 360M model: BaseConv in 17 of 27 layers, the linear attention in
5, sliding-window attention in the 5 after those). Here every block holds all three, combined as
the stack's data flow in one layer: the convolution first, as a residual update whose result
both attentions read (so that they, like the stack's attention layers, see tokens mixed with
their neighbours), the two attentions in parallel on it, and the layer's update to the residual
stream the sum of the three updates:

    c = BaseConv(x),  h = x + c,  out = c + TaylorAttention(h) + WindowAttention(h).

There are no norms or MLPs between the three, and the depth of the model (model.num_layers),
not a schedule of layer kinds, decides how many of each it has.
"""

from __future__ import annotations

from torch import Tensor, nn

from linarena.attention.engine.backend import check_backend
from linarena.attention.engine.linear import LinearAttentionState
from linarena.attention.layers.base import AttentionLayer, LayerCall
from linarena.attention.layers.conv import CausalConv
from linarena.attention.linear import LinearAttention
from linarena.attention.maps.taylor import TaylorFeatures
from linarena.attention.recurrent.core import linear, per_head
from linarena.attention.rotation import Rotation
from linarena.attention.sliding_window import SlidingWindowAttention
from linarena.attention.validation import zero_padding


class TaylorLinearAttention(nn.Module):
    """Based's linear attention, fla.layers.BasedLinearAttention's computation (same parameter
    names, so their weights load into each other): q, k = x W_q, x W_k split into heads of
    feature_dim (16) components, v = x W_v into heads of d_model / heads, then per head
    out_i = sum_j phi(q_i) . phi(k_j) v_j / (sum_j phi(q_i) . phi(k_j) + eps) with the 2nd-order
    Taylor features, phi(q) . phi(k) = 1 + t + t^2 / 2, t = q . k / sqrt(feature_dim), over
    j <= i (causal) or all j, and an output projection W_o. No norm, gate or convolution.

    eps = 1e-6 is the one fla's causal kernel (parallel_based) adds to its normaliser; fla's
    bidirectional path adds 1e-12, a difference below float32 rounding since the normaliser is a
    sum of terms >= 1/2. Runs on LinearAttention (linarena's chunked kernels, float32 state).
    """

    def __init__(self, d_model: int, num_heads: int, causal: bool, feature_dim: int = 16,
                 eps: float = 1e-6, chunk_size: int = 64) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(d_model, num_heads * feature_dim, bias=False)
        self.k_proj = nn.Linear(d_model, num_heads * feature_dim, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)
        self.attention = LinearAttention(feature_dim, causal,
                                         feature_map=TaylorFeatures(feature_dim), eps=eps,
                                         chunk_size=chunk_size)

    def heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v (batch, heads, n, dim) of x (batch, n, d_model)."""
        return tuple(per_head(linear(x, proj), self.num_heads)
                     for proj in (self.q_proj, self.k_proj, self.v_proj))

    def forward(self, x: Tensor, mask: Tensor | None = None,
                initial_state: LinearAttentionState | None = None, return_state: bool = False
                ) -> Tensor | tuple[Tensor, LinearAttentionState]:
        """x: (batch, n, d_model), padded tokens zeroed; mask: bool (batch, n). Returns
        (batch, n, d_model), and with return_state the LinearAttentionState after these tokens."""
        result = self.attention(*self.heads(x), mask, initial_state, return_state)
        o, state = result if return_state else (result, None)
        out = linear(o.transpose(1, 2).flatten(2), self.o_proj)
        return (out, state) if return_state else out


class BasedLayer(AttentionLayer):
    """out = c + TaylorLinearAttention(h) + W_o SWA(h W_q, h W_k, h W_v), h = x + c, with
    c = BaseConv(x) = W_2 (silu(conv(u)) * g) + b_2, [u | g] = x W_1 + b_1 (module docstring).

    The parts, as the paper's code (HazyResearch/based) and fla build them:
      - BaseConv: x -> 2 inner (inner = d_model * conv_expand / 2) with bias, a depthwise causal
        convolution of conv_size taps (3) and silu on one half, times the other half, back to
        d_model with bias. Causal in both modes (the convolution is a short causal filter).
      - Taylor linear attention (TaylorLinearAttention): feature_dim 16 per head, model.num_heads
        heads, values d_model / heads wide, its denominator the only normalisation; no rotary
        (Based's linear attention has none: positions reach it through the convolution).
      - Sliding-window softmax (SlidingWindowAttention): q, k, v projections without bias,
        heads of d_model / heads, window 64 (the paper's; causal: the token and the 63 before
        it; bidirectional: 63 on each side), rotary (model.positions=rope) as Based rotates its
        window attention, an output projection without bias.

    Parameters (conv_expand 2): 9 d^2 + 2 d heads feature_dim + (conv_size + 3) d: 164,608 at
    d_model 128, 4 heads, against 65,536 for a softmax block's q, k, v, out projections.
    State (causal): the convolution's last conv_size - 1 inputs (inner each), the Taylor state
    and normaliser per head ((1 + f + f^2) x (d_v + 1), f = feature_dim), the window's last
    window - 1 keys and values (heads x head_dim each) and its count of real entries (one
    number); see state_size.

    Args:
        d_model, num_heads, causal, backend, rotary: see AttentionLayer. backend: auto or
            torch; fla is refused (fla-core has no kernel for this layer's parts as linarena
            runs them: the Taylor map runs on linarena's chunked kernels, the window on SDPA).
        feature_dim: q, k components per head of the linear attention (Based: 16).
        window: the sliding window (Based: 64).
        conv_size: taps of the short convolution (Based's BaseConv: 3).
        conv_expand: BaseConv's expand_proj (2, its default; the released 360M model uses 4).
        eps: the linear attention's eps (see TaylorLinearAttention).
    """

    own_short_conv = True
    full_precision = False  # its parts choose their dtypes

    def __init__(self, d_model: int, num_heads: int, causal: bool = False,
                 backend: str = "auto", rotary: Rotation | None = None, *,
                 feature_dim: int = 16, window: int = 64, conv_size: int = 3,
                 conv_expand: int = 2, eps: float = 1e-6) -> None:
        # First, so that fla is refused for having no kernel, before the base asks for CUDA.
        check_backend(backend, type(self).__name__, causal,
                      "fla-core has no kernel for Based's parts as linarena runs them (the Taylor "
                      "map on linarena's chunked kernels, the window on PyTorch's SDPA)")
        super().__init__(d_model, num_heads, causal, backend, rotary)
        if d_model * conv_expand % 2 or conv_expand < 1:
            raise ValueError(f"BasedLayer: d_model * conv_expand must be even and conv_expand "
                             f">= 1, got {d_model} * {conv_expand}.")
        self.feature_dim = feature_dim
        self.inner = d_model * conv_expand // 2
        self.conv_in = nn.Linear(d_model, 2 * self.inner)
        self.conv = CausalConv(self.inner, conv_size, bias=False, activation="silu")
        self.conv_out = nn.Linear(self.inner, d_model)
        self.linear = TaylorLinearAttention(d_model, num_heads, causal, feature_dim, eps)
        self.window_qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.window_attention = SlidingWindowAttention(d_model // num_heads, causal, window,
                                                       rotary=rotary)
        self.window_out = nn.Linear(d_model, d_model, bias=False)

    def project(self, x: Tensor, call: LayerCall) -> dict:
        u, gate = linear(x, self.conv_in).chunk(2, dim=-1)
        # call.conv zeroes padding again: the projection's bias would put it back there.
        c = linear(call.conv("conv", self.conv, u) * gate, self.conv_out)
        return {"c": c, "h": zero_padding(x + c, call.mask)}

    def mix(self, parts: dict, call: LayerCall) -> tuple[Tensor, Tensor]:
        """The Taylor linear attention and the window, both on h."""
        taylor = call.kernel_sums("taylor", self.linear.attention, *self.linear.heads(parts["h"]))
        q, k, v = (per_head(t, self.num_heads)
                   for t in linear(parts["h"], self.window_qkv).chunk(3, -1))
        return taylor, call.window("window", self.window_attention, q, k, v)

    def output(self, o: tuple[Tensor, Tensor], parts: dict, call: LayerCall) -> Tensor:
        taylor, window = (t.transpose(1, 2).flatten(2) for t in o)
        return (parts["c"] + linear(taylor, self.linear.o_proj)
                + linear(window, self.window_out))

    def state_shapes(self, batch: int) -> dict[str, dict[str, int]]:
        """The convolution's and the Taylor sums' (the window checks its own)."""
        features = self.linear.attention.feature_map.num_features(self.feature_dim)
        heads, head_dim = self.num_heads, self.d_model // self.num_heads
        return {"conv": {"batch": batch, "channels": self.inner,
                         "taps": self.conv.kernel_size - 1},
                "taylor_kv": {"batch": batch, "heads": heads, "features": features,
                              "head_dim": head_dim},
                "taylor_z": {"batch": batch, "heads": heads, "features": features}}

    def state_size(self, length: int) -> int:
        """Numbers per sequence, whatever the length: the convolution's last conv_size - 1
        inputs, every head's Taylor state and normaliser, the window's last window - 1 keys and
        values over the heads, and its count of real entries."""
        features = self.linear.attention.feature_map.num_features(self.feature_dim)
        head_dim = self.d_model // self.num_heads
        conv = self.inner * (self.conv.kernel_size - 1)
        taylor = self.num_heads * features * (head_dim + 1)
        window = 2 * self.num_heads * (self.window_attention.window - 1) * head_dim
        return conv + taylor + window + 1

    def made_by(self) -> str:
        return (f"{type(self).__name__}(d_model={self.d_model}, num_heads={self.num_heads}, "
                f"feature_dim={self.feature_dim}, window={self.window_attention.window}, "
                f"conv_size={self.conv.kernel_size}, inner={self.inner})")
