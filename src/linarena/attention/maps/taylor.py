"""Based's Taylor feature map (Arora et al. 2024, "Simple linear attention language models
balance the recall-throughput tradeoff"): the 2nd-order Taylor expansion of exp(q . k / sqrt(d))."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from linarena.attention.feature_map import FeatureMap


class TaylorFeatures(FeatureMap):
    """phi(x) = [1, x / d^(1/4), vec(x x^T) / (sqrt(2) sqrt(d))], so that phi(q) . phi(k) =
    1 + t + t^2 / 2 with t = q . k / sqrt(d): positive for every t.

    As in Based, q and k have a small feature dimension d = feature_dim (16) while v keeps the
    full head_dim: the map expands the first d components of each head's q and k, so the
    model's own q/k projection onto those components is Based's one learned projection to the
    feature dimension (Based's `proj_q`, `proj_k`); the other q/k components are unused. This
    gives 1 + d + d^2 features (273 for d = 16).

    Args:
        feature_dim: d; None, or a value >= head_dim, expands all head_dim components.
    """

    def __init__(self, feature_dim: int | None = 16) -> None:
        super().__init__()
        if feature_dim is not None and feature_dim < 1:
            raise ValueError(f"Taylor: feature_dim must be >= 1 or null, got {feature_dim}.")
        self.feature_dim = feature_dim

    def _dim(self, head_dim: int) -> int:
        return head_dim if self.feature_dim is None else min(self.feature_dim, head_dim)

    def num_features(self, head_dim: int) -> int:
        d = self._dim(head_dim)
        return 1 + d + d * d

    def forward(self, x: Tensor) -> Tensor:
        """x: (batch, heads, n, head_dim) -> (batch, heads, n, 1 + d + d^2)."""
        x = x[..., : self._dim(x.shape[-1])]
        d = x.shape[-1]
        second = (x[..., :, None] * x[..., None, :]).flatten(-2) / math.sqrt(2 * d)
        return torch.cat([x.new_ones(*x.shape[:-1], 1), x / d**0.25, second], dim=-1)

    def extra_repr(self) -> str:
        return f"feature_dim={self.feature_dim}"
