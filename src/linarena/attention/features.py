"""The features of one attention call, computed once for the whole sequence.

A map with an analytic backward (FeatureMap.vjp) runs without an autograd graph: its backward
is the vjp, applied once to the full-length gradients the kernel returns, reading the phi the
kernel keeps for its own backward (so phi is stored once). Any other map is differentiated by
autograd.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from linarena.attention.feature_map import FeatureMap, FeatureOutput, FeatureVjp


class _AnalyticFeatures(torch.autograd.Function):
    """phi, log_scale = feature_map.features(x, ...), with the map's vjp as backward."""

    @staticmethod
    def forward(ctx, x, positions, feature_map, context, is_query, vjp):
        with torch.no_grad():
            phi, log_scale = feature_map.features(x, positions, context, is_query)
        ctx.save_for_backward(x, positions, phi)
        ctx.vjp = vjp
        if log_scale is None:
            return phi
        return phi, log_scale

    @staticmethod
    def backward(ctx, grad_phi, grad_log_scale=None):
        x, positions, phi = ctx.saved_tensors
        grad_x = ctx.vjp(x, positions, phi, grad_phi, grad_log_scale)
        return grad_x, None, None, None, None, None


def compute_features(
    feature_map: FeatureMap, x: Tensor, positions: Tensor, context: Any, is_query: bool,
    vjp: FeatureVjp | None,
) -> FeatureOutput:
    """(phi (batch, heads, n, m), log_scale (batch, heads, n) or None) of x (batch, heads, n, d)
    at `positions` (n,); `vjp`: feature_map.vjp(context)."""
    if vjp is None or not torch.is_grad_enabled() or not x.requires_grad:
        return feature_map.features(x, positions, context, is_query)
    out = _AnalyticFeatures.apply(x, positions, feature_map, context, is_query, vjp)
    return out if isinstance(out, tuple) else (out, None)
