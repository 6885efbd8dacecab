"""FeatureMap: the one thing a linear-attention variant defines.

A map turns q or k of shape (batch, heads, n, head_dim) into features phi of shape
(batch, heads, n, num_features). The minimum is `num_features` and `forward`:

    class SquaredReLU(FeatureMap):
        def num_features(self, head_dim: int) -> int:
            return head_dim

        def forward(self, x: Tensor) -> Tensor:
            return torch.relu(x) ** 2

LinearAttention and its kernels (attention/kernels/) supply the rest: padding, causal masking,
chunking, the recurrent step, float32 state under autocast, torch.compile, and gradients by
autograd through a recomputation of the map. Maps that need more override the optional methods
below; every one has a default that a plain map never needs to touch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

# (phi, log_scale): phi (batch, heads, n, num_features); log_scale None or (batch, heads, n),
# meaning the true feature vector is phi * exp(log_scale) (see FeatureMap.features).
FeatureOutput = tuple[Tensor, Tensor | None]
# Analytic backward (x, positions, phi, grad_phi, grad_log_scale, out) -> None: writes
# d loss / d x into `out` and may overwrite phi and grad_phi; grad_log_scale is None for queries
# and for maps without a log-scale.
FeatureVjp = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor | None, Tensor], None]


class FeatureMap(nn.Module):
    """phi of a linear attention: (batch, heads, n, head_dim) -> (batch, heads, n, num_features).

    Each LinearAttention layer holds its own copy of the map and calls `setup(head_dim, causal)`
    on it once, so state that depends on head_dim or on a random draw (a projection, learned
    weights) belongs in `setup`, where every layer gets its own. (Hydra builds a nested
    `feature_map` config once for all the layers a `_partial_` attention config makes: the copy
    is what keeps them apart.)
    """

    def num_features(self, head_dim: int) -> int:
        """Width of phi for q, k of `head_dim` dimensions."""
        raise NotImplementedError(f"{type(self).__name__} must define num_features(head_dim).")

    def setup(self, head_dim: int, causal: bool) -> None:
        """Called once per layer, on the layer's own copy, with its head_dim and mode."""

    def context(self, mask: Tensor | None, batch: int, length: int, device) -> Any:
        """What the map needs that is fixed for one attention call, its backward included
        (cosFormer's per-sequence M, a snapshot of Performer's projection), or None.
        mask: bool (batch, length) or None; `length` is the number of positions seen so far."""
        return None

    def features(
        self, x: Tensor, positions: Tensor, context: Any, is_query: bool,
        out: Tensor | None = None,
    ) -> FeatureOutput:
        """phi of x (batch, heads, n, head_dim) at absolute `positions` (n,).

        Returns (phi, log_scale). A map may return a per-token log_scale (batch, heads, n) for
        keys: the true features are then phi * exp(log_scale), and the kernels apply an exact,
        causal-safe stabiliser (a running maximum) instead of exponentiating large numbers.
        `out` (batch, heads, n, num_features), when given, is a buffer the map may write phi
        into and return (only when the map has an analytic `vjp`: there is no autograd graph
        then). The default calls forward(x) and ignores positions, context and out.
        """
        return self(x), None

    def vjp(self, context: Any) -> FeatureVjp | None:
        """The analytic backward of `features` for this call (see FeatureVjp), or None to
        differentiate a recomputation with autograd. A speed-up only; torch.compile traces the
        bidirectional kernel in one graph only with one."""
        return None

    def check_length(self, length: int) -> None:
        """Raise ValueError if `length` tokens cannot be handled (cosFormer's causal M)."""

    def on_training_call(self) -> None:
        """Called once per LinearAttention.forward in training mode (Performer's redraws)."""
