"""RetNet's multi-scale retention as a whole layer (Sun et al. 2023, "Retentive Network: A
Successor to Transformer for Large Language Models"), with the defaults of flash-linear-attention
0.6.0's fla.layers.MultiScaleRetention."""

from __future__ import annotations

import torch
from torch import Tensor

from linarena.attention.layers.gla import GatedProjectionLayer
from linarena.attention.recurrent.retnet import retnet_log_decay
from linarena.attention.rotation import Rotation, rotate_from

ROTATION_BASE = 10000.0


def rotate_halves(x: Tensor, start: int) -> Tensor:
    """x (batch, heads, n, d), d even, of positions start .. start + n - 1, with feature i and
    i + d/2 rotated as a pair by the angle p * base^(-2i / d) (RoPE on the two halves of each
    head, GPT-NeoX style, as fla's RotaryEmbedding does for RetNet), in x's dtype."""
    half = x.shape[-1] // 2
    positions = torch.arange(start, start + x.shape[2], device=x.device, dtype=x.dtype)
    rates = ROTATION_BASE ** (torch.arange(half, device=x.device, dtype=x.dtype) * (-1 / half))
    angles = positions[:, None] * rates
    cos, sin = torch.cos(angles), torch.sin(angles)
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


class RetNetLayer(GatedProjectionLayer):
    """Multi-scale retention: S_t = gamma_h S_{t-1} + k_t v_t^T with a fixed decay per head,
    gamma_h = 1 - 2^(-5-h) (h = 0 .. heads - 1), o_t = S_t^T q_t / sqrt(head_k_dim) with q, k
    rotated by their positions, out = W_o (RMSNorm(o_t) * swish(x_t W_g)) per head
    (GatedProjectionLayer).

    Defaults of fla.layers.MultiScaleRetention: expand_k 1, expand_v 2, swish output gate, the
    per-head RMSNorm of fla (eps 1e-5; the paper writes GroupNorm), the rotation of q and k fla
    applies: RoPE on the two halves of each head, base 10000, positions from the state's
    (xPos's rotation without its per-position scale, as in fla). No short convolution.

    Rotation: with `rotary` (model.positions=rope) that rotation (RoFormer's interleaved pairs)
    replaces the layer's own, so q and k are rotated once; own_rotary=False and no rotary: no
    rotation at all. head_k_dim must be even for the layer's own rotation.

    Parameters, with the defaults: q, k d_model^2 each, v, g, o 2 d_model^2 each, the norm
    2 d_model / heads: 8 d_model^2 + 2 d_model / heads. At d_model 128, 4 heads: 131,136,
    against 65,600 for the block it replaces (4 d_model^2 = 65,536 projections + RetNetAttention's
    GroupNorm, 64). State: heads x (d_model / heads) x (2 d_model / heads) = 2 d_model^2 / heads.

    Bidirectional (causal=False): the decayed recurrence run both ways, so token j reaches
    token i with weight gamma^|i - j| (the rotation stays relative).

    Args:
        d_model, num_heads, causal, backend, rotary: see AttentionLayer.
        expand_k, expand_v: key_dim = d_model * expand_k, value_dim = d_model * expand_v.
        own_rotary: apply fla's rotation when no rotary is given.
        norm_eps: eps of the per-head RMSNorm.
    """

    def __init__(self, d_model: int, num_heads: int, causal: bool = False,
                 backend: str = "auto", rotary: Rotation | None = None, *,
                 expand_k: float = 1.0, expand_v: float = 2.0, own_rotary: bool = True,
                 norm_eps: float = 1e-5) -> None:
        super().__init__(d_model, num_heads, causal, backend, rotary, expand_k, expand_v,
                         norm_eps)
        if own_rotary and rotary is None and self.head_k_dim % 2:
            raise ValueError(f"RetNetLayer: its own rotation turns pairs of features, so "
                             f"head_k_dim (d_model * expand_k / num_heads = {self.head_k_dim}) "
                             "must be even; change the sizes or set own_rotary=false.")
        self.own_rotary = own_rotary

    def log_gate(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        log_decay = retnet_log_decay(self.num_heads, x.dtype, x.device)
        return log_decay[None, :, None].expand(batch, self.num_heads, length)

    def rotate(self, q: Tensor, k: Tensor, start: int) -> tuple[Tensor, Tensor]:
        if self.rotary is not None or not self.own_rotary:
            return rotate_from(self.rotary, q, k, start)
        return rotate_halves(q, start), rotate_halves(k, start)

    def extra_repr(self) -> str:
        rotation = "model rotary" if self.rotary is not None else (
            "own (halves)" if self.own_rotary else "none")
        return f"causal={self.causal}, rotation={rotation}"
