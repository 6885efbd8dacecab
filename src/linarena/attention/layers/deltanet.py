"""The DeltaNet layer (Yang, Wang, Shen, Panda, Kim 2024, "Parallelizing Linear Transformers with
the Delta Rule over Sequence Length"), whole, with the defaults of flash-linear-attention
0.6.0's fla.layers.DeltaNet: its projections, short convolutions, output norm and projection
around the delta rule (linarena.attention.ops.delta_rule)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from linarena.attention.layers.base import AttentionLayer, LayerState
from linarena.attention.layers.conv import CausalConv
from linarena.attention.layers.norm import GatedRMSNorm
from linarena.attention.ops import delta_rule
from linarena.attention.ops.common import compute_dtype
from linarena.attention.recurrent.core import head_projection, linear, per_head
from linarena.attention.rotation import Rotation, rotate_from
from linarena.attention.validation import check_right_padded, check_state, zero_padding

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
    and backwards (linarena.attention.ops.delta_rule), while the short convolutions stay causal,
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

    def forward(self, x: Tensor, mask: Tensor | None = None, *,
                initial_state: LayerState | None = None, return_state: bool = False
                ) -> Tensor | tuple[Tensor, LayerState]:
        """x: (batch, n, d_model); mask: bool (batch, n), True = real. Returns (batch, n,
        d_model), and with return_state (causal) the LayerState after the real tokens."""
        self.check_call(x, mask, initial_state, return_state)
        dtype = compute_dtype(x)
        if initial_state is not None:
            self._check_state(initial_state, x, dtype)
        position = 0 if initial_state is None else initial_state.position
        # fla's kernels take the projections' dtype: autocast's in a mixed-precision run.
        device = x.device.type
        kernel_dtype = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                        else x.dtype)
        use_fla = self.runs_fla(kernel_dtype, x.device, delta=True)
        self.backend_used = "fla" if use_fla else "torch"
        lengths = None
        if return_state and mask is not None:
            check_right_padded(mask, type(self).__name__)
            lengths = mask.sum(-1)
        caches = {} if initial_state is None else initial_state.tensors
        with torch.autocast(device_type=x.device.type, enabled=False):
            h = zero_padding(x.to(dtype), mask)
            tensors = {}
            qkv = []
            for name, proj in zip(CONVS, (self.q_proj, self.k_proj, self.v_proj), strict=True):
                out, tensors[f"conv_{name}"] = self.convs[name](
                    linear(h, proj), caches.get(f"conv_{name}"), lengths)
                qkv.append(per_head(out, self.num_heads))
            q, k, v = qkv
            q, k = rotate_from(self.rotary, l2_normalise(q), l2_normalise(k), position)
            beta = torch.sigmoid(head_projection(h, self.b_proj))
            if use_fla:  # fla's kernels run in that dtype, states in float32
                q, k, v, beta = (t.to(kernel_dtype) for t in (q, k, v, beta))
            result = delta_rule(q, k, v, beta, self.log_gate(h), causal=self.causal, mask=mask,
                                backend=self.backend_used, initial_state=caches.get("recurrent"),
                                return_state=return_state)
            out, tensors["recurrent"] = result if return_state else (result, None)
            out = out.to(dtype).transpose(1, 2)  # (batch, n, heads, head_v_dim)
            gate = None if self.g_proj is None else linear(h, self.g_proj).view_as(out)
            out = self.o_norm(out, gate).flatten(2)
            y = linear(out, self.o_proj).to(x.dtype)
        if not return_state:
            return y
        return y, LayerState(tensors, position + x.shape[1], self.made_by())

    def state_size(self, length: int) -> int:
        """Numbers per sequence after any length: the heads' recurrent states (head_k_dim x
        head_v_dim each) and the three convolutions' last conv_size - 1 inputs."""
        heads = self.num_heads
        state = heads * self.head_k_dim * self.head_v_dim
        channels = heads * (2 * self.head_k_dim + self.head_v_dim)
        return state + channels * (self.conv_size - 1)

    def made_by(self) -> str:
        return (f"{type(self).__name__}(d_model={self.d_model}, num_heads={self.num_heads}, "
                f"head_k_dim={self.head_k_dim}, head_v_dim={self.head_v_dim}, "
                f"conv_size={self.conv_size})")

    def _check_state(self, state: LayerState, x: Tensor, dtype: torch.dtype) -> None:
        """Refuse a recurrent state of another batch or dtype (made_by: check_call)."""
        expected = {"batch": x.shape[0], "heads": self.num_heads, "k_dim": self.head_k_dim,
                    "v_dim": self.head_v_dim}
        check_state(state.made_by, state.tensors["recurrent"], self.made_by(), expected, dtype,
                    type(self).__name__)

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, causal={self.causal}, "
                f"head_k_dim={self.head_k_dim}, head_v_dim={self.head_v_dim}, "
                f"use_gate={self.use_gate}, conv_size={self.conv_size}")
