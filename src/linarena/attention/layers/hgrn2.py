"""The HGRN2 layer (Qin et al. 2024, "HGRN2: Gated Linear RNNs with State Expansion"), whole,
with the defaults of flash-linear-attention 0.6.0's fla.layers.HGRN2Attention (no short
convolution, no layer-dependent lower bound on the forget gate, which fla's layer takes only
from its HGRN2 model).

Per head, with f_t = sigmoid(x_t W_f) a forget gate per key feature:
    S_t = diag(f_t) S_{t-1} + (1 - f_t) i_t^T,   o_t = S_t^T swish(q_t) / sqrt(head_f_dim),
q = x W_q, i = x W_i (the input, HGRN2's v); the key is 1 - f_t, the gate's complement, so the
layer has no key projection: state expansion by the outer product with i_t. The output is one
RMSNorm over all heads together (width d_model, elementwise weight) and an output projection,
no output gate. The scale 1/sqrt(head_f_dim) is fla's (its GLA kernels' default scale).
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F

from linarena.attention.layers.base import AttentionLayer, LayerCall
from linarena.attention.layers.norm import GatedRMSNorm
from linarena.attention.recurrent.core import per_head
from linarena.attention.rotation import Rotation, rotate_from


class HGRN2Layer(AttentionLayer):
    """x (batch, n, d_model) -> (batch, n, d_model): HGRN2's gated linear recurrence with state
    expansion (see the module docstring).

    Sizes: num_heads heads of head_f_dim = expand_ratio forget/query features (default
    d_model / num_heads, as fla's layer given num_heads) and head_i_dim = d_model / num_heads
    input features; the state is heads x head_f_dim x head_i_dim per sequence.
    Parameters: 2 d_model forget_dim (q, f) + 2 d_model^2 (i, o) + d_model (the norm); at
    d_model 128, 4 heads: 65,664, against 65,536 for the block projections it replaces.

    Bidirectional (causal=False): the same recurrence run both ways (no kernel change).
    rotary (model.positions=rope) rotates q and the key 1 - f before the recurrence.

    Args:
        d_model, num_heads, causal, backend, rotary: see AttentionLayer.
        expand_ratio: head_f_dim; None: d_model // num_heads.
        norm_eps: eps of the output RMSNorm.
    """

    fla_kernel = True  # the gated recurrence (recurrence = "gated") has one

    def __init__(self, d_model: int, num_heads: int, causal: bool = False,
                 backend: str = "auto", rotary: Rotation | None = None, *,
                 expand_ratio: int | None = None, norm_eps: float = 1e-5) -> None:
        super().__init__(d_model, num_heads, causal, backend, rotary)
        self.head_f_dim = d_model // num_heads if expand_ratio is None else expand_ratio
        if self.head_f_dim < 1:
            raise ValueError(f"HGRN2Layer: expand_ratio must be a positive integer, got "
                             f"{expand_ratio}.")
        self.head_i_dim = d_model // num_heads
        forget_dim = num_heads * self.head_f_dim
        self.q_proj = nn.Linear(d_model, forget_dim, bias=False)
        self.f_proj = nn.Linear(d_model, forget_dim, bias=False)
        self.i_proj = nn.Linear(d_model, d_model, bias=False)
        self.g_norm = GatedRMSNorm(d_model, norm_eps)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def project(self, x: Tensor, call: LayerCall) -> dict:
        q, f, i = (per_head(call.linear(x, proj).to(call.dtype), self.num_heads)
                   for proj in (self.q_proj, self.f_proj, self.i_proj))
        log_forget = F.logsigmoid(f)  # (batch, heads, n, head_f_dim), <= 0
        q, k = rotate_from(self.rotary, F.silu(q), 1 - log_forget.exp(), call.position)
        return {"q": q, "k": k, "v": i, "log_gate": log_forget}

    def output(self, o: Tensor, parts: dict, call: LayerCall) -> Tensor:
        # o (batch, heads, n, head_i_dim) -> one norm over all heads' features, as fla's.
        return call.linear(self.g_norm(o.transpose(1, 2).flatten(2)), self.o_proj)

    def state_shapes(self, batch: int) -> dict[str, dict[str, int]]:
        return {"recurrent": {"batch": batch, "heads": self.num_heads, "k_dim": self.head_f_dim,
                              "v_dim": self.head_i_dim}}

    def made_by(self) -> str:
        return (f"HGRN2Layer(d_model={self.d_model}, num_heads={self.num_heads}, "
                f"head_f_dim={self.head_f_dim})")
