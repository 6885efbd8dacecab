"""Pre-LayerNorm Transformer block with a pluggable attention core, initialised as in LRA."""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F

from linarena.attention.layers import AttentionLayer
from linarena.errors import ConfigError
from linarena.models.short_conv import ShortConv

# flax.nn.LayerNorm's default, which the LRA models use.
LAYER_NORM_EPS = 1e-6
# LRA's Dense biases in the blocks start at N(0, 1e-6): zero for all practical purposes.
BIAS_INIT_STD = 1e-6


class MultiHeadAttention(nn.Module):
    """Projects to per-head q, k, v, runs the attention core, merges the heads.

    As in LRA (flax SelfAttention with bias=False): the q, k, v and output projections have no
    biases, and each is initialised xavier-uniform on its own (d_model, qkv_dim) matrix.

    Args:
        d_model: model width (input and output features).
        num_heads: number of heads; qkv_dim must be divisible by it.
        core: attention module with forward(q, k, v, mask) on (batch, heads, length, head_dim).
            A core whose class sets `reads_token = True` (gates or beta computed from the token,
            linarena.attention.recurrent) is also given `x=` the (batch, length, d_model) input
            the q, k, v projections read.
        qkv_dim: total width of q, k and v over all heads (LRA's qkv_dim); None means d_model.
    """

    def __init__(
        self, d_model: int, num_heads: int, core: nn.Module, qkv_dim: int | None = None
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv_dim = d_model if qkv_dim is None else qkv_dim
        self.qkv = nn.Linear(d_model, 3 * self.qkv_dim, bias=False)
        self.core = core
        self.out = nn.Linear(self.qkv_dim, d_model, bias=False)
        for projection in self.qkv.weight.chunk(3, dim=0):  # q, k, v rows
            nn.init.xavier_uniform_(projection)
        nn.init.xavier_uniform_(self.out.weight)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x: (batch, length, d_model); mask: bool (batch, length) -> (batch, length, d_model)."""
        batch, length, _ = x.shape
        head_dim = self.qkv_dim // self.num_heads
        qkv = self.qkv(x).view(batch, length, 3, self.num_heads, head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (batch, heads, length, head_dim)
        token = {"x": x} if getattr(self.core, "reads_token", False) else {}
        heads = self.core(q, k, v, mask=mask, **token)
        return self.out(heads.transpose(1, 2).reshape(batch, length, self.qkv_dim))


def init_dense(layer: nn.Linear) -> nn.Linear:
    """LRA's Dense initialisation in the blocks: xavier-uniform weight, bias ~ N(0, 1e-6)."""
    nn.init.xavier_uniform_(layer.weight)
    nn.init.normal_(layer.bias, std=BIAS_INIT_STD)
    return layer


class FeedForward(nn.Module):
    """Dense(mlp_dim) - GELU - dropout - Dense(d_model), the LRA MLP block."""

    def __init__(self, d_model: int, mlp_dim: int, dropout: float) -> None:
        super().__init__()
        self.fc1 = init_dense(nn.Linear(d_model, mlp_dim))
        self.fc2 = init_dense(nn.Linear(mlp_dim, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """x: (..., d_model) -> (..., d_model)."""
        return self.fc2(self.dropout(F.gelu(self.fc1(x))))


class TransformerBlock(nn.Module):
    """x + attention(LN(x)), then x + MLP(LN(x)), dropout on each residual branch.

    core: an attention core, run between the block's q/k/v and output projections
    (MultiHeadAttention), or a whole layer (linarena.attention.layers.AttentionLayer), which
    has its own and is used as it is (qkv_dim is then unused).

    short_conv > 0: the attention reads ShortConv(LN(x)) (a causal depthwise convolution of that
    many taps, residual) instead of LN(x), as in the Zoology/Based MQAR models; 0: no conv.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        mlp_dim: int,
        dropout: float,
        core: nn.Module,
        qkv_dim: int | None = None,
        short_conv: int = 0,
    ) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
        self.short_conv = ShortConv(d_model, short_conv) if short_conv else None
        if isinstance(core, AttentionLayer):
            if short_conv and core.own_short_conv:
                raise ConfigError(
                    f"{type(core).__name__} has its own short convolutions, so "
                    f"model.short_conv={short_conv} would add a second one before it; set "
                    "model.short_conv=0.")
            self.attention: nn.Module = core
        else:
            self.attention = MultiHeadAttention(d_model, num_heads, core, qkv_dim)
        self.mlp_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
        self.mlp = FeedForward(d_model, mlp_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x: (batch, length, d_model); mask: bool (batch, length) -> (batch, length, d_model)."""
        h = self.attention_norm(x)
        if self.short_conv is not None:
            h = self.short_conv(h, mask)
        x = x + self.dropout(self.attention(h, mask))
        return x + self.dropout(self.mlp(self.mlp_norm(x)))
