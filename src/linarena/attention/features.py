"""A feature map applied chunk by chunk inside the kernels, and its backward.

The kernels call the map on one chunk of q or k at a time, where phi stays in cache, and call
it again in their backward pass instead of keeping phi: no (batch, heads, n, m) feature tensor
is ever stored. The backward of a chunk's features is the map's analytic vjp when it has one
(FeatureMap.vjp); otherwise torch.func.vjp differentiates the map on the chunk (which also
traces under torch.compile, where torch.autograd.grad inside a backward would not). A map with
trainable parameters always takes the torch.func path, with the parameters as inputs, so their
gradients are computed (an analytic vjp gives d loss / d x only). Without autograd (inside the
kernels), a map that `writes_into` puts phi in a buffer reused from chunk to chunk
(attention/buffers.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from linarena.attention.buffers import Scratch
from linarena.attention.feature_map import FeatureMap, FeatureOutput

# (grad_phi, grad_log_scale or None) -> (d loss / d x, d loss / d each trainable parameter).
Pullback = Callable[[Tensor, Tensor | None], tuple[Tensor, tuple[Tensor, ...]]]


class MapFeaturesCall(nn.Module):
    """feature_map.features as a module call, so that torch.func.functional_call can run it with
    the map's parameters replaced by vjp's inputs. Built once per attention layer, not per call:
    torch.compile refuses a module created inside the region it traces ("getattr() on
    nn.Module with pending mutation"), so a per-call wrapper broke fullgraph for learned maps."""

    def __init__(self, feature_map: FeatureMap) -> None:
        super().__init__()
        self.map = feature_map

    def forward(self, x: Tensor, positions: Tensor, context: Any, is_query: bool) -> FeatureOutput:
        return self.map.features(x, positions, context, is_query)


class ChunkFeatures:
    """The features of one attention call, chunk by chunk.

    Args:
        map_call: the layer's MapFeaturesCall of its map.
        context: feature_map.context(...) of this call.
        positions: (n,) the absolute positions of the call's tokens.
    """

    def __init__(self, map_call: MapFeaturesCall, context: Any, positions: Tensor) -> None:
        self.map_call = map_call
        self.feature_map = feature_map = map_call.map
        self.context = context
        self.positions = positions
        named = [(name, p) for name, p in feature_map.named_parameters() if p.requires_grad]
        self.param_names = tuple(f"map.{name}" for name, _ in named)
        # Trainable parameters: what the kernels' autograd.Functions take as extra inputs.
        self.params = tuple(p for _, p in named)
        self.analytic = None if self.params else feature_map.vjp(context)
        self._scratch = Scratch()  # where writes_into maps put phi

    def num_features(self, head_dim: int) -> int:
        """m, the width of phi."""
        return self.feature_map.num_features(head_dim)

    def __call__(self, x: Tensor, lo: int, hi: int, is_query: bool, slot: str = "phi"
                 ) -> FeatureOutput:
        """(phi (batch, heads, c, m), log_scale (batch, heads, c) or None) of the chunk
        x (batch, heads, c, head_dim) at tokens lo:hi of the call. Without autograd, a map that
        writes_into writes phi into the buffer `slot`, which the next call with that slot
        overwrites (a kernel that keeps the queries' and the keys' phi names two)."""
        return self._features(x, self.positions[lo:hi], is_query, slot)

    def _features(self, x: Tensor, positions: Tensor, is_query: bool, slot: str
                  ) -> FeatureOutput:
        if not self.feature_map.writes_into or torch.is_grad_enabled():
            return self.feature_map.features(x, positions, self.context, is_query)
        out = self._scratch(slot, x, *x.shape[:-1], self.num_features(x.shape[-1]))
        return self.feature_map.features(x, positions, self.context, is_query, out=out)

    def recompute(self, x: Tensor, lo: int, hi: int, is_query: bool, slot: str = "phi"
                  ) -> tuple[Tensor, Tensor | None, Pullback]:
        """The chunk's phi and log_scale again (for a backward pass; phi in `slot` as for
        __call__), and their pullback."""
        positions = self.positions[lo:hi]
        if self.analytic is not None:
            phi, log_scale = self._features(x, positions, is_query, slot)

            def analytic(grad_phi: Tensor, grad_log_scale: Tensor | None):
                return self.analytic(x, positions, phi, grad_phi, grad_log_scale), ()

            return phi, log_scale, analytic

        def features(x: Tensor, *params: Tensor) -> tuple[Tensor, Tensor]:
            if params:  # the map run with vjp's parameters
                phi, log_scale = torch.func.functional_call(
                    self.map_call, dict(zip(self.param_names, params, strict=True)),
                    (x, positions, self.context, is_query))
            else:
                phi, log_scale = self.feature_map.features(x, positions, self.context, is_query)
            # vjp needs tensors: a map without log-scales gets a constant stand-in.
            return phi, x.new_zeros(()) if log_scale is None else log_scale

        # Parameters in the computation's dtype: their per-chunk gradients sum without rounding.
        params = (p.to(x.dtype) for p in self.params)
        (phi, log_scale), vjp = torch.func.vjp(features, x, *params)

        def generic(grad_phi: Tensor, grad_log_scale: Tensor | None):
            if grad_log_scale is None:
                grad_log_scale = torch.zeros_like(log_scale)
            grad_x, *grad_params = vjp((grad_phi, grad_log_scale))
            return grad_x, tuple(grad_params)

        return phi, None if log_scale.dim() == 0 else log_scale, generic


class ParamGrads:
    """d loss / d the map's trainable parameters, summed over the chunks of one backward pass
    in the computation's dtype (float64 stays exact), handed back in each parameter's."""

    def __init__(self, params: tuple[Tensor, ...]) -> None:
        self.params = params
        self.totals: list[Tensor] | None = None

    def add(self, grads: tuple[Tensor, ...]) -> None:
        """Add one chunk's gradients (a pullback's second result; empty for an analytic vjp)."""
        if not grads:
            return
        if self.totals is None:
            self.totals = list(grads)
        else:
            for total, grad in zip(self.totals, grads, strict=True):
                total.add_(grad)

    def result(self) -> tuple[Tensor, ...]:
        """The sums, one per parameter (zeros if no chunk added any)."""
        if self.totals is None:
            return tuple(torch.zeros_like(p) for p in self.params)
        return tuple(total.to(p.dtype) for total, p in zip(self.totals, self.params, strict=True))
