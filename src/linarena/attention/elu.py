"""Linear Transformer attention (Katharopoulos et al. 2020, "Transformers are RNNs")."""

from __future__ import annotations

from torch import Tensor

from linarena.attention.feature_maps import FeatureOutput, elu_features
from linarena.attention.linear import LinearAttention


class EluAttention(LinearAttention):
    """Linear attention with phi(x) = elu(x) + 1 applied to the raw q and k."""

    def feature_map(
        self, x: Tensor, positions: Tensor, scale_length: Tensor | None, is_query: bool
    ) -> FeatureOutput:
        return elu_features(x)
