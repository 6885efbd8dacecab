"""Based's Taylor feature map (Arora et al. 2024, "Simple linear attention language models
balance the recall-throughput tradeoff"): the 2nd-order Taylor expansion of exp(q . k / sqrt(d))."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from linarena.attention.feature_map import FeatureMap


class TaylorFeatures(FeatureMap):
    """phi(x) = [1, x / d^(1/4), vec(x x^T) / (sqrt(2) sqrt(d))] of x = W q (or W k), so that
    phi(q) . phi(k) = 1 + t + t^2 / 2 with t = q' . k' / sqrt(d): positive for every t.

    As in Based, the map works on a small feature dimension d = feature_dim (16): the layer's
    own learned projection W (head_dim -> feature_dim, no bias, created in setup so each layer
    has its own) maps q and k there, giving 1 + d + d^2 features (273 for d = 16).

    Args:
        feature_dim: d; None uses q and k as they are (d = head_dim, no projection).
    """

    def __init__(self, feature_dim: int | None = 16) -> None:
        super().__init__()
        if feature_dim is not None and feature_dim < 1:
            raise ValueError(f"Taylor: feature_dim must be >= 1 or null, got {feature_dim}.")
        self.feature_dim = feature_dim
        self.projection: nn.Linear | None = None

    def setup(self, head_dim: int, causal: bool) -> None:
        if self.feature_dim is not None:
            self.projection = nn.Linear(head_dim, self.feature_dim, bias=False)

    def num_features(self, head_dim: int) -> int:
        d = self.feature_dim or head_dim
        return 1 + d + d * d

    def forward(self, x: Tensor) -> Tensor:
        """x: (batch, heads, n, head_dim) -> (batch, heads, n, 1 + d + d^2)."""
        if self.projection is not None:  # in x's dtype: float64 stays float64
            x = F.linear(x, self.projection.weight.to(x.dtype))
        d = x.shape[-1]
        second = (x[..., :, None] * x[..., None, :]).flatten(-2) / math.sqrt(2 * d)
        return torch.cat([x.new_ones(*x.shape[:-1], 1), x / d**0.25, second], dim=-1)

    def extra_repr(self) -> str:
        return f"feature_dim={self.feature_dim}"
