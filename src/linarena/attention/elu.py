"""Linear Transformer attention (Katharopoulos et al. 2020, "Transformers are RNNs")."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from linarena.attention.feature_maps import FeatureOutput, elu_features, elu_features_vjp
from linarena.attention.linear import LinearAttention
from linarena.attention.linear_kernels import FeatureVjp


class EluAttention(LinearAttention):
    """Linear attention with phi(x) = elu(x) + 1 applied to the raw q and k."""


    def feature_map(
        self, x: Tensor, positions: Tensor, context: Any, is_query: bool,
        out: Tensor | None = None,
    ) -> FeatureOutput:
        return elu_features(x, out)

    def feature_map_vjp(self, context: Any) -> FeatureVjp:
        return elu_features_vjp
