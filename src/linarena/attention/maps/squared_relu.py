"""phi(x) = relu(x)^2: the minimal FeatureMap, an example of adding a variant (this file plus
conf/attention/squared_relu.yaml)."""

from __future__ import annotations

import torch
from torch import Tensor

from linarena.attention.feature_map import FeatureMap


class SquaredReLU(FeatureMap):
    """phi(x) = relu(x)^2 elementwise, head_dim features."""

    def num_features(self, head_dim: int) -> int:
        return head_dim

    def forward(self, x: Tensor) -> Tensor:
        """x: (batch, heads, n, head_dim) -> phi of the same shape."""
        return torch.relu(x) ** 2
