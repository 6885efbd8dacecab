"""elu+1 features (Katharopoulos et al. 2020, "Transformers are RNNs")."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from linarena.attention.buffers import write_into
from linarena.attention.feature_map import FeatureMap, FeatureOutput, FeatureVjp


class EluFeatures(FeatureMap):
    """phi(x) = elu(x) + 1 on the raw (unscaled) vector: positive, head_dim wide."""

    def num_features(self, head_dim: int) -> int:
        return head_dim

    def forward(self, x: Tensor) -> Tensor:
        """x: (batch, heads, n, head_dim) -> phi of the same shape.

        elu(x) + 1 is x + 1 for x > 0 and exp(x) otherwise: computed as (x - m) + exp(m) with
        m = min(x, 0), one exp and no expm1 (F.elu's), about twice as fast on CPU, two
        temporaries, and exact where elu(x) + 1 rounds exp(x) - 1 + 1 (to 0 for x < -17 in
        float32). Autograd's derivative is exp(m) = min(phi, 1), 1 at x = 0 too."""
        low = x.clamp(max=0.0)
        return (x - low).add_(low.exp_())

    writes_into = True

    def features(self, x: Tensor, positions: Tensor, context: Any, is_query: bool,
                 out: Tensor | None = None) -> FeatureOutput:
        """forward(x), or exp(min(x, 0)) + relu(x) written into `out` (one temporary)."""
        if out is None:
            return self(x), None
        return write_into(out, torch.clamp, x, None, 0.0).exp_().add_(F.relu(x)), None

    def vjp(self, context: Any) -> FeatureVjp:
        return elu_features_vjp


def elu_features_vjp(
    x: Tensor, positions: Tensor, phi: Tensor, grad_phi: Tensor, grad_log_scale: Tensor | None
) -> Tensor:
    """Backward of elu+1 from its output alone: d phi / d x is 1 where x > 0 (phi > 1) and
    exp(x) = phi where x <= 0, i.e. min(phi, 1). Returns grad_phi * min(phi, 1), written over
    grad_phi (and min(phi, 1) over phi): no autograd graph, no temporary."""
    return grad_phi.mul_(phi.clamp_(max=1.0))
