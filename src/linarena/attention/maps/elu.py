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
        """x: (batch, heads, n, head_dim) -> phi of the same shape."""
        return F.elu(x) + 1.0

    def features(
        self, x: Tensor, positions: Tensor, context: Any, is_query: bool,
        out: Tensor | None = None,
    ) -> FeatureOutput:
        phi = F.elu(x) if out is None else F.elu_(out.copy_(x))
        return phi.add_(1.0), None  # in place: elu saves its input, not its output

    def vjp(self, context: Any) -> FeatureVjp:
        return elu_features_vjp


def elu_features_vjp(
    x: Tensor, positions: Tensor, phi: Tensor, grad_phi: Tensor, grad_log_scale: Tensor | None,
    out: Tensor,
) -> None:
    """Backward of elu+1 from its output alone: d phi / d x is 1 where x > 0 (phi > 1) and
    exp(x) = phi where x <= 0, i.e. min(phi, 1). Writes grad_phi * min(phi, 1) into `out`
    (overwriting phi): one pass, no autograd graph, no copy."""
    write_into(out, torch.mul, grad_phi, phi.clamp_(max=1.0))
