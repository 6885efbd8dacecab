"""Based's Taylor feature map (Arora et al. 2024, "Simple linear attention language models
balance the recall-throughput tradeoff"): the 2nd-order Taylor expansion of exp(q . k / sqrt(d))."""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import Tensor

from linarena.attention.buffers import write_into
from linarena.attention.feature_map import FeatureMap, FeatureOutput, FeatureVjp


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

    def input_dim(self, head_dim: int) -> int:
        return self._dim(head_dim)

    def num_features(self, head_dim: int) -> int:
        d = self._dim(head_dim)
        return 1 + d + d * d

    def forward(self, x: Tensor) -> Tensor:
        """x: (batch, heads, n, head_dim) -> (batch, heads, n, 1 + d + d^2)."""
        x = x[..., : self._dim(x.shape[-1])]
        d = x.shape[-1]
        second = (x[..., :, None] * x[..., None, :]).flatten(-2) / math.sqrt(2 * d)
        return torch.cat([x.new_ones(*x.shape[:-1], 1), x / d**0.25, second], dim=-1)

    writes_into = True

    def features(self, x: Tensor, positions: Tensor, context: Any, is_query: bool,
                 out: Tensor | None = None) -> FeatureOutput:
        """forward(x), or the same written into `out` (batch, heads, n, 1 + d + d^2)."""
        if out is None:
            return self(x), None
        x = x[..., : self._dim(x.shape[-1])]
        d = x.shape[-1]
        out[..., 0].fill_(1.0)
        write_into(out[..., 1:1 + d], torch.mul, x, d**-0.25)
        write_into(out[..., 1 + d:].unflatten(-1, (d, d)), torch.mul, x[..., :, None],
                   x[..., None, :] / math.sqrt(2 * d))
        return out, None

    def vjp(self, context: Any) -> FeatureVjp:
        return functools.partial(taylor_features_vjp, dim=self._dim)

    def extra_repr(self) -> str:
        return f"feature_dim={self.feature_dim}"


def taylor_features_vjp(
    x: Tensor, positions: Tensor, phi: Tensor, grad_phi: Tensor, grad_log_scale: Tensor | None,
    dim: Any,
) -> Tensor:
    """Backward of TaylorFeatures.features; dim(head_dim) -> d. On the first d components of x:
    d loss / d x = g_1 / d^(1/4) + (G + G^T) x / sqrt(2 d), with g_1 the gradient of the linear
    features and G (d, d) that of the quadratic ones; 0 on the others, which phi does not read.
    """
    d = dim(x.shape[-1])
    xd = x[..., :d]
    quadratic = grad_phi[..., 1 + d:].unflatten(-1, (d, d))
    part = (quadratic @ xd[..., None])[..., 0] + (xd[..., None, :] @ quadratic)[..., 0, :]
    part.mul_(1 / math.sqrt(2 * d))
    grad_x = torch.zeros_like(x)
    write_into(grad_x[..., :d], torch.add, part, grad_phi[..., 1:1 + d], alpha=d**-0.25)
    return grad_x
