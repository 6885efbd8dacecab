"""What every PyTorch linear-attention kernel shares: notation, key weights and the state.

out_i = phi(q_i) S / (phi(q_i) . z + eps),  S = sum_j w_j phi(k_j) v_j^T,  z = sum_j w_j phi(k_j),
with j over all keys (bidirectional) or keys j <= i (causal). The key weight w_j is 0 for a
padded key, and exp(log_scale_j - top) when the feature map returns a log-scale (see
FeatureMap.features), where `top` is a maximum over the keys the query may see. Weights
multiply v (d_v wide) instead of phi(k) (m wide, 4x wider for Performer).

Everything here runs in the dtype it is given (float32 or float64): LinearAttention upcasts, so
the state S and the normaliser z never accumulate in half precision. Stabilisers (`top`,
running maxima) are detached: the output does not depend on them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from linarena.attention.feature_map import FeatureMap, FeatureOutput

# (x, positions, is_query, out=None) -> (phi, log_scale): a map's features for one call.
FeatureFn = Callable[..., FeatureOutput]


def bind_context(feature_map: FeatureMap, context: Any) -> FeatureFn:
    """feature_map.features with this call's context bound, in the kernels' signature."""

    def features(
        x: Tensor, positions: Tensor, is_query: bool, out: Tensor | None = None
    ) -> FeatureOutput:
        return feature_map.features(x, positions, context, is_query, out)

    return features


def _lowest(dtype: torch.dtype) -> float:
    # A finite "minus infinity": exp() of it is 0 and differences of two of them are 0, not NaN.
    return torch.finfo(dtype).min


def masked_log_scale(log_scale: Tensor, mask: Tensor | None) -> Tensor:
    """Padded keys get the lowest log-scale: weight 0, and they never win a maximum."""
    if mask is None:
        return log_scale
    return log_scale.masked_fill(~mask[:, None, :], _lowest(log_scale.dtype))


def plain_weights(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """Key weights (batch, 1, n) of a map without log-scale: the padding mask, or None."""
    return None if mask is None else mask[:, None, :].to(dtype)


def _weighted(x: Tensor, weights: Tensor | None) -> Tensor:
    return x if weights is None else x * weights[..., None]


def _weight_sum(phi: Tensor, weights: Tensor | None) -> Tensor:
    """sum_j w_j phi_j over dim -2: (batch, heads, m)."""
    if weights is None:
        return phi.sum(dim=-2)
    return (weights.unsqueeze(-2).expand(*phi.shape[:2], 1, -1) @ phi).squeeze(-2)


@dataclass
class LinearAttentionState:
    """The recurrent state of causal linear attention after `position` tokens.

    kv: (batch, heads, m, d_v), sum of w_j phi(k_j) v_j^T; z: (batch, heads, m), sum of
    w_j phi(k_j); top: (batch, heads), the running maximum log-scale the weights are relative
    to (the lowest float when the feature map has no log-scale).
    """

    kv: Tensor
    z: Tensor
    top: Tensor
    position: int

    @classmethod
    def zeros(cls, like: Tensor, num_features: int, value_dim: int) -> LinearAttentionState:
        """A state before any token, for a batch shaped like `like` (batch, heads, ...)."""
        batch, heads = like.shape[:2]
        kv = like.new_zeros(batch, heads, num_features, value_dim)
        z = like.new_zeros(batch, heads, num_features)
        top = like.new_full((batch, heads), _lowest(like.dtype))
        return cls(kv, z, top, 0)

    def absorb(
        self, phi_k: Tensor, log_scale: Tensor | None, v: Tensor, mask: Tensor | None = None
    ) -> LinearAttentionState:
        """Add keys phi_k (batch, heads, c, m), values v (batch, heads, c, d_v), mask (batch, c)."""
        kv, z, top = self.kv, self.z, self.top
        if log_scale is None:
            weights = plain_weights(mask, phi_k.dtype)
        else:
            log_scale = masked_log_scale(log_scale, mask)
            new_top = torch.maximum(top, log_scale.detach().amax(dim=-1))
            decay = torch.exp(top - new_top)
            kv, z, top = kv * decay[..., None, None], z * decay[..., None], new_top
            weights = torch.exp(log_scale - top[..., None])
        kv = kv + phi_k.transpose(-1, -2) @ _weighted(v, weights)
        z = z + _weight_sum(phi_k, weights)
        return LinearAttentionState(kv, z, top, self.position + phi_k.shape[2])
