"""Pre-LayerNorm Transformer block with a pluggable attention core."""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F

from linarena.models.short_conv import ShortConv


class MultiHeadAttention(nn.Module):
    """Projects to per-head q, k, v, runs the attention core, merges the heads.

    Args:
        d_model: model width; must be divisible by num_heads.
        num_heads: number of heads.
        core: attention module with forward(q, k, v, mask) on (batch, heads, length, head_dim).
    """

    def __init__(self, d_model: int, num_heads: int, core: nn.Module) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.core = core
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x: (batch, length, d_model); mask: bool (batch, length) -> (batch, length, d_model)."""
        batch, length, d_model = x.shape
        qkv = self.qkv(x).view(batch, length, 3, self.num_heads, d_model // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (batch, heads, length, head_dim)
        heads = self.core(q, k, v, mask=mask)
        return self.out(heads.transpose(1, 2).reshape(batch, length, d_model))


class FeedForward(nn.Module):
    """Dense(mlp_dim) - GELU - dropout - Dense(d_model), the LRA MLP block."""

    def __init__(self, d_model: int, mlp_dim: int, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, mlp_dim)
        self.fc2 = nn.Linear(mlp_dim, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """x: (..., d_model) -> (..., d_model)."""
        return self.fc2(self.dropout(F.gelu(self.fc1(x))))


class TransformerBlock(nn.Module):
    """x + attention(LN(x)), then x + MLP(LN(x)), dropout on each residual branch.

    short_conv > 0: the attention reads ShortConv(LN(x)) (a causal depthwise convolution of that
    many taps, residual) instead of LN(x), as in the Zoology/Based MQAR models; 0: no conv.
    """

    def __init__(
        self, d_model: int, num_heads: int, mlp_dim: int, dropout: float, core: nn.Module,
        short_conv: int = 0,
    ) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(d_model)
        self.short_conv = ShortConv(d_model, short_conv) if short_conv else None
        self.attention = MultiHeadAttention(d_model, num_heads, core)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = FeedForward(d_model, mlp_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x: (batch, length, d_model); mask: bool (batch, length) -> (batch, length, d_model)."""
        h = self.attention_norm(x)
        if self.short_conv is not None:
            h = self.short_conv(h, mask)
        x = x + self.dropout(self.attention(h, mask))
        return x + self.dropout(self.mlp(self.mlp_norm(x)))
