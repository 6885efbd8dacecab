"""Linear-attention kernels: the algorithm, for any FeatureMap, in three forms.

A set of kernels is three functions with the signatures of the PyTorch ones:
  - bidirectional(q, k, v, mask, features, eps) -> out
  - causal(q, k, v, mask, features, eps, chunk_size, state) -> (out, state)
  - step(q, k, v, features, state, eps) -> (out, state)
`features` (linarena.attention.features.ChunkFeatures) is the layer's map bound to the call: the
kernels apply it chunk by chunk, where phi stays in cache, and recompute it in their backward
passes. TORCH (bidirectional.py, chunk.py, step.py) is the only set and the reference any other
would be tested against, with naive.py's quadratic float64 formulas (the map's phi q . phi k
weights, masked and normalised) as the short naive reference of all three. (fla-core has no
kernel for feature maps; see linarena.attention.engine.backend.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from linarena.attention.engine.linear.bidirectional import bidirectional
from linarena.attention.engine.linear.chunk import chunked_causal
from linarena.attention.engine.linear.common import LinearAttentionState
from linarena.attention.engine.linear.step import recurrent_step


@dataclass(frozen=True)
class Kernels:
    """The three kernels of one implementation."""

    bidirectional: Callable
    causal: Callable
    step: Callable


TORCH = Kernels(bidirectional, chunked_causal, recurrent_step)

__all__ = ["TORCH", "Kernels", "LinearAttentionState"]
