"""FeatureMap: the one thing a linear-attention variant defines.

A map turns q or k of shape (batch, heads, n, head_dim) into features phi of shape
(batch, heads, n, num_features). The minimum is `num_features` and `forward`:

    class SquaredReLU(FeatureMap):
        def num_features(self, head_dim: int) -> int:
            return head_dim

        def forward(self, x: Tensor) -> Tensor:
            return torch.relu(x) ** 2

The kernels (attention/engine/linear/) apply the map chunk by chunk (attention/features.py)
and supply the rest: padding, causal masking, chunking, the recurrent step, float32 state under
autocast, torch.compile, and gradients (recomputing phi per chunk in the backward pass).
Maps that need more override the optional methods below; every one has a default that a plain
map never needs to touch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

# (phi, log_scale): phi (batch, heads, n, num_features); log_scale None or (batch, heads, n),
# meaning the true feature vector is phi * exp(log_scale) (see FeatureMap.features).
FeatureOutput = tuple[Tensor, Tensor | None]
# Analytic backward (x, positions, phi, grad_phi, grad_log_scale) -> d loss / d x: may overwrite
# grad_phi and phi (the kernels call it once they are done with both); grad_log_scale is None
# for a map without a log-scale, or where the loss does not depend on it.
FeatureVjp = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor | None], Tensor]


class FeatureMap(nn.Module):
    """phi of a linear attention: (batch, heads, n, head_dim) -> (batch, heads, n, num_features).

    Each LinearAttention layer holds its own copy of the map and calls `setup(head_dim, causal)`
    on it once, so state that depends on head_dim or on a random draw (a projection, learned
    weights) belongs in `setup`, where every layer gets its own. (Hydra builds a nested
    `feature_map` config once for all the layers a `_partial_` attention config makes: the copy
    is what keeps them apart.)

    A map with trainable weights casts them to its input's dtype (`weight.to(x.dtype)`): the
    float64 reference tests run float64 q, k through a module whose parameters stay float32,
    and the kernels recompute phi chunk by chunk in the computation's dtype (its weights'
    gradients then sum in that dtype too: features.MapFeaturesCall).
    """

    # Whether features() takes a keyword `out`: a (batch, heads, n, num_features) buffer to
    # write phi into (the kernels reuse one from chunk to chunk when nothing needs phi's
    # autograd graph; see attention/buffers.py). A speed-up only.
    writes_into = False

    def num_features(self, head_dim: int) -> int:
        """Width of phi for q, k of `head_dim` dimensions."""
        raise NotImplementedError(f"{type(self).__name__} must define num_features(head_dim).")

    def input_dim(self, head_dim: int) -> int:
        """How many leading components of q and k the map reads (all head_dim by default).
        Relative positions rotate those as a RoPE of that width (linarena.attention.rotation),
        so that its slow pairs, which carry content across distance, are among them."""
        return head_dim

    def setup(self, head_dim: int, causal: bool) -> None:
        """Called once per layer, on the layer's own copy, with its head_dim and mode."""

    def context(self, mask: Tensor | None, batch: int, length: int, device) -> Any:
        """What the map needs that is fixed for one attention call, its backward included
        (cosFormer's per-sequence M, a snapshot of Performer's projection), or None.
        mask: bool (batch, length) or None; `length` is the number of positions seen so far."""
        return None

    def features(self, x: Tensor, positions: Tensor, context: Any, is_query: bool) -> FeatureOutput:
        """phi of x (batch, heads, n, head_dim) at absolute `positions` (n,).

        Returns (phi, log_scale). A map may return a per-token log_scale (batch, heads, n): the
        true features are then phi * exp(log_scale). For keys the kernels apply it through an
        exact, causal-safe stabiliser (a running maximum) instead of exponentiating large
        numbers; for queries it cancels between numerator and denominator and only places eps
        on the true denominator. The default calls forward(x) and ignores positions and context.
        """
        return self(x), None

    def vjp(self, context: Any) -> FeatureVjp | None:
        """The analytic backward of `features` for this call (see FeatureVjp), or None to
        differentiate the map with torch.func.vjp (linarena.attention.features). A speed-up
        only; a map with trainable parameters is always differentiated by torch.func, since a
        vjp gives d loss / d x alone."""
        return None

    def check_length(self, length: int) -> None:
        """Raise ValueError if `length` tokens cannot be handled (cosFormer's causal M)."""

    def on_training_call(self) -> None:
        """Called once per LinearAttention.forward in training mode (Performer's redraws)."""

    def state_key(self) -> str:
        """What a recurrent state made by this map depends on beyond its shape (the map's type
        and settings: cosFormer's M, Performer's seed), so step() can refuse another map's."""
        return f"{type(self).__name__}({self.extra_repr()})"
