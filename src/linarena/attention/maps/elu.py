"""elu+1 features (Katharopoulos et al. 2020, "Transformers are RNNs")."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor

from linarena.attention.feature_map import FeatureMap, FeatureOutput, FeatureVjp


class EluFeatures(FeatureMap):
    """phi(x) = elu(x) + 1 on the raw (unscaled) vector: positive, head_dim wide."""

    def num_features(self, head_dim: int) -> int:
        return head_dim

    def forward(self, x: Tensor) -> Tensor:
        """x: (batch, heads, n, head_dim) -> phi of the same shape."""
        return F.elu(x) + 1.0

    def features(self, x: Tensor, positions: Tensor, context: Any, is_query: bool) -> FeatureOutput:
        return self(x), None

    def vjp(self, context: Any) -> FeatureVjp:
        return elu_features_vjp


def elu_features_vjp(
    x: Tensor, positions: Tensor, phi: Tensor, grad_phi: Tensor, grad_log_scale: Tensor | None
) -> Tensor:
    """Backward of elu+1 from its output alone: d phi / d x is 1 where x > 0 (phi > 1) and
    exp(x) = phi where x <= 0, i.e. min(phi, 1). Returns grad_phi * min(phi, 1), written over
    grad_phi: no autograd graph."""
    return grad_phi.mul_(phi.clamp(max=1.0))
